"""The static Engine's pipeline path on CPU/gloo, and paddle-ext's schedules inside it.

``install_static()`` (idempotent; ``paddle_ext.install()`` calls it) applies these named fixes,
each checked on the real Paddle object and revertible like :mod:`.fixes`:

* ``static-gloo-collectives`` -- two CPU gaps, one fix. ``send_v2``/``recv_v2`` have only
  throwing CPU kernels ("Do not support send for cpu kernel now."), and every CPU collective
  kernel takes its communicator from the one shared CPU DeviceContext, which the executor binds
  to the *first* collective it builds (``SetDeviceCommContext``: "if (!dev_ctx->GetCommContext())"),
  so all rings of a process silently share one communicator. After the Engine has built what it
  runs (the pipeline plan's job programs, else the dense program), every ``send_v2``,
  ``recv_v2``, ``all_reduce``, ``all_gather`` and ``broadcast`` is rewritten into a small C++
  op (built once with ``paddle.utils.cpp_extension``, cached) that looks its ring up in
  ``CommContextManager`` when it runs. Communicators are named by their ordered ranks, not by
  ring id (Paddle numbers static groups in a rank-dependent order, so two groups can share an
  id on different ranks), and ``Engine._init_comm`` creates them in one global order.
  Point-to-point uses one 2-rank channel per direction
  (a FIFO); a send enqueues a copy and returns, like NCCL's, and a per-channel thread does the
  blocking gloo send, so a rank only waits in receives: any job order whose sends and receives
  agree in order per channel runs (Paddle's FThenB, 1F1B, VPP and paddle-ext's lowered IR
  schedules do). The rewrite runs after the pipeline pass, which therefore still sees
  ``send_v2``/``recv_v2`` and classifies its jobs by op name.
* ``static-pipeline-schedules`` -- ``pir_pass.pipeline_pass`` asserts the schedule is FThenB,
  1F1B or VPP; it is replaced (in ``pir_pass`` and in ``engine``, which imported it by name) by
  one that runs any registered ``pipeline_scheduler_<NAME>`` pass, matches names
  case-insensitively and lists the available names when one is unknown.
* ``static-engine-chunks`` -- the Engine only assigns chunk ids (``complete_chunk_id``) and
  checks them when ``schedule_mode == "VPP"``, and fetches the loss from job ``"forward"`` or
  (VPP) ``"forward{vpp_degree-1}"``. For paddle-ext's multi-chunk schedules the Engine sees
  "VPP" while it builds the program; at run time the loss is read from the forward job that
  defines it when the job Paddle asks for does not exist.
* ``static-eager-param-reshard`` -- ``ProgramHelper.init_pir`` reshards every dist parameter
  eagerly, including other stages' ones; on CPU builds an eager reshard on a rank outside both
  meshes segfaults in ``GetDefaultPlace``. During ``init_pir`` such a reshard returns the
  parameter unchanged (the rank holds nothing of it, which is what Paddle expects).

Also here (compat is the only module touching ``core.Job``/``core.Plan``/pass registries):
:func:`make_plan`, :func:`pipeline_pass_base`, :func:`register_pipeline_pass`,
:func:`available_schedule_modes`, :func:`comm_key`, :func:`p2p_key`.
"""
from __future__ import annotations

import logging

from ..errors import ScheduleError
from .fixes import Fix, _cpu_only, apply_fixes, revert_fixes
from .version import require_paddle

logger = logging.getLogger("paddle_ext.static")

ENGINE_MODULE = "paddle.distributed.auto_parallel.static.engine"
PIR_PASS_MODULE = "paddle.distributed.auto_parallel.static.pir_pass"
HELPER_MODULE = "paddle.distributed.auto_parallel.static.helper"
PASS_PREFIX = "pipeline_scheduler_"
# Paddle's registered names whose PIR pass cannot build a plan (no _partial_pir_programs)
_PADDLE_BROKEN = frozenset({"ZBH1", "ZBVPP", "Eager1F1B"})


# ------------------------------------------------------------------------------- registries
def pipeline_pass_base():
    """Paddle's ``PipelinePassBase`` (subclass it and implement ``_create_job_list`` and
    ``_partial_pir_programs``)."""
    require_paddle("static pipeline passes")
    from paddle.distributed.passes.pipeline_scheduler_pass.pipeline_pass_base import PipelinePassBase

    return PipelinePassBase


