"""Validator errors (one per rule) and simulator semantics: costs, latency, rendezvous, memory."""
import pytest

from paddle_ext.errors import ScheduleError
from paddle_ext.passes import (Action, Costs, Kind, parse_schedule, simulate_schedule, stage_to_rank_map,
                               validate_schedule)

OK_1F1B = "rank 0: 0F0 0F1 0B0 0B1\nrank 1: 1F0 1B0 1F1 1B1"


def check_fails(text, message, **kwargs):
    schedule = parse_schedule(text) if isinstance(text, str) else text
    with pytest.raises(ScheduleError, match=message) as info:
        validate_schedule(schedule, **kwargs)
    return str(info.value)


def test_valid_schedule_shape():
    shape = validate_schedule(parse_schedule(OK_1F1B), 2, 2, stage_to_rank={0: 0, 1: 1})
    assert (shape.n_ranks, shape.n_stages, shape.n_microbatches, shape.lowered) == (2, 2, 2, False)


@pytest.mark.parametrize("text, message", [
    ("rank 0: 0F0 0B0 0F0", r"0F0 appears twice \(rank 0 steps 0 and 2\); .*remove one"),
    ("rank 0: 0F0 1F0 0B0\nrank 1: 1B0", "stage 1 has actions on rank 0 and rank 1 .*move its actions to one rank"),
    ("rank 0: 0B0", "stage 0 microbatch 0: no forward 0F0"),
    ("rank 0: 0F0 0B0 0I0 0W0", "has both a full backward 0B0 and a split one"),
    ("rank 0: 0F0 0I0", "missing W"),
    ("rank 0: 0F0 0W0", "missing I"),
    ("rank 0: 0F0", r"missing a backward \(B, or I and W\)"),
    ("rank 0: 0B0 0F0", "0B0 .* runs before 0F0 .*put F before the backward"),
    ("rank 0: 0F0 0W0 0I0", "0W0 .* runs before 0I0 .*put I before W"),
    ("rank 0: 1F0 0F0 1B0 0B0", "1F0 runs before 0F0 on rank 0; the forward of stage 1 needs the output of stage 0"),
    ("rank 0: 0F0 1F0 0B0 1B0", "the backward of stage 0 runs before the backward of stage 1"),
    ("rank 0: 0F0 0B0 0F2 0B2", r"microbatch 1: no forward 0F1"),
])
def test_each_rule_has_its_error(text, message):
    check_fails(text, message)


def test_errors_carry_the_grid_with_the_culprit_marked():
    text = check_fails("rank 0: 0F0 0W0 0I0\nrank 1: -", "put I before W")
    assert ">0W0<" in text and "rank 1" in text


@pytest.mark.parametrize("kwargs, message", [
    ({"n_stages": 3}, r"expected stages 0..2; stages \[2\] have no actions"),
    ({"n_stages": 1}, r"found stages \[1\] beyond them"),
    ({"n_microbatches": 1}, r"microbatch 1 .* is out of range 0..0"),
    ({"stage_to_rank": {0: 1, 1: 0}}, "stage 0 runs on rank 0 but the placement puts it on rank 1"),
])
def test_expected_sizes_and_placement(kwargs, message):
    check_fails(OK_1F1B, message, **kwargs)


@pytest.mark.parametrize("bad", [[], {0: ["0F0"]}, {"0": []}, {-1: []}])
def test_not_a_schedule(bad):
    with pytest.raises(ScheduleError):
        validate_schedule(bad)


LOWERED = ("rank 0: 0F0 0SEND_F0 0RECV_B0 0B0\n"
           "rank 1: 1RECV_F0 1F0 1B0 1SEND_B0")


def test_lowered_schedule_validates_and_runs():
    shape = validate_schedule(parse_schedule(LOWERED))
    assert shape.lowered
    assert simulate_schedule(parse_schedule(LOWERED)).makespan == 6


@pytest.mark.parametrize("text, message", [
    (LOWERED.replace(" 0SEND_F0", ""), "0SEND_F0 is missing: stage 0 .*feeds stage 1 .*add_send_recv"),
    (LOWERED.replace("1RECV_F0 ", ""), "1RECV_F0 is missing"),
    (LOWERED.replace("0F0 0SEND_F0", "0SEND_F0 0F0"), "0SEND_F0 .* runs before the compute that produces"),
    (LOWERED.replace("1RECV_F0 1F0", "1F0 1RECV_F0"), "1RECV_F0 .* runs after the compute that needs it"),
    (LOWERED + " 1SEND_F0", "1SEND_F0 has no peer on another rank \\(stage 2 does not exist\\)"),
    ("rank 0: 0F0 0SEND_F0 1RECV_F0 1F0 1B0 0B0", "has no peer on another rank \\(stage [01] is on the same rank"),
])
def test_communication_rules(text, message):
    check_fails(text, message)


def test_deadlock_is_reported_with_the_stuck_actions():
    text = check_fails("rank 0: 0F0 0B0 0F1 0B1\nrank 1: 1F1 1B1 1F0 1B0", "deadlock")
    lines = text.splitlines()
    assert lines[2].startswith("rank 0") and ">0B0<" in lines[2]
    assert "<-- here: 0B0 needs 1B0 or 1I0 (rank 1), which has not run" in lines[2]
    assert "<-- here: 1F1 needs 0F1 (rank 0), which has not run" in lines[3]


