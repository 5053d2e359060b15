"""add_send_recv: every generator's schedule, lowered, validates and runs with blocking sends.

Blocking ("rendezvous") sends are what gloo does: a send waits until the peer posts the matching
receive. Putting each send right after its producer and each receive right before its consumer
deadlocks under that model for most schedules with p >= 2 (shown below); the lowering must not.
"""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paddle_ext.errors import ScheduleError
from paddle_ext.passes import (Costs, add_send_recv, compute_only, generate_schedule, get_schedule_info,
                               parse_schedule, schedule_names, simulate_schedule, validate_schedule)

ALL = schedule_names()


def valid_sizes(name, p, m, v):
    """(p, m, v) moved to the nearest sizes ``name`` accepts, by the schedule's own size rule."""
    info = get_schedule_info(name)
    sizes = info.nearest_valid_sizes(p, m, v)
    assert info.valid_sizes(*sizes), (name, sizes)
    return sizes


def check_lowering(name, p, m, v, costs=None):
    schedule = generate_schedule(name, p, m, v)
    lowered = add_send_recv(schedule)
    shape = validate_schedule(lowered)  # counts, matched pairs, order, and progress with blocking sends
    assert shape.lowered == (p > 1)  # one rank needs no communication
    assert compute_only(lowered) == schedule  # compute order untouched
    blocking = simulate_schedule(lowered, costs=costs)
    buffered = simulate_schedule(lowered, costs=costs, blocking_sends=False)
    reference = simulate_schedule(schedule, costs=costs)
    assert buffered.makespan <= blocking.makespan
    assert reference.makespan <= buffered.makespan
    return reference, blocking


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("p", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("m", [1, 3, 8])
def test_lowering_never_deadlocks_on_a_grid(name, p, m):
    check_lowering(name, *valid_sizes(name, p, m, 3))


@settings(max_examples=50, deadline=None)
@given(name=st.sampled_from(ALL), p=st.integers(1, 8), m=st.integers(1, 20), v=st.integers(1, 4),
       costs=st.tuples(st.sampled_from([0.5, 1, 2]), st.sampled_from([0.5, 1, 2]), st.sampled_from([0.25, 1])))
def test_lowering_never_deadlocks_for_random_sizes_and_costs(name, p, m, v, costs):
    check_lowering(name, *valid_sizes(name, p, m, v), costs=Costs(*costs))


@pytest.mark.parametrize("name", ["FThenB", "1F1B", "LoopedBFS", "ZBH1", "ZBH2", "ZBV", "InterleavedZB"])
@pytest.mark.parametrize("p, m", [(2, 4), (4, 8), (5, 12)])
def test_lowering_keeps_the_compute_only_timing(name, p, m):
    reference, blocking = check_lowering(name, *valid_sizes(name, p, m, 2))
    assert blocking.makespan == reference.makespan


@pytest.mark.parametrize("name", ["VPP", "DualPipeV"])
def test_lowering_cost_when_no_common_gap_exists(name):
    # 1- and 2-unit actions leave some pairs no moment where both ranks are between actions
    reference, blocking = check_lowering(name, *valid_sizes(name, 4, 8, 2))
    assert reference.makespan <= blocking.makespan <= 1.25 * reference.makespan


def naive_lowering(schedule):
    """Send right after the producer, receive right before the consumer."""
    return add_send_recv(schedule, blocking_sends=False)


@pytest.mark.parametrize("name", ALL)
def test_naive_placement_deadlocks_with_blocking_sends_but_not_buffered(name):
    p, m, v = valid_sizes(name, 4, 8, 2)
    lowered = naive_lowering(generate_schedule(name, p, m, v))
    reference = simulate_schedule(generate_schedule(name, p, m, v), comm_latency=0.5)
    assert simulate_schedule(lowered, comm_latency=0.5, blocking_sends=False).makespan == reference.makespan
    if name == "FThenB":  # all sends go one way at a time: no cycle
        simulate_schedule(lowered)
        return
    with pytest.raises(ScheduleError, match="deadlock.*<-- here"):
        simulate_schedule(lowered)


def test_lowering_rejects_lowered_input_and_zero_costs():
    schedule = generate_schedule("1F1B", 2, 2)
    with pytest.raises(ScheduleError, match="already has SEND/RECV"):
        add_send_recv(add_send_recv(schedule))
    with pytest.raises(ScheduleError, match="needs costs > 0"):
        add_send_recv(schedule, costs=Costs(backward_weight=0))


def test_lowering_a_deadlocked_schedule_reports_the_deadlock():
    with pytest.raises(ScheduleError, match="deadlock"):
        add_send_recv(parse_schedule("rank 0: 0F0 0B0 0F1 0B1\nrank 1: 1F1 1B1 1F0 1B0"))