def register_pipeline_pass(name: str, cls) -> None:
    """Register ``cls`` as ``pipeline_scheduler_<name>`` (overwrites a broken Paddle pass)."""
    require_paddle("static pipeline passes")
    from paddle.distributed.passes.pass_base import register_pass

    register_pass(PASS_PREFIX + name)(cls)


def registered_pipeline_passes() -> dict:
    require_paddle("static pipeline passes")
    import paddle.distributed.passes  # noqa: F401 - registers Paddle's passes
    from paddle.distributed.passes.pass_base import PassBase

    return {name[len(PASS_PREFIX):]: cls for name, cls in PassBase._REGISTERED_PASSES.items()
            if name.startswith(PASS_PREFIX)}


def available_schedule_modes() -> list[str]:
    """``schedule_mode`` values that build a plan: Paddle's working passes and paddle-ext's."""
    return sorted(n for n, cls in registered_pipeline_passes().items()
                  if n not in _PADDLE_BROKEN or getattr(cls, "paddle_ext_schedule", None))


def resolve_schedule_mode(name: str) -> str:
    """The registered name for ``name`` (exact, else case-insensitive); raises with the list."""
    modes = available_schedule_modes()
    if name in modes:
        return name
    lower = {m.lower(): m for m in modes}
    if str(name).lower() in lower:
        return lower[str(name).lower()]
    import difflib

    close = difflib.get_close_matches(str(name).lower(), list(lower), n=3, cutoff=0.5)
    hint = f" (did you mean {', '.join(lower[c] for c in close)}?)" if close else ""
    raise ScheduleError(
        f"unknown pipeline schedule_mode {name!r}{hint}; available: {', '.join(modes)}. Set "
        f"strategy.pipeline.schedule_mode to one of them (paddle-ext's need paddle_ext.install())")


def pass_utils():
    """``paddle.distributed.passes.pass_utils`` (op-role completion, chunk inference, skip-gc)."""
    require_paddle("static pipeline passes")
    from paddle.distributed.passes import pass_utils as module

    return module


def device_place_attr():
    """The ``Place`` value PIR block keyword arguments carry (``place_attr``): the device this
    process runs on, as Paddle's own program split chooses it (the expected place; on CUDA the
    launcher's device id), so a split program on a GPU never lands on the CPU."""
    import paddle
    from paddle.base.framework import _current_expected_place_

    place = _current_expected_place_()
    if isinstance(place, paddle.framework.CUDAPlace):
        place = paddle.framework.CUDAPlace(paddle.distributed.ParallelEnv().dev_id)
    attr = paddle.base.libpaddle.Place()
    attr.set_place(place)
    return attr


def overlap_attrs(name: str, environ=None) -> dict:
    """Pass attributes Paddle's own pipeline pass sets from the environment: for 1F1B,
    ``FLAGS_1f1b_backward_forward_overlap`` (default 0), read exactly as Paddle reads it.

    >>> overlap_attrs("1F1B", {}), overlap_attrs("1F1B", {"FLAGS_1f1b_backward_forward_overlap": "1"})
    ({'enable_backward_forward_overlap': 0}, {'enable_backward_forward_overlap': 1})
    >>> overlap_attrs("VPP", {"FLAGS_1f1b_backward_forward_overlap": "1"})
    {}
    """
    import os

    env = os.environ if environ is None else environ
    if name != "1F1B":
        return {}
    return {"enable_backward_forward_overlap": int(env.get("FLAGS_1f1b_backward_forward_overlap", 0))}


def make_job(job_type: str, micro_batch: int):
    from paddle.base import core

    job = core.Job(job_type)
    job.set_micro_batch_id(int(micro_batch))
    return job


def make_plan(jobs, job_types, programs, num_micro_batches: int):
    """``core.Plan`` from ``(job_type, micro_batch)`` pairs and one program per job type, with
    Paddle's skip-gc bookkeeping (values a later job of the same micro-batch still needs)."""
    require_paddle("static pipeline passes")
    from paddle.base import core
    from paddle.distributed.passes.pass_utils import set_skip_gc_vars

    core_jobs = [make_job(t, mb) for t, mb in jobs]
    type_to_program = set_skip_gc_vars(num_micro_batches, list(job_types), list(programs), core_jobs)
    return core.Plan(core_jobs, type_to_program)


