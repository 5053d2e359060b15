"""The static job model's order-aware compute (``cold``) and per-step cost (``step``), and the
profile that measures them (tools/static_profile.py): checked by hand on small schedules."""
import json
import os
import sys

import pytest

from paddle_ext.errors import ScheduleError
from paddle_ext.passes import Costs
from paddle_ext.passes.schedule_ir import Action, Kind
from paddle_ext.passes.static.job_model import StaticCosts, cold_states, simulate_static
from paddle_ext.passes.static.jobs import rank_schedule

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
import static_profile as sp  # noqa: E402

UNIT = StaticCosts(forward=1, backward_input=1, backward_weight=1)


def _compute(name, rank, p=2, m=4):
    _, lowered, _ = rank_schedule(name, p, m)
    acts = [a for a in lowered[rank] if a is not None]
    return acts, cold_states(lowered[rank], split=any(a.kind is Kind.W for a in acts))


W, G = frozenset({"weights"}), frozenset({"gradients"})


def test_fthenb_runs_warm_after_each_ranks_first_forward_and_first_backward():
    acts, cold = _compute("FThenB", 0)
    computed = [c for a, c in zip(acts, cold) if a.kind not in (Kind.SEND_F, Kind.RECV_B)]
    # forwards back to back: only the first reads cold weights; the first full backward finds
    # the weights a forward read but the gradients cold; the backwards after it all warm
    assert computed == [W] + [frozenset()] * 3 + [G] + [frozenset()] * 3


def test_zbh1s_forward_after_a_weight_backward_reads_cold_weights():
    acts, cold = _compute("ZBH1", 1, m=6)
    pairs = [(a, c) for a, c in zip(acts, cold) if a.kind in (Kind.F, Kind.I, Kind.W)]   # messages between
    after_w = [c for (a, _), (b, c) in zip(pairs, pairs[1:]) if a.kind is Kind.W and b.kind is Kind.F]
    assert after_w and all(c == W for c in after_w)
    # an input backward right after a forward of the same stage reads the same weights: warm
    after_f = [c for (a, _), (b, c) in zip(pairs, pairs[1:]) if a.kind is Kind.F and b.kind is Kind.I]
    assert after_f and not any(after_f)
    # a W after an I of its stage: the gradients were not touched since the last W
    after_i = [c for (a, _), (b, c) in zip(pairs, pairs[1:]) if a.kind is Kind.I and b.kind is Kind.W]
    assert after_i and all(c == G for c in after_i)


def test_another_stage_in_between_makes_the_next_job_cold():
    acts = [Action(0, Kind.F, 0), Action(3, Kind.F, 0), Action(0, Kind.F, 1), Action(0, Kind.SEND_F, 1),
            Action(0, Kind.F, 2)]
    assert cold_states(acts, split=True) == [W, W, W, frozenset(), frozenset()]
    assert cold_states([Action(0, Kind.F, 0), Action(3, Kind.B, 0)], split=False)[1] == W | G


def test_without_the_split_an_input_backward_is_the_full_one_and_w_does_not_run():
    acts = [Action(0, Kind.F, 0), Action(0, Kind.I, 0), Action(0, Kind.W, 0), Action(0, Kind.F, 1)]
    # I runs as the full backward (its gradients cold after a forward), W not at all
    assert cold_states(acts, split=False) == [W, G, frozenset(), frozenset()]
    assert cold_states(acts, split=True) == [W, frozenset(), G, W]


def test_cold_costs_add_only_where_the_order_is_cold():
    extra = {s: {"weights": Costs(0.5, 0, 0)} for s in (0, 1)}
    warm_f = simulate_static("FThenB", 2, 8, costs=UNIT).makespan
    # FThenB: one cold forward per rank, both on the critical path
    assert simulate_static("FThenB", 2, 8, costs=UNIT, cold=extra).makespan == pytest.approx(warm_f + 1.0)
    zbh1, zbh1_cold = (simulate_static("ZBH1", 2, 8, costs=UNIT).makespan,
                       simulate_static("ZBH1", 2, 8, costs=UNIT, cold=extra).makespan)
    assert zbh1_cold - zbh1 > 1.0   # its steady forwards follow a W: cold
    # a full backward's cold gradients: FThenB pays one per rank, 1F1B one per micro-batch
    grads = {s: {"gradients": Costs(0, 0, 0, 2.0)} for s in (0, 1)}
    assert simulate_static("FThenB", 2, 8, costs=UNIT, cold=grads).makespan == pytest.approx(warm_f + 4.0)
    one_f_one_b = simulate_static("1F1B", 2, 8, costs=UNIT).makespan
    assert simulate_static("1F1B", 2, 8, costs=UNIT, cold=grads).makespan - one_f_one_b >= 8 * 2.0