# rank 0 holds stages 0 and 3, rank 1 stages 1 and 2 (a V over 2 ranks); both ranks send before
# they receive, which is fine when sends are buffered and deadlocks when they block (gloo)
CROSSING = ("rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 3RECV_F0 3F0 3B0 3SEND_B0 3RECV_F1 3F1 3B1 3SEND_B1 "
            "0RECV_B0 0B0 0RECV_B1 0B1\n"
            "rank 1: 1RECV_F0 1F0 2F0 2SEND_F0 1RECV_F1 1F1 2F1 2SEND_F1 2RECV_B0 2B0 1B0 1SEND_B0 "
            "2RECV_B1 2B1 1B1 1SEND_B1")


def test_crossing_sends_deadlock_only_when_sends_block():
    schedule = parse_schedule(CROSSING)
    assert simulate_schedule(schedule, blocking_sends=False).makespan > 0
    with pytest.raises(ScheduleError, match="deadlock") as info:
        simulate_schedule(schedule)
    text = str(info.value)
    assert "0SEND_F1 waits for 1RECV_F1 to be posted (blocking send)" in text
    assert "2SEND_F0 waits for 3RECV_F0 to be posted (blocking send)" in text


def test_costs_and_latency():
    schedule = parse_schedule(OK_1F1B)
    assert simulate_schedule(schedule, costs=Costs(forward=1, full_backward=3)).makespan == 12
    assert simulate_schedule(schedule, costs={"F": 2, "I": 1, "W": 1}).makespan == 12
    # one microbatch on two ranks: F, hop, F, B(2), hop, B(2)
    one = parse_schedule("rank 0: 0F0 0B0\nrank 1: 1F0 1B0")
    assert simulate_schedule(one, comm_latency=0.5).makespan == 7


def test_stage_costs_override_per_stage():
    one = parse_schedule("rank 0: 0F0 0B0\nrank 1: 1F0 1B0")
    base = simulate_schedule(one, Costs(1, 1, 1))
    same = simulate_schedule(one, Costs(1, 1, 1), stage_costs={0: Costs(1, 1, 1), 1: {"F": 1, "I": 1, "W": 1}})
    assert (same.starts, same.ends, same.busy) == (base.starts, base.ends, base.busy)
    # the last stage's F takes 2: its rank is busy 4, and everything after it starts 1 later
    slow = simulate_schedule(one, Costs(1, 1, 1), stage_costs={1: {"F": 2, "I": 1, "W": 1}})
    assert (slow.makespan, slow.busy) == (base.makespan + 1, (3.0, 4.0))
    with pytest.raises(ScheduleError, match=r"stage_costs has stages \[2\]"):
        simulate_schedule(one, stage_costs={2: Costs()})
    with pytest.raises(ScheduleError, match="stage_costs must map"):
        simulate_schedule(one, stage_costs=[Costs()])


def test_rendezvous_timing_with_latency():
    # the receiver is released `latency` after the meeting, the sender at the meeting
    r = simulate_schedule(parse_schedule(LOWERED), comm_latency=0.5)
    recv = dict((str(a), (s, e)) for a, s, e in r.timed(1))
    send = dict((str(a), (s, e)) for a, s, e in r.timed(0))
    assert send["0SEND_F0"] == (1, 1) and recv["1RECV_F0"] == (0, 1.5)
    assert r.makespan == 7


@pytest.mark.parametrize("costs, message", [
    ({"X": 1}, "unknown cost keys"), ("1,1", "Costs or a dict"), (Costs.parse("1,1,1"), None),
])
def test_cost_arguments(costs, message):
    schedule = parse_schedule(OK_1F1B)
    if message is None:
        simulate_schedule(schedule, costs=costs)
        return
    with pytest.raises(ScheduleError, match=message):
        simulate_schedule(schedule, costs=costs)


@pytest.mark.parametrize("text", ["1,1", "a,b,c", "1,-1,1"])
def test_bad_cost_text(text):
    with pytest.raises(ScheduleError, match="F,B,W|>= 0"):
        Costs.parse(text)


def test_bubble_figures_and_memory():
    r = simulate_schedule(parse_schedule(OK_1F1B), activation_bytes={0: 10.0, 1: 4.0})
    assert (r.makespan, r.ideal, r.busy, r.spans) == (9, 6, (6, 6), (9, 6))
    assert r.bubble_ratio == pytest.approx(1 - 12 / 18)
    assert r.bubble_vs_ideal == pytest.approx(0.5) and r.steady_bubble_vs_ideal == pytest.approx(0.5)
    assert r.peak_activations == (2, 1) and r.peak_activation_bytes == (20.0, 4.0)
    assert set(r.summary()) >= {"makespan", "bubble_ratio", "bubble_vs_ideal", "peak_activations"}


def test_activation_lives_from_f_until_w():
    r = simulate_schedule(parse_schedule("rank 0: 0F0 0F1 0I0 0I1 0W0 0W1"))
    assert r.peak_activations == (2,)
    r = simulate_schedule(parse_schedule("rank 0: 0F0 0I0 0W0 0F1 0I1 0W1"))
    assert r.peak_activations == (1,)


def test_idle_slots_are_ignored():
    schedule = {0: [None, Action(0, Kind.F, 0), None, Action(0, Kind.B, 0)]}
    assert simulate_schedule(schedule).makespan == 3
    assert validate_schedule(schedule, stage_to_rank=stage_to_rank_map(1, 1)).n_stages == 1