# ----------------------------------------------------------------- collectives on gloo (CPU)
# The ops' C++ source and why they exist: paddle_ext/csrc/gloo_ops.cc (built by .cpp_build).
_GLOO_OPS = {}  # the loaded module, once per process


def gloo_ops_dir() -> str:
    """Where the ops are built (``PADDLE_EXT_CACHE`` or ~/.cache/paddle_ext), per Paddle version."""
    from .cpp_build import paths

    return paths("gloo_ops")[0]


def load_gloo_ops():
    """Build (first use, ~30 s, then cached) and load the gloo collective ops; returns the module.

    Ranks of one launch share the build (:mod:`.cpp_build`)."""
    if "module" not in _GLOO_OPS:
        from .cpp_build import build_and_load

        _GLOO_OPS["module"] = build_and_load("gloo_ops")
    return _GLOO_OPS["module"]


def comm_key(ranks) -> str:
    """The communicator of an ordered group of global ranks (same text on every member)."""
    return "paddle_ext:" + ",".join(str(int(r)) for r in ranks)


def p2p_key(sender: int, receiver: int) -> str:
    """The one-direction point-to-point channel ``sender -> receiver`` (its ranks: [sender, receiver])."""
    return f"paddle_ext:p2p:{int(sender)}>{int(receiver)}"


def wanted_communicators() -> list:
    """``(key, ordered ranks)`` of every communicator the static groups need, in one global order.

    Paddle numbers static groups in a rank-dependent order (ranks 0,1 may call [0,1] ring 31
    while ranks 2,3 call [2,3] ring 31), so a communicator is named by its ranks, never by its
    ring id, and every rank creates its own in the same (sorted) order: rendezvous among the
    members of the first unfinished one always completes."""
    from paddle.distributed.auto_parallel.static.process_group import get_all_process_groups

    wanted = set()
    for group in get_all_process_groups():
        ranks = tuple(int(r) for r in group.ranks)
        if len(ranks) >= 2:
            wanted.add((comm_key(ranks), ranks))
        if group.group_type == "p2p" and len(ranks) == 2:
            for s_, r_ in (ranks, ranks[::-1]):
                wanted.add((p2p_key(s_, r_), (s_, r_)))
    return sorted(wanted, key=lambda item: (len(item[1]), item[1], item[0]))


_CREATED: set = set()  # communicators this process created (CommContextManager has no Python lookup)


def create_communicators() -> list:
    """Create this rank's communicators of :func:`wanted_communicators`; returns the new keys."""
    import paddle
    from paddle.base import core

    rank = paddle.distributed.get_rank()
    store = core.create_or_get_global_tcp_store()
    made = []
    for key, ranks in wanted_communicators():
        if rank in ranks and key not in _CREATED:
            core.CommContextManager.create_gloo_comm_context(store, key, ranks.index(rank), len(ranks))
            _CREATED.add(key)
            made.append(key)
    return made


# phi ReduceType (kRedSum, kRedMax, kRedMin, kRedProd) -> GlooCommContext's ReduceOp
_GLOO_REDUCE = {0: 0, 1: 2, 2: 3, 3: 4}
COLLECTIVES = ("pd_op.send_v2", "pd_op.recv_v2", "pd_op.all_reduce", "pd_op.all_reduce_", "pd_op.all_gather",
               "pd_op.broadcast", "pd_op.broadcast_")


