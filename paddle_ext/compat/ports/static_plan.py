"""What a static pipeline pass hands Paddle: a ``core.Plan`` of ``core.Job`` s, and the Paddle
pass utilities and values an adapter's pass needs to build one.

An adapter's pass (``passes/static``) computes its job list and job programs from pure data;
this module turns them into Paddle's objects (:func:`make_plan`), so no adapter touches
``core.Job``/``core.Plan``.
"""
from __future__ import annotations

from paddle.base import core
from paddle.base.framework import _current_expected_place_
from paddle.distributed.passes import pass_utils as module
from paddle.distributed.passes.pass_utils import set_skip_gc_vars
import paddle

from ..version import require_paddle


def pass_utils():
    """``paddle.distributed.passes.pass_utils`` (op-role completion, chunk inference, skip-gc)."""
    require_paddle("static pipeline passes")

    return module


def device_place_attr():
    """The ``Place`` value PIR block keyword arguments carry (``place_attr``): the device this
    process runs on, as Paddle's own program split chooses it (the expected place; on CUDA the
    launcher's device id), so a split program on a GPU never lands on the CPU."""

    place = _current_expected_place_()
    if isinstance(place, paddle.framework.CUDAPlace):
        place = paddle.framework.CUDAPlace(paddle.distributed.ParallelEnv().dev_id)
    attr = paddle.base.libpaddle.Place()
    attr.set_place(place)
    return attr


def make_job(job_type: str, micro_batch: int):
    """One ``core.Job`` of type ``job_type`` for micro-batch ``micro_batch``."""

    job = core.Job(job_type)
    job.set_micro_batch_id(int(micro_batch))
    return job


def make_plan(jobs, job_types, programs, num_micro_batches: int):
    """``core.Plan`` from ``(job_type, micro_batch)`` pairs and one program per job type, with
    Paddle's skip-gc bookkeeping (values a later job of the same micro-batch still needs)."""
    require_paddle("static pipeline passes")

    core_jobs = [make_job(t, mb) for t, mb in jobs]
    type_to_program = set_skip_gc_vars(num_micro_batches, list(job_types), list(programs), core_jobs)
    return core.Plan(core_jobs, type_to_program)
