"""The simulator's two runtime models and overlapped F&B pairs, against hand-timed schedules and
DualPipe's published bubble (PP/2 - 1)(F&B + B - 3W); the CLI's --recv, --overlap, --compare."""
import json

import pytest

from paddle_ext.cli.main import main
from paddle_ext.errors import ScheduleError
from paddle_ext.passes import Costs, add_send_recv, generate_schedule, parse_schedule, simulate_schedule
from paddle_ext.passes.overlap import mark_dualpipe_overlaps
from paddle_ext.passes.schedules import dualpipe_v

LOWERED = parse_schedule("""rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1
rank 1: 1RECV_F0 1RECV_F1 1F0 1B0 1SEND_B0 1F1 1B1 1SEND_B1""")


def test_blocking_and_early_receives_by_hand():
    # F = 1, B = 2. Blocking: rank 1 waits at 1RECV_F1 until 0SEND_F1 at t=2, so 1F0 runs 2..3,
    # 1B0 3..5; 0B0 5..7; 1F1 5..6, 1B1 6..8; 0B1 8..10.
    blocking = simulate_schedule(LOWERED, recv="blocking")
    assert blocking.makespan == 10 and blocking.starts[1][2] == 2
    # Early: both receives posted at 0; 1F0 runs when 0F0's data lands (1..2), 1B0 2..4, 0B0 4..6,
    # 1F1 4..5 (its data landed at 2), 1B1 5..7, 0B1 7..9.
    early = simulate_schedule(LOWERED, recv="early")
    assert early.makespan == 9 and early.starts[1][2] == 1 and early.starts[1][1] == early.ends[1][1] == 0
    assert early.recv == "early" and blocking.recv == "blocking"


def test_early_receives_wait_for_latency_at_first_use():
    r = simulate_schedule(LOWERED, recv="early", comm_latency=0.5)
    assert r.starts[1][2] == 1.5  # 1F0 waits for 0F0 (ends 1) + 0.5


def test_receive_model_does_not_touch_compute_only_schedules():
    schedule = generate_schedule("ZBV", 3, 6)
    early, blocking = simulate_schedule(schedule, recv="early"), simulate_schedule(schedule)
    assert (early.starts, early.ends) == (blocking.starts, blocking.ends)


@pytest.mark.parametrize("name", ["1F1B", "VPP", "ZBH1", "ZBV", "DualPipeV", "InterleavedZB"])
@pytest.mark.parametrize("latency", [0.0, 0.5])
def test_early_receives_never_slower_than_blocking(name, latency):
    for p, m in ((2, 4), (3, 7), (4, 8)):
        lowered = add_send_recv(generate_schedule(name, p, m), comm_latency=latency)
        for costs in (Costs(1, 1, 1), Costs(2, 1, 0.5)):
            blocking = simulate_schedule(lowered, costs, comm_latency=latency)
            early = simulate_schedule(lowered, costs, comm_latency=latency, recv="early")
            assert early.makespan <= blocking.makespan
            assert early.peak_activations == blocking.peak_activations


def test_overlapped_pair_is_one_slot_by_hand():
    # stages 0 and 1 on one rank; 0F1 overlaps 1B0. F = 1, B = 2: 0F0 0..1, 1F0 1..2, pair from 2
    schedule = parse_schedule("rank 0: 0F0 1F0 0OVERLAP_F_B 0F1 1B0 1F1 1B1 0B0 0B1")
    fused = simulate_schedule(schedule, overlap="max")
    assert fused.starts[0][3:5] == (2, 2) and fused.ends[0][3:5] == (4, 4)  # both end with the slot
    assert fused.makespan == 11 and fused.busy == (11,) and fused.idle == (0,) and fused.overlapped_pairs == (1,)
    summed = simulate_schedule(schedule, overlap="sum")
    assert summed.ends[0][3:5] == (5, 5) and summed.makespan == 12
    apart = simulate_schedule(schedule, overlap="off")
    assert apart.ends[0][3:5] == (3, 5) and apart.makespan == 12 and apart.overlapped_pairs == (0,)