def lower_collectives(program, rank: int, names=COLLECTIVES, ops=None) -> dict:
    """Rewrite the collectives ``names`` of ``program`` into the gloo ops; returns counts by op
    name. Groups of one rank are left to Paddle (which removes them); an unsupported reduce or
    a ring that is not a static process group raises :class:`ScheduleError`."""
    import paddle
    from paddle.distributed.auto_parallel.static.process_group import get_process_group

    ops = ops or load_gloo_ops()
    counts: dict = {}
    with paddle.static.program_guard(program):
        for op in list(program.global_block().ops):
            name = op.name()
            if name not in names:
                continue
            attrs = op.attrs()
            group = get_process_group(attrs["ring_id"])
            if group is None:
                raise ScheduleError(f"{name} on ring {attrs['ring_id']}: no static process group with that id; "
                                    "the program was not built by the Engine's reshard pass")
            if len(group.ranks) < 2:
                continue
            ring = comm_key(group.ranks)
            paddle.pir.set_insertion_point(op)
            if name in ("pd_op.send_v2", "pd_op.recv_v2"):
                peer = int(group.ranks[attrs["peer"]])
                if name == "pd_op.send_v2":
                    new = ops.pe_gloo_send(op.operand_source(0), p2p_key(rank, peer), 1)
                else:
                    like = paddle._C_ops.empty(list(attrs["out_shape"]), attrs["dtype"], paddle.CPUPlace())
                    new = ops.pe_gloo_recv(like, p2p_key(peer, rank), 0)
                    op.result(0).replace_all_uses_with(new)
            else:
                x = op.operand_source(0)
                if name.startswith("pd_op.all_reduce"):
                    if attrs["reduce_type"] not in _GLOO_REDUCE:
                        raise ScheduleError(f"{name} on {ring} with reduce_type {attrs['reduce_type']}: gloo "
                                            "supports sum, max, min and prod; use one of them")
                    new = ops.pe_gloo_all_reduce(x, ring, _GLOO_REDUCE[attrs["reduce_type"]])
                elif name == "pd_op.all_gather":
                    new = ops.pe_gloo_all_gather(x, ring, attrs["nranks"])
                else:
                    new = ops.pe_gloo_broadcast(x, ring, attrs["root"])
                op.result(0).replace_all_uses_with(new)
            op.erase()
            counts[name] = counts.get(name, 0) + 1
    return counts


_EVENT_ATTRS = ("force_record_event", "event_to_record", "events_to_wait")


def strip_stream_events(program) -> int:
    """Remove the cross-job stream events Paddle's 1F1B/VPP passes put around send/recv.

    They order GPU streams; the CPU executor runs every op in order on the host, and an event
    recorded by an op that the gloo rewrite replaced would be waited for forever."""
    count = 0
    for op in program.global_block().ops:
        for attr in _EVENT_ATTRS:
            if op.has_attr(attr):
                op.erase_attr(attr)
                count += 1
    return count


def eager_barrier() -> None:
    """A barrier on the world's dygraph gloo group, whatever mode Paddle is in (``dist.barrier``
    builds a static op in static mode)."""
    from paddle.distributed.collective import _get_global_group

    _get_global_group().process_group.barrier().wait()


def lower_engine_collectives(engine, mode) -> dict:
    """:func:`lower_collectives` on what ``engine`` runs for ``mode``: each job program of the
    pipeline plan, else the dense main program (send/recv included, events stripped)."""
    import paddle

    rank = paddle.distributed.get_rank()
    plan = engine._job_plan
    programs = ([plan.ir_program(t) for t in plan.job_types()] if plan is not None
                else [engine._pir_dense_main_progs[mode]])
    total: dict = {}
    for program in programs:
        strip_stream_events(program)
        for name, n in lower_collectives(program, rank).items():
            total[name] = total.get(name, 0) + n
    logger.info("rank %d: send/recv on gloo channels: %s", rank, total)
    return total


NOT_P2P = tuple(n for n in COLLECTIVES if n not in ("pd_op.send_v2", "pd_op.recv_v2"))


