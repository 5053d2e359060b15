"""Eager1F1B (passes/schedules/eager_1f1b.py): Paddle's own job order, 1F1B's makespan, more memory.

Paddle 3.3.1 registers ``pipeline_scheduler_Eager1F1B`` but its pass cannot build a plan (it has
no program split for PIR); its job list is still the order, so each rank's compute order here is
compared with it, job for job, wherever Paddle accepts the sizes.
"""
from __future__ import annotations

import pytest

import paddle  # noqa: F401 - required: a broken install fails here, never skips
from paddle.distributed.passes.pipeline_scheduler_pass.pipeline_eager_1f1b import PipelineEager1F1BPass

from paddle_ext.errors import ScheduleError
from paddle_ext.passes import generate_schedule, schedule_names, simulate_schedule, validate_schedule
from paddle_ext.passes.schedules import eager_1f1b, get_schedule_info


def _closed_form(p: int, m: int, v: int):
    """Unit costs (F = I = W = 1): 1F1B's makespan (m+p-1)(F+B); rank r warms up with
    min(2(p-1-r), m) forwards (Paddle's eager order sends the next forward before the backward
    arrives), so one more in flight: min(2(p-r)-1, m)."""
    return 3 * (m + p - 1), tuple(min(2 * (p - r) - 1, m) for r in range(p)), "Paddle's Eager1F1B job order"


# read by test_schedule_closed_forms.py: a schedule's closed form lives next to its own test
CLOSED_FORMS = {"Eager1F1B": _closed_form}


def _paddle_order(p: int, m: int, stage: int) -> list:
    job_pass = PipelineEager1F1BPass()
    for key, value in (("num_micro_batches", m), ("pp_stage", stage), ("pp_degree", p)):
        job_pass.set_attr(key, value)
    return [(job.type()[0].upper(), job.micro_batch_id()) for job in job_pass._create_job_list()
            if job.type() in ("forward", "backward")]


@pytest.mark.parametrize("p, m", [(p, m) for p in range(1, 6) for m in range(2 * p - 1, 2 * p + 4)])
def test_each_rank_runs_paddles_order(p, m):
    schedule = eager_1f1b(p, m)
    for rank in range(p):
        ours = [(a.kind.value, a.microbatch) for a in schedule[rank]]
        assert ours == _paddle_order(p, m, rank)


@pytest.mark.parametrize("p, m", [(p, m) for p in range(1, 7) for m in range(1, 3 * p + 2)])
def test_makespan_is_1f1b_and_memory_is_the_eager_warmup(p, m):
    schedule = eager_1f1b(p, m)
    validate_schedule(schedule)
    result = simulate_schedule(schedule)
    assert result.makespan == 3 * (m + p - 1)  # F = 1, B = 2, as 1F1B
    assert result.peak_activations == tuple(min(2 * (p - r) - 1, m) for r in range(p))
    ref = simulate_schedule(generate_schedule("1F1B", p, m)).peak_activations
    assert all(e >= o for e, o in zip(result.peak_activations, ref))


def test_registered_by_its_file_and_one_stage_per_rank():
    assert schedule_names()[-1] == "Eager1F1B"  # listed by order: the last added
    info = get_schedule_info("eager1f1b")
    assert info.generate is eager_1f1b and info.placement == "loop" and info.default_chunks == 1
    assert info.valid_sizes(4, 1) and not info.valid_sizes(4, 8, n_chunks=2)
    with pytest.raises(ScheduleError, match="n_chunks"):
        eager_1f1b(2, 4, 2)