def test_the_step_cost_adds_once_to_every_schedule():
    for name in ("FThenB", "1F1B", "ZBV"):
        base = simulate_static(name, 2, 4, costs=UNIT).makespan
        with_step = simulate_static(name, 2, 4, costs=StaticCosts(1, 1, 1, step=2.5)).makespan
        assert with_step == pytest.approx(base + 2.5)
    with pytest.raises(Exception, match="step=-1"):
        StaticCosts(1, 1, 1, step=-1)


def _event(name, ts, dur):
    return {"ph": "X", "name": f"{name}[{dur / 1000:.3f} ms]", "ts": ts, "dur": dur, "tid": 1}


def _trace(tmp_path, jobs, step=(0, 10_000)):
    """One profiled ZBV step with ``jobs`` ``(name, start us, us)``."""
    events = [_event(sp.window({"schedule": "ZBV"}), step[0], step[1] - step[0])]
    events += [_event(name, ts, us) for name, ts, us in jobs]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return str(path)


def test_the_profile_splits_warm_and_cold_jobs_and_measures_the_step_outside_them(tmp_path):
    # rank 0 of ZBV: chunk 0 is block 0. F, F (warm: same weights), W (one mean), F (cold weights)
    jobs = [("forward0-0", 1000, 1000), ("forward0-1", 2000, 600), ("backward_w0-0", 2600, 2000),
            ("send_forward0-2", 4600, 100), ("forward0-2", 4700, 1000)]
    path = _trace(tmp_path, jobs)
    seq = sp.job_sequences(path, sp.window({"schedule": "ZBV"}))
    assert [(k, c) for k, c, _, _ in seq[0][2]] == [("forward", 0), ("forward", 0), ("backward_w", 0),
                                                     ("send_forward", 0), ("forward", 0)]
    blocks, cold = sp.warm_and_cold([(sp.V_BLOCK, [seq])], job=0.0)
    # F: warm 0.6 ms (the second), cold weights (1.0 + 1.0) / 2 = 1.0: 0.4 more; W: one mean, no extra
    assert blocks[0][0] == pytest.approx(0.6) and cold["weights"][0][0] == pytest.approx(0.4)
    assert blocks[0][2] == pytest.approx(2.0) and cold["gradients"][0][2] == 0.0
    # the step: 10 ms window, jobs span 1.0 -> 5.7 ms
    assert sp.step_overhead_ms([[*seq]]) == pytest.approx(10.0 - 4.7)


def test_a_full_backward_is_warm_after_a_backward_and_pays_each_cold_state(tmp_path):
    # LoopedBFS-like rank 0 (loop placement: chunk 0 is block 0, chunk 1 block 2): F0, B0 (cold
    # gradients: 3.0), B0 (warm: 2.0), F1 (another block: cold weights), B0 (both cold: 3.5)
    jobs = [("forward0-0", 0, 1000), ("backward0-0", 1000, 3000), ("backward0-1", 4000, 2000),
            ("forward1-0", 6000, 1000), ("backward0-2", 7000, 3500)]
    seq = sp.job_sequences(_trace(tmp_path, jobs), sp.window({"schedule": "ZBV"}))
    blocks, cold = sp.warm_and_cold([(sp.LOOP_BLOCK, [seq])], job=0.0)
    assert blocks[0][3] == pytest.approx(2.0)
    assert cold["gradients"][0][3] == pytest.approx(1.0) and cold["weights"][0][3] == pytest.approx(0.5)


def test_a_block_seen_at_one_level_takes_the_ratio_of_the_blocks_that_ran_both(tmp_path):
    # block 0 (rank 0, chunk 0): F cold 1.5 then warm 1.0; block 3 (rank 0, chunk 1): F only cold, 3.0;
    # an empty input backward of block 0 (0.01 ms) gives no ratio
    jobs = [("forward0-0", 0, 1500), ("forward0-1", 1500, 1000), ("backward_b0-0", 2500, 10),
            ("forward1-0", 2510, 3000)]
    seq = sp.job_sequences(_trace(tmp_path, jobs), sp.window({"schedule": "ZBV"}))
    blocks, cold = sp.warm_and_cold([(sp.V_BLOCK, [seq])], job=0.0)
    # cold / warm = 1.5 / 1.0 in block 0, the one block that ran both: block 3's warm F is 3.0 / 1.5
    assert blocks[3][0] == pytest.approx(2.0) and cold["weights"][3][0] == pytest.approx(1.0)
    assert blocks[0][0] == pytest.approx(1.0) and cold["weights"][0][0] == pytest.approx(0.5)
    assert blocks[0][1] == pytest.approx(0.01) and cold["weights"][0][1] == 0.0


