"""paddle-ext's IR schedules as Paddle static pipeline passes (``pipeline_scheduler_<NAME>``).

:func:`install_static` (``paddle_ext.install(static_engine=True)`` calls it) applies compat's
fixes to Paddle's static Engine, then registers, through compat's pipeline-pass registry, one
``PipelinePassBase`` subclass per IR schedule (:func:`register_static_passes`): this adapter
registers itself, compat never imports it. ``strategy.pipeline.schedule_mode = "<NAME>"`` then
selects a pass. Paddle's own working passes
keep their names (FThenB, 1F1B, VPP); paddle-ext's versions of those are ``IR_FThenB``,
``IR_1F1B`` and ``IR_VPP``. Paddle's ZBH1 (no PIR implementation) is replaced.

What a pass does on each rank (``_apply_pir_single_impl``):

1. zero-bubble schedules (with ``I``/``W``): split ``matmul_grad`` ops and classify the backward
   (:mod:`.bw_split`); if that is refused, log the reason and use a full backward;
2. compile the rank's job list from the IR (:func:`.jobs.compile_jobs`), with ``pp_stage`` as
   the pipeline rank and ``vpp_degree`` chunks;
3. give every op a job type, check the data flow against the job order, merge consecutive jobs
   of one micro-batch into one (:mod:`.merge`: the executor's fixed cost per job is paid once per
   merged job), split the program (:mod:`.program_split`), and hand Paddle a ``core.Plan``
   (through compat).
"""
from __future__ import annotations

import logging

from paddle_ext.compat.fixes import table as compat_fixes
from paddle_ext.compat.ports.pipeline_registry import pipeline_pass_base, register_pipeline_pass, registered_pipeline_passes
from paddle_ext.compat.ports.static_plan import device_place_attr, make_plan, pass_utils
from paddle_ext.errors import ScheduleError
from paddle_ext.passes.schedules import SCHEDULES, get_schedule_info
from paddle_ext.passes.static.bw_split import classify_backward, split_matmul_grads
from paddle_ext.passes.static.job_model import PADDLE_PASSES
from paddle_ext.passes.static.jobs import job_types, jobs_of_rank, rank_schedule, uses_split
from paddle_ext.passes.static.merge import alone_types, merge_jobs
from paddle_ext.passes.static.program_split import (assign_jobs, check_merged_order, check_order, handovers,
                                                    split_program)

__all__ = ["install_static", "register_static_passes", "registered_name", "PADDLE_OWNED"]

logger = logging.getLogger("paddle_ext.static")
PADDLE_OWNED = PADDLE_PASSES  # Paddle's PIR passes that work (with the gloo backend)
#: merge a rank's consecutive jobs of one micro-batch into one job (:mod:`.merge`); False gives one
#: job per action, as before the merge (for measuring what the merge saves)
MERGE_JOBS = True


def registered_name(schedule: str) -> str:
    """The ``schedule_mode`` that selects paddle-ext's pass for IR schedule ``schedule``."""
    name = get_schedule_info(schedule).name
    return f"IR_{name}" if name in PADDLE_OWNED else name


def _make_pass_class(schedule: str):
    base = pipeline_pass_base()

    class IRSchedulePass(base):
        paddle_ext_schedule = schedule

        def _create_job_list(self):  # Paddle's template calls this; ours builds the plan itself
            raise NotImplementedError("paddle-ext passes build their plan in _apply_pir_single_impl")

        def _partial_pir_programs(self, program):
            raise NotImplementedError("paddle-ext passes build their plan in _apply_pir_single_impl")

        def _apply_pir_single_impl(self, main_program, startup_program, context):
            context.set_attr("plan", build_plan(schedule, main_program, self.get_attr("num_micro_batches"),
                                                self.get_attr("pp_degree"), self.get_attr("pp_stage"),
                                                max(1, int(self.get_attr("vpp_degree") or 1))))

    IRSchedulePass.__name__ = IRSchedulePass.__qualname__ = f"IRSchedulePass_{schedule}"
    return IRSchedulePass


def build_plan(schedule: str, program, n_microbatches: int, pp_degree: int, pp_stage: int, n_chunks: int):
    """The ``core.Plan`` of ``schedule`` for this rank's dense ``program`` (module doc)."""
    utils = pass_utils()
    utils.forward_complete_op_role(program)
    generated = rank_schedule(schedule, pp_degree, n_microbatches, n_chunks)  # generated and lowered once
    split = uses_split(generated[1])
    w_ops, reason = frozenset(), None
    if split:
        rewritten = split_matmul_grads(program)
        logger.info("%s on pipeline rank %d: %d matmul_grad ops split into input and weight matmuls",
                    schedule, pp_stage, rewritten)
        result = classify_backward(program)
        w_ops, reason = result.w_ops, result.reason
        if reason:
            logger.warning("%s on pipeline rank %d: backward not split into B and W, running full backward: %s",
                           schedule, pp_stage, reason)
            split = False
        else:
            logger.info("%s on pipeline rank %d: %d matmul_grad ops split, %d backward ops deferred to W",
                        schedule, pp_stage, rewritten, len(w_ops))
    jobs = jobs_of_rank(generated, rank=pp_stage, split_backward=split)
    owner = assign_jobs(program, w_ops, split, n_chunks, lambda i, ops: utils.infer_chunk_id(i, ops, False))
    check_order(jobs, handovers(program, owner))
    types = job_types(jobs)
    comm_without_ops = [t for t in types if t.startswith(("send_", "recv_")) and t not in owner]
    if comm_without_ops:
        raise ScheduleError(f"{schedule} on pipeline rank {pp_stage}: the schedule communicates in {comm_without_ops} "
                            "but the program has no send/recv there; the program's stages (layer meshes, "
                            "vpp_degree, placement) do not match the schedule's "
                            f"({get_schedule_info(schedule).placement} placement)")
    if MERGE_JOBS:
        jobs = merge_jobs(jobs, alone_types(pp_stage, pp_degree, n_chunks, get_schedule_info(schedule).placement))
        types = job_types(jobs)
        check_merged_order(owner, types, [op.name() for op in program.global_block().ops])
    programs = split_program(program, owner, types, device_place_attr())
    logger.info("%s on pipeline rank %d: %d jobs, types %s", schedule, pp_stage, len(jobs), list(types))
    return make_plan(jobs, types, [programs[t] for t in types], n_microbatches)


def register_static_passes() -> list:
    """Register every IR schedule as a pipeline pass (once: a name whose registered pass is
    already paddle-ext's for that schedule is kept); returns the schedule_mode names."""
    registered = registered_pipeline_passes()
    names = []
    for schedule in SCHEDULES:
        name = registered_name(schedule)
        if getattr(registered.get(name), "paddle_ext_schedule", None) != schedule:
            register_pipeline_pass(name, _make_pass_class(schedule))
        names.append(name)
    return names


def install_static() -> list[str]:
    """Make ``dist.to_static`` run pipeline parallelism on CPU/gloo with any of paddle-ext's
    schedules: compat's static-Engine fixes (:func:`paddle_ext.compat.fixes.table.install_static`),
    then this adapter's passes registered (:func:`register_static_passes`). Idempotent; returns
    the fixes in effect."""
    names = compat_fixes.install_static()
    register_static_passes()
    return names