def _collectives_apply():
    import importlib

    import paddle

    engine_mod = importlib.import_module(ENGINE_MODULE)
    Engine = engine_mod.Engine
    parallel_pir, init_comm = Engine._parallel_pir, Engine._init_comm
    remove_pass = engine_mod.remove_unuseful_comm_op_pass
    load_gloo_ops()  # build now, not in the middle of the first step

    def _parallel_pir(self, mode):
        result = parallel_pir(self, mode)
        if getattr(self, "_nranks", 1) > 1:
            lower_engine_collectives(self, mode)
        return result

    def _init_comm(self):
        if getattr(self, "_nranks", 1) <= 1 or not getattr(self, "_in_pir_mode", False):
            return init_comm(self)
        from paddle.distributed.auto_parallel.static.process_group import get_all_process_groups

        made = create_communicators()
        for group in get_all_process_groups():
            group._is_instantiate = True
        logger.info("rank %d: gloo communicators %s", paddle.distributed.get_rank(), made)
        eager_barrier()  # gloo waits 30 s at most: start the slow build phases together

    def remove_unuseful_comm_op_pass(program):
        # every program the Engine runs passes here (dense main twice, startup once): collectives
        # other than send/recv move to the gloo ops now; send/recv stay visible to the
        # pipeline pass and are rewritten in its job programs afterwards
        remove_pass(program)
        if paddle.distributed.get_world_size() > 1:
            lower_collectives(program, paddle.distributed.get_rank(), names=NOT_P2P)

    for f, original in ((_parallel_pir, parallel_pir), (_init_comm, init_comm),
                        (remove_unuseful_comm_op_pass, remove_pass)):
        f.__wrapped__ = original
    Engine._parallel_pir = _parallel_pir
    Engine._init_comm = _init_comm
    engine_mod.remove_unuseful_comm_op_pass = remove_unuseful_comm_op_pass
    return [(Engine, "_parallel_pir", parallel_pir), (Engine, "_init_comm", init_comm),
            (engine_mod, "remove_unuseful_comm_op_pass", remove_pass)]


# ------------------------------------------------------------------------ pipeline_pass
def _pipeline_pass(dense_main_program, dense_startup_program, pipeline_strategy):
    """Replacement of ``pir_pass.pipeline_pass``: any registered schedule, p2p lowered to gloo."""
    from paddle.distributed.auto_parallel.static.utils import get_pp_stage_by_pp_degree
    from paddle.distributed.passes.pass_base import PassContext, new_pass

    requested = getattr(pipeline_strategy, "paddle_ext_schedule", None) or pipeline_strategy.schedule_mode
    name = resolve_schedule_mode(requested)
    attrs = {
        "num_micro_batches": pipeline_strategy.accumulate_steps,
        "pp_degree": pipeline_strategy.pp_degree,
        "pp_stage": get_pp_stage_by_pp_degree(pipeline_strategy.pp_degree),
        "vpp_degree": pipeline_strategy.vpp_degree,
        "split_backward": pipeline_strategy.split_backward,
        "schedule_name": name,
    }
    attrs.update(overlap_attrs(name))   # as Paddle's own pipeline_pass: the user's flag, not ours
    scheduler = new_pass(PASS_PREFIX + name, attrs)
    context = PassContext()
    scheduler.apply(dense_main_program, dense_startup_program, context)
    plan = context.get_attr("plan")
    if plan is None:
        raise ScheduleError(f"pipeline pass {name!r} built no plan; it needs _partial_pir_programs and "
                            "_create_job_list (Paddle's ZBH1/ZBVPP have none: use paddle-ext's ZBH1/ZBV)")
    return plan


def _schedules_apply():
    import importlib

    pir_pass = importlib.import_module(PIR_PASS_MODULE)
    engine = importlib.import_module(ENGINE_MODULE)
    from paddle_ext.passes.static.passes import register_static_passes

    register_static_passes()

    saved = [(pir_pass, "pipeline_pass", pir_pass.pipeline_pass), (engine, "pipeline_pass", engine.pipeline_pass)]
    pir_pass.pipeline_pass = _pipeline_pass
    engine.pipeline_pass = _pipeline_pass
    return saved


# ------------------------------------------------------------------ Engine: chunks and loss
def _is_multichunk_ext(pipeline) -> bool:
    cls = registered_pipeline_passes().get(_safe_resolve(pipeline.schedule_mode))
    return bool(pipeline.enable and getattr(cls, "paddle_ext_schedule", None) and pipeline.vpp_degree > 1)


def _safe_resolve(name):
    try:
        return resolve_schedule_mode(name)
    except ScheduleError:
        return name