@pytest.mark.parametrize("p", [2, 3, 4, 6, 8])
@pytest.mark.parametrize("costs", [(1, 1, 1), (2, 2, 1), (1, 1, 0.25), (2, 2, 1.5)])
@pytest.mark.parametrize("overlap", ["max", "sum"])
def test_dualpipev_bubble_is_dualpipes_formula(p, costs, overlap):
    """DeepSeek-V3 Table 2: DualPipe(V) bubble (PP/2 - 1)(F&B + B - 3W), PP = 2p stages, B a full
    backward chunk, F&B the overlapped pair's slot. It is the idle time of the rank that waits most
    when the input backward takes as long as the forward (I = F) and a W fits in a forward's gap
    (W <= F), the regime the table assumes (docs/schedules.md derives it)."""
    c = Costs(*costs)
    slot = max(c.forward, c.backward) if overlap == "max" else c.forward + c.backward
    formula = (2 * p // 2 - 1) * (slot + c.backward - 3 * c.backward_weight)
    for m in (2 * p, 2 * p + 3, 3 * p):
        result = simulate_schedule(mark_dualpipe_overlaps(dualpipe_v(p, m)), c, overlap=overlap)
        assert max(result.idle) == pytest.approx(formula)


def test_dualpipev_formula_outside_its_regime():
    # I != F: F = 1, I = 2, W = 1 (B = 3), the table's figure is 1 time unit too high for p >= 3
    c = Costs(1, 2, 1)
    for p in (3, 4, 6):
        result = simulate_schedule(mark_dualpipe_overlaps(dualpipe_v(p, 2 * p)), c, overlap="sum")
        assert max(result.idle) == (p - 1) * (c.forward + c.backward + c.backward - 3 * c.backward_weight) - 1
    # W > F: a W no longer fits the gap a forward leaves; the bubble stays at (p - 1) F per slot kind
    c = Costs(1, 1, 2)
    for p in (2, 3, 4):
        schedule = mark_dualpipe_overlaps(dualpipe_v(p, 2 * p + 1))
        assert max(simulate_schedule(schedule, c, overlap="max").idle) == (p - 1) * c.forward
        assert max(simulate_schedule(schedule, c, overlap="sum").idle) == 2 * (p - 1) * c.forward


@pytest.mark.parametrize("kwargs, message", [
    ({"recv": "eager"}, "recv='eager': the receive model is one of blocking, early"),
    ({"overlap": "min"}, "overlap='min': overlapped F&B pairs are timed as one of max, sum, off"),
])
def test_bad_model_names(kwargs, message):
    with pytest.raises(ScheduleError, match=message):
        simulate_schedule(LOWERED, **kwargs)


def run_cli(capsys, *argv):
    code = main(["schedule", *argv])
    out, _ = capsys.readouterr()
    return code, out


def test_cli_recv_and_overlap(capsys):
    _, out = run_cli(capsys, "DualPipeV", "-P", "4", "-M", "8", "--overlap", "max", "--json")
    data = json.loads(out)
    assert (data["overlap"], data["recv"], data["lowered"]) == ("max", "blocking", False)
    assert max(data["idle"]) == (4 - 1) * (2 + 2 - 3) and sum(data["overlapped_pairs"]) > 0
    _, out = run_cli(capsys, "1F1B", "-P", "2", "-M", "4", "--recv", "early", "--latency", "0.5", "--json")
    data = json.loads(out)
    assert data["lowered"] and data["recv"] == "early"
    _, text = run_cli(capsys, "DualPipeV", "-P", "2", "-M", "4", "--overlap", "sum")
    assert "overlapped F&B pairs timed as sum (6 pairs)" in text


def test_cli_compare_shows_both_receive_models(capsys):
    _, out = run_cli(capsys, "--compare", "1F1B,VPP", "-P", "4", "-M", "8", "--latency", "0.5")
    header = out.splitlines()[1]
    assert header.split()[-4:] == ["recv", "blocking", "recv", "early"]
    _, out = run_cli(capsys, "--compare", "1F1B,ZBV", "-P", "2", "-M", "4", "--latency", "0.5", "--json")
    for row in json.loads(out):
        lowered = add_send_recv(generate_schedule(row["name"], 2, 4), comm_latency=0.5)
        assert row["recv_models"] == {recv: simulate_schedule(lowered, comm_latency=0.5, recv=recv).makespan
                                      for recv in ("blocking", "early")}
        assert row["recv_models"]["early"] <= row["recv_models"]["blocking"]
