"""The fixes to Paddle's static Engine that run its pipeline path on CPU/gloo with any schedule.

``install_static()`` (idempotent; ``paddle_ext.install(static_engine=True)`` calls it through
``passes/static``) applies these named fixes, each checked on the real Paddle object and
revertible like :mod:`.fixes`:

* ``static-gloo-collectives`` -- two CPU gaps, one fix. ``send_v2``/``recv_v2`` have only
  throwing CPU kernels ("Do not support send for cpu kernel now."), and every CPU collective
  kernel takes its communicator from the one shared CPU DeviceContext, which the executor binds
  to the *first* collective it builds (``SetDeviceCommContext``: "if (!dev_ctx->GetCommContext())"),
  so all rings of a process silently share one communicator. After the Engine has built what it
  runs (the pipeline plan's job programs, else the dense program), every ``send_v2``,
  ``recv_v2``, ``all_reduce``, ``all_gather``, ``broadcast`` and ``reduce_scatter`` (ZeRO's
  gradient reshard, which has no CPU kernel either) is rewritten into a small C++
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

Plain ``paddle_ext.install()`` applies one more, ``static-gloo-rings`` (:data:`RING_FIXES`): a
dense program whose collectives use two rings or more (dp x mp) runs them on the same gloo ops,
since Paddle's kernels would run them all on the first communicator, silently wrong; so does a
program with a ``reduce_scatter`` (ZeRO's gradient reshard), which has no CPU kernel at all.

The gloo ops and communicators are :mod:`.static_collectives`, the pipeline-pass registry
:mod:`.pipeline_registry`, the ``core.Plan`` an adapter's pass hands Paddle :mod:`.static_plan`.
paddle-ext's own schedules register themselves there (``passes/static``,
``paddle_ext.passes.static.passes.install_static`` = these fixes + that registration); this
module imports no adapter.
"""
from __future__ import annotations

import importlib
import logging
import os

from paddle.base.libpaddle import pir
from paddle.distributed.auto_parallel.static.process_group import get_all_process_groups
from paddle.distributed.auto_parallel.static.utils import get_pp_stage_by_pp_degree
from paddle.distributed.passes.pass_base import PassContext, new_pass
import paddle

from ...errors import ScheduleError
from ..fix import Fix, apply_fixes, revert_fixes
from .backend import job_on_gloo as _cpu_only
from .pipeline_registry import PASS_PREFIX, registered_pipeline_passes, resolve_schedule_mode
from .static_collectives import (NO_CPU_KERNEL, NOT_P2P, collective_rings, create_communicators, eager_barrier,
                                 engine_programs, load_gloo_ops, lower_collectives, lower_engine_collectives)
from ..version import require_paddle

logger = logging.getLogger("paddle_ext.static")

ENGINE_MODULE = "paddle.distributed.auto_parallel.static.engine"
PIR_PASS_MODULE = "paddle.distributed.auto_parallel.static.pir_pass"
HELPER_MODULE = "paddle.distributed.auto_parallel.static.helper"


# ---------------------------------------------------------- collectives on gloo ops (CPU)
def _collectives_apply():
    """``static-gloo-collectives``: the Engine creates communicators by ranks and runs its programs'
    collectives on the gloo ops (module doc: CPU collectives share one communicator, no send/recv)."""

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
def overlap_attrs(name: str, environ=None) -> dict:
    """Pass attributes Paddle's own pipeline pass sets from the environment: for 1F1B,
    ``FLAGS_1f1b_backward_forward_overlap`` (default 0), read exactly as Paddle reads it.

    >>> overlap_attrs("1F1B", {}), overlap_attrs("1F1B", {"FLAGS_1f1b_backward_forward_overlap": "1"})
    ({'enable_backward_forward_overlap': 0}, {'enable_backward_forward_overlap': 1})
    >>> overlap_attrs("VPP", {"FLAGS_1f1b_backward_forward_overlap": "1"})
    {}
    """
    env = os.environ if environ is None else environ
    if name != "1F1B":
        return {}
    return {"enable_backward_forward_overlap": int(env.get("FLAGS_1f1b_backward_forward_overlap", 0))}