def test_receives_posted_ahead_take_a_message_sent_before_them_without_a_hand_off():
    """FThenB, 2 ranks, 2 micro-batches, F = 1, B = I + W = 2, latency 0.5, by hand. Stage 1 asks
    for F1 at 2.5 (after F0 at 1.5-2.5), stage 0 sent it at 2: a receive posted by its op gets
    the data at 3.0 (the later post + 0.5), one posted ahead at 2.5 (sent + 0.5, there when
    asked). Rendezvous: F1 3-4, B0 4-6, B1 6-8; stage 0 gets B0 at 6.5 (B0 6.5-8.5) and B1, sent
    at 8 and asked at 8.5, at 9: B1 9-11. Ahead: F1 2.5-3.5, B0 3.5-5.5, B1 5.5-7.5; stage 0 B0
    6-8, B1 (there at 8) 8-10."""
    for recv, want in (("rendezvous", 11.0), ("ahead", 10.0)):
        costs = StaticCosts(1, 1, 1, latency=0.5, recv=recv)
        assert simulate_static("FThenB", 2, 2, costs=costs).makespan == pytest.approx(want), recv
    # a landed receive's own cost (0.25) is paid before it: stage 1 takes F1 at 2.75 (F1 2.75-3.75,
    # B0 -5.75, B1 -7.75); stage 0 asks for B0 at 2.25, gets it at 6.25 (B0 -8.25) and B1, there
    # at 8.25, at 8.5: B1 8.5-10.5
    costs = StaticCosts(1, 1, 1, latency=0.5, recv="ahead", receive=0.25)
    assert simulate_static("FThenB", 2, 2, costs=costs).makespan == pytest.approx(10.5)
    with pytest.raises(ScheduleError, match=r"recv='early': use one of \['ahead', 'rendezvous'\]"):
        StaticCosts(1, 1, 1, recv="early")


def test_a_layout_profiled_whole_takes_its_own_stage_costs():
    """``simulator_costs``: a plan whose layout the profile measured as whole stages (``stages``,
    as ``costs_from`` writes them, through JSON) takes those; any other plan sums its blocks."""
    prof = {"job": 0.1, "message": 0.2, "latency": 0.3, "comm": 0.05, "recv": "ahead", "receive": 0.02,
            "blocks": {b: [1.0, 0.5, 0.5, 1.2] for b in range(4)},
            "cold": {"weights": {b: [0.1, 0.1, 0.0, 0.1] for b in range(4)},
                     "gradients": {b: [0.0, 0.0, 0.0, 0.2] for b in range(4)}},
            "stages": {sp.layout_key([0, 0, 1, 1], 1): {"warm": {0: [1.6, 0.0, 1.8, 2.0], 1: [1.7, 0.9, 0.9, 2.1]},
                                                        "cold": {"weights": {0: [0.3, 0.0, 0.0, 0.0],
                                                                             1: [0.3, 0.2, 0.0, 0.0]},
                                                                 "gradients": {0: [0.0, 0.0, 0.0, 0.4],
                                                                               1: [0.0, 0.0, 0.0, 0.4]}}}}}
    prof = json.loads(json.dumps(prof))   # as bench_static --save-profile keeps it: string keys
    costs, per_stage, cold = sp.simulator_costs(prof, [0, 0, 1, 1], 1)
    assert per_stage[0] == Costs(1.6, 0.0, 1.8, 2.0) and per_stage[1] == Costs(1.7, 0.9, 0.9, 2.1)
    assert cold[1]["weights"] == Costs(0.3, 0.2, 0.0, 0.0) and cold[0]["gradients"].full_backward == 0.4
    assert costs.receive == 0.02 and costs.latency == 0.3
    # ZBV (one block per stage) is not that layout: each stage its block's figures
    _, per_stage, cold = sp.simulator_costs(prof, [0, 1, 1, 0], 2)
    assert per_stage[0] == Costs(1.0, 0.5, 0.5, 1.2) and cold[3]["gradients"] == Costs(0.0, 0.0, 0.0, 0.2)
    # a layout of several blocks per stage not profiled whole (one stage of four): its blocks' sums
    _, per_stage, _ = sp.simulator_costs(prof, [0, 0, 0, 0], 1)
    assert per_stage == {0: Costs(4.0, 2.0, 2.0, 4.8)}


def test_two_block_stages_are_measured_as_stages(tmp_path):
    # IR_FThenB's rank 0 (stage 0, two blocks): F, F (warm), B (after a forward: cold gradients,
    # 5.0), B (warm, 4.0)
    jobs = [("forward0-0", 0, 2000), ("forward0-1", 2000, 1500), ("backward0-0", 3500, 5000),
            ("backward0-1", 8500, 4000)]
    seq = sp.job_sequences(_trace(tmp_path, jobs), sp.window({"schedule": "ZBV"}))
    warm, cold = sp.warm_and_cold([(sp.STAGE_OF, [seq])], job=0.0)
    assert warm[0][0] == pytest.approx(1.5) and cold["weights"][0][0] == pytest.approx(0.5)
    assert warm[0][3] == pytest.approx(4.0) and cold["gradients"][0][3] == pytest.approx(1.0)
