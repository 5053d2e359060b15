"""Merged static jobs (passes/static/merge.py), the simulator's per-action extra time, and the
static-Engine job model (passes/static/job_model.py)."""
import pytest

from paddle_ext.errors import ScheduleError
from paddle_ext.passes import Costs, add_send_recv, generate_schedule, get_schedule_info, simulate_schedule
from paddle_ext.passes.static.job_model import StaticCosts, action_jobs, simulate_static
from paddle_ext.passes.static.jobs import compile_jobs, rank_schedule, uses_split
from paddle_ext.passes.static.merge import alone_types, merge_jobs, members, program_key

PLANS = [("FThenB", 1), ("1F1B", 1), ("VPP", 2), ("ZBH1", 1), ("ZBH2", 1), ("ZBV", 2), ("VHalf", 2),
         ("DualPipeV", 2), ("InterleavedZB", 2)]


@pytest.mark.parametrize("name,chunks", PLANS)
@pytest.mark.parametrize("p,m", [(2, 8), (4, 8)])
def test_merged_jobs_run_the_same_jobs_in_the_same_order(name, chunks, p, m):
    placement = get_schedule_info(name).placement
    for rank in range(p):
        jobs = compile_jobs(name, p, m, chunks, rank=rank)
        alone = alone_types(rank, p, chunks, placement)
        merged = merge_jobs(jobs, alone)
        assert [(t, mb) for job, mb in merged for t in members(job)] == list(jobs)
        assert len(merged) < len(jobs)
        for job, _ in merged:
            parts = members(job)
            if len(parts) > 1:
                assert "optimizer" not in parts and not set(parts) & set(alone), job
                keys = [program_key(t) for t in parts]
                # program order: each member after the previous ones, or B/W of one chunk side by side
                for a, b, ka, kb in zip(parts, parts[1:], keys, keys[1:]):
                    assert kb > ka or (kb == ka and not b.startswith(("send_", "recv_"))
                                       and not a.startswith(("send_", "recv_"))), job


def test_a_message_never_waits_behind_later_work():
    # I then its send then W: the send may not join a job that runs W's ops (interleaved with I's)
    assert merge_jobs([("backward_b0", 1), ("send_backward0", 1), ("backward_w0", 1)]) == (
        ("backward_b0+send_backward0", 1), ("backward_w0", 1))
    assert merge_jobs([("forward0", 1), ("forward0", 2)]) == (("forward0", 1), ("forward0", 2))


def test_the_loss_forward_stays_one_job_type():
    assert alone_types(0, 2, 2, "v") == ("forward1",) and alone_types(1, 2, 2, "v") == ()
    merged = merge_jobs(compile_jobs("1F1B", 2, 8, rank=1), alone_types(1, 2, 1, "loop"))
    assert {job for job, _ in merged if "forward0" in members(job)} == {"forward0"}


def test_extra_time_is_paid_before_each_action():
    schedule = generate_schedule("1F1B", 1, 3)
    base = simulate_schedule(schedule)
    assert simulate_schedule(schedule, extra={0: [0.0] * 6}).makespan == base.makespan
    assert simulate_schedule(schedule, extra={0: [0.5] * 6}).makespan == base.makespan + 3.0
    with pytest.raises(ScheduleError, match="one per action"):
        simulate_schedule(schedule, extra={0: [0.5] * 5})


def test_extra_time_does_not_count_twice_while_a_rank_waits():
    lowered = add_send_recv(generate_schedule("1F1B", 2, 2))
    n = {r: len([a for a in lowered[r] if a is not None]) for r in lowered}
    free = simulate_schedule(lowered, blocking_sends=False)
    paid = simulate_schedule(lowered, blocking_sends=False, extra={r: [0.25] * n[r] for r in lowered})
    # every action pays 0.25 once: the critical path crosses each action at most once
    assert free.makespan < paid.makespan <= free.makespan + 0.25 * sum(n.values())
    assert paid.makespan == 11.5  # worked by hand: 10 of the 16 actions are on the critical path


def test_the_job_model_without_runtime_costs_is_the_lowered_schedule():
    zero = StaticCosts(1, 1, 1)
    for name, chunks in PLANS:
        _, lowered, _ = rank_schedule(name, 2, 8, chunks)
        want = simulate_schedule(lowered, Costs(1, 1, 1), blocking_sends=False).makespan
        assert simulate_static(name, 2, 8, chunks, costs=zero).makespan == want
        assert simulate_static(name, 2, 8, chunks, costs=zero, merge=False).makespan == want


def test_merging_saves_the_per_job_cost():
    slow = StaticCosts(1, 1, 1, job=0.4, message=0.1)
    for name, chunks in PLANS:
        merged = simulate_static(name, 2, 8, chunks, costs=slow).makespan
        assert merged < simulate_static(name, 2, 8, chunks, costs=slow, merge=False).makespan, name
    # Paddle's own passes: one job per compute action, the messages inside it
    fthenb = simulate_static("FThenB", 1, 4, costs=StaticCosts(1, 1, 1, job=0.5), paddle_pass=True)
    assert fthenb.makespan == 4 * 3 + 8 * 0.5


def test_action_jobs_follow_the_job_list():
    for name, chunks in PLANS:
        info, lowered, _ = rank_schedule(name, 2, 4, chunks)
        for rank in (0, 1):
            flat = [t for types in action_jobs(info.name, lowered, rank, chunks, uses_split(lowered)) for t in types]
            assert flat == [t for t, _ in compile_jobs(name, 2, 4, chunks, rank=rank)][:-1]  # less the optimizer


def test_static_costs_are_times():
    with pytest.raises(ScheduleError, match="job=-1"):
        StaticCosts(1, 1, 1, job=-1)