def _pipeline_pass(dense_main_program, dense_startup_program, pipeline_strategy):
    """Replacement of ``pir_pass.pipeline_pass``: any registered schedule, p2p lowered to gloo."""

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
    """``static-pipeline-schedules``: ``pipeline_pass`` (in ``pir_pass`` and ``engine``) runs any
    registered schedule instead of asserting FThenB/1F1B/VPP."""
    pir_pass = importlib.import_module(PIR_PASS_MODULE)
    engine = importlib.import_module(ENGINE_MODULE)
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

        forwards = [t for t in types if t.startswith("forward")]
        for t in forwards:
            program = self._plan.ir_program(t)
            if not pir.is_fake_value(program.get_output_value_by_name(self._loss_name)):
                return program
        return self._plan.ir_program(forwards[-1])


def _engine_apply():
    """``static-engine-chunks``: chunk ids for paddle-ext's multi-chunk schedules (the Engine assigns
    them only under "VPP"), and ``run()`` reads the loss from the forward job that defines it."""

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
    """``static-eager-param-reshard``: ``init_pir`` leaves the parameters of meshes this rank is not
    in as they are (their eager reshard segfaults on CPU builds)."""

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
    """Needed on every supported Paddle (the behaviour the fix adds is paddle-ext's, not a CPU gap)."""
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


# ------------------------- plain install(): programs on two rings or more, or with a reduce_scatter
def _rings_apply():
    """``static-gloo-rings`` (plain ``paddle_ext.install()``): a dense program whose collectives
    use two rings or more (dp x mp: [0, 2] and [0, 1] on rank 0), or that has a collective with
    no CPU kernel (:data:`NO_CPU_KERNEL`: ZeRO's ``reduce_scatter``), runs them on the gloo ops.

    Paddle's CPU kernels would run them all on the one communicator the process bound first
    (module doc, ``static-gloo-collectives``), silently: on dp2 x mp2 the dp gradient all_reduce
    and the loss's all_gather ran on the mp ring. A program on one ring and without a
    ``reduce_scatter`` keeps Paddle's kernels (the op library is built and loaded only when
    needed); send/recv stay Paddle's (they throw on CPU: pipelines need
    ``install(static_engine=True)``). With ``static-gloo-collectives``
    applied this fix does nothing."""

    Engine = importlib.import_module(ENGINE_MODULE).Engine
    parallel_pir, init_comm = Engine._parallel_pir, Engine._init_comm

    def _parallel_pir(self, mode):
        result = parallel_pir(self, mode)
        if (STATIC_FIXES["static-gloo-collectives"].is_applied() or getattr(self, "_nranks", 1) <= 1
                or not _cpu_only()):
            return result
        programs = engine_programs(self, mode)
        rings = collective_rings(programs)
        if len(rings) > 1 or collective_rings(programs, names=NO_CPU_KERNEL):
            load_gloo_ops()
            counts = lower_engine_collectives(self, mode, names=NOT_P2P)
            self._paddle_ext_rings = True
            logger.info("rank %d: static-gloo-rings: %d rings %s, collectives on gloo ops: %s",
                        paddle.distributed.get_rank(), len(rings), rings, counts)
        return result

    def _init_comm(self):
        result = init_comm(self)  # Paddle's groups, for the ops left to Paddle and later Engines
        if getattr(self, "_paddle_ext_rings", False):
            create_communicators()
            eager_barrier()
        return result

    for f, original in ((_parallel_pir, parallel_pir), (_init_comm, init_comm)):
        f.__wrapped__ = original
    Engine._parallel_pir = _parallel_pir
    Engine._init_comm = _init_comm
    return [(Engine, "_parallel_pir", parallel_pir), (Engine, "_init_comm", init_comm)]


#: applied by plain ``paddle_ext.install()`` (:func:`install_rings`), not by ``install_static()``
RING_FIXES: dict[str, Fix] = {
    "static-gloo-rings": Fix("static-gloo-rings",
                             "a dense static program on two rings or more, or with a reduce_scatter, runs its "
                             "collectives on ring-aware gloo ops (Paddle's CPU kernels share the first "
                             "communicator; reduce_scatter has none)", _cpu_only, _rings_apply),
}


def install_rings() -> list[str]:
    """Apply ``static-gloo-rings`` where needed (CPU/gloo; idempotent); returns it when in effect."""
    return apply_fixes(RING_FIXES)


def uninstall_rings() -> None:
    revert_fixes(RING_FIXES)


def install_static() -> list[str]:
    """Apply the static-Engine fixes this Paddle needs (idempotent); returns those in effect."""
    return apply_fixes(STATIC_FIXES)


def uninstall_static() -> None:
    """Restore Paddle's originals of every static-Engine fix."""
    revert_fixes(STATIC_FIXES)
