"""The static Engine's pieces that paddle-ext's Engine fixes put in Paddle's place.

The fixes themselves (each ``needed()``/``apply()``, one module each, listed in
:mod:`paddle_ext.compat.fixes.table`) are ``static-pipeline-schedules``
(:mod:`..fixes.static_pipeline_schedules`), ``static-gloo-collectives``
(:mod:`..fixes.static_gloo_collectives`), ``static-engine-chunks``
(:mod:`..fixes.static_engine_chunks`), ``static-eager-param-reshard``
(:mod:`..fixes.static_eager_param_reshard`) -- applied by ``install_static()``, that is
``paddle_ext.install(static_engine=True)`` -- and ``static-gloo-rings``
(:mod:`..fixes.static_gloo_rings`), applied by plain ``paddle_ext.install()``. This module holds
what they bind: the Paddle modules they patch, :func:`pipeline_pass` (Paddle's
``pir_pass.pipeline_pass`` for any registered schedule), :func:`overlap_attrs`, the multi-chunk
test of a pipeline strategy and :class:`LossJobPlan` (``Engine.run``'s loss from the forward
job that defines it), and :func:`skip_outside_reshard` (``init_pir``'s eager reshard on a rank
outside both meshes). Importing it patches nothing.

The gloo ops and communicators are :mod:`.static_collectives`, the pipeline-pass registry
:mod:`.pipeline_registry`, the ``core.Plan`` an adapter's pass hands Paddle :mod:`.static_plan`.
paddle-ext's own schedules register themselves there (``passes/static``,
``paddle_ext.passes.static.passes.install_static`` = the fixes + that registration); this
module imports no adapter.
"""
from __future__ import annotations

import os

from paddle.base.libpaddle import pir
from paddle.distributed.auto_parallel.static.utils import get_pp_stage_by_pp_degree
from paddle.distributed.passes.pass_base import PassContext, new_pass
import paddle

from ...errors import ScheduleError
from .pipeline_registry import PASS_PREFIX, registered_pipeline_passes, resolve_schedule_mode

ENGINE_MODULE = "paddle.distributed.auto_parallel.static.engine"
PIR_PASS_MODULE = "paddle.distributed.auto_parallel.static.pir_pass"
HELPER_MODULE = "paddle.distributed.auto_parallel.static.helper"


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


def pipeline_pass(dense_main_program, dense_startup_program, pipeline_strategy):
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


# ------------------------------------------------------------------ Engine: chunks and loss
def is_multichunk_ext(pipeline) -> bool:
    """Whether ``pipeline`` (``strategy.pipeline``) selects a paddle-ext schedule with more than one chunk."""
    cls = registered_pipeline_passes().get(_safe_resolve(pipeline.schedule_mode))
    return bool(pipeline.enable and getattr(cls, "paddle_ext_schedule", None) and pipeline.vpp_degree > 1)


def _safe_resolve(name):
    try:
        return resolve_schedule_mode(name)
    except ScheduleError:
        return name


class LossJobPlan:
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

        # a merged job type ("recv_forward0+forward0+send_forward0" on a middle stage) counts
        # when one of its members is a forward
        forwards = [t for t in types if any(m.startswith("forward") for m in t.split("+"))]
        for t in forwards:
            program = self._plan.ir_program(t)
            if not pir.is_fake_value(program.get_output_value_by_name(self._loss_name)):
                return program
        return self._plan.ir_program(forwards[-1])


# ------------------------------------------------------------ eager reshard of other stages
def skip_outside_reshard(reshard):
    """``core.reshard`` that leaves a dist tensor as it is on a rank outside both its mesh and the
    target's (this rank holds nothing of it either way; the eager reshard segfaults on CPU builds)."""
    def reshard_(tensor, dist_attr):
        rank = paddle.distributed.get_rank()
        src = tensor.process_mesh.process_ids if tensor.is_dist() else []
        if tensor.is_dist() and rank not in src and rank not in dist_attr.process_mesh.process_ids:
            return tensor
        return reshard(tensor, dist_attr)
    return reshard_