class _LossJobPlan:
    """Stands in for ``Engine._job_plan`` inside ``Engine.run``: answers ``ir_program`` for the
    job type Paddle asks the loss from with the forward job that defines the loss."""

    def __init__(self, plan, loss_name):
        self._plan, self._loss_name = plan, loss_name

    def job_types(self):
        return self._plan.job_types()

    def ir_program(self, job_type):
        types = list(self._plan.job_types())
        if job_type in types:
            return self._plan.ir_program(job_type)
        from paddle.base.libpaddle import pir

        forwards = [t for t in types if t.startswith("forward")]
        for t in forwards:
            program = self._plan.ir_program(t)
            if not pir.is_fake_value(program.get_output_value_by_name(self._loss_name)):
                return program
        return self._plan.ir_program(forwards[-1])


def _engine_apply():
    import importlib

    import paddle

    engine_mod = importlib.import_module(ENGINE_MODULE)
    Engine = engine_mod.Engine
    parallel_pir, run = Engine._parallel_pir, Engine.run

    def _parallel_pir(self, mode):
        pipeline = self._strategy.pipeline
        if not _is_multichunk_ext(pipeline):
            return parallel_pir(self, mode)
        real = pipeline.schedule_mode
        pipeline.paddle_ext_schedule = real
        pipeline.schedule_mode = "VPP"  # complete_chunk_id/check_chunk_id run only for "VPP"
        try:
            return parallel_pir(self, mode)
        finally:
            pipeline.schedule_mode = real
            pipeline.paddle_ext_schedule = None

    def run_(self, *args, **kwargs):
        if _cpu_only() and paddle.distributed.get_world_size() > 1:
            # gloo's 30 s timeout: ranks whose build or previous step ran long catch up first
            eager_barrier()
        plan = self._job_plan
        if plan is None or not getattr(self, "_in_pir_mode", False):
            return run(self, *args, **kwargs)
        self._job_plan = _LossJobPlan(plan, self._loss_names[0])
        try:
            return run(self, *args, **kwargs)
        finally:
            self._job_plan = plan

    _parallel_pir.__wrapped__ = parallel_pir
    run_.__wrapped__ = run
    run_.__doc__ = run.__doc__
    Engine._parallel_pir = _parallel_pir
    Engine.run = run_
    return [(Engine, "_parallel_pir", parallel_pir), (Engine, "run", run)]


# ------------------------------------------------------------ eager reshard of other stages
def _param_reshard_apply():
    import importlib

    import paddle

    helper = importlib.import_module(HELPER_MODULE)
    init_pir = helper.ProgramHelper.init_pir
    core = paddle.base.core

    def guarded_reshard(reshard):
        def reshard_(tensor, dist_attr):
            rank = paddle.distributed.get_rank()
            src = tensor.process_mesh.process_ids if tensor.is_dist() else []
            if tensor.is_dist() and rank not in src and rank not in dist_attr.process_mesh.process_ids:
                return tensor  # this rank holds nothing of it either way
            return reshard(tensor, dist_attr)
        return reshard_

    def init_pir_(self, main_program, place):
        original = core.reshard
        core.reshard = guarded_reshard(original)
        try:
            return init_pir(self, main_program, place)
        finally:
            core.reshard = original

    init_pir_.__wrapped__ = init_pir
    helper.ProgramHelper.init_pir = init_pir_
    return [(helper.ProgramHelper, "init_pir", init_pir)]


def _always() -> bool:
    require_paddle("static pipeline schedules")
    return True


STATIC_FIXES: dict[str, Fix] = {
    f.name: f for f in (
        Fix("static-pipeline-schedules",
            "pipeline_pass runs any registered pipeline_scheduler_<NAME> (pir_pass and engine bindings)",
            _always, _schedules_apply),
        Fix("static-gloo-collectives",
            "executed programs' collectives and send/recv run on ring-aware gloo ops (C++, built once)",
            _cpu_only, _collectives_apply),
        Fix("static-engine-chunks",
            "Engine assigns chunk ids for paddle-ext's multi-chunk schedules; run() finds the loss job",
            _always, _engine_apply),
        Fix("static-eager-param-reshard",
            "init_pir skips the eager reshard of parameters on ranks outside their meshes (CPU segfault)",
            _cpu_only, _param_reshard_apply),
    )
}


def install_static() -> list[str]:
    """Apply the static-Engine fixes this Paddle needs (idempotent); returns those in effect."""
    return apply_fixes(STATIC_FIXES)


def uninstall_static() -> None:
    revert_fixes(STATIC_FIXES)
