"""tools/static_check.py: what the simulator charges per kind, what the jobs took, and the
replay of a schedule with its own job times, each checked by hand on one micro-batch."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
import static_check as sc  # noqa: E402


def _step(jobs):
    """One job_sequences step: (start us, end us, [(kind, chunk, start us, us)])."""
    return (jobs[0][2], jobs[-1][2] + jobs[-1][3] + 500, jobs)


# IR_FThenB, 2 ranks, 1 micro-batch: rank 0 F, send, receive, B; rank 1 receive, F, B, send (ms
# below: F 1, B 2, send 0.1; the receives' own times are the hand-off model's business)
RANK0 = [("forward", 0, 0, 1000), ("send_forward", 0, 1000, 100), ("recv_backward", 0, 1100, 5000),
         ("backward", 0, 6100, 2000)]
RANK1 = [("recv_forward", 0, 0, 1600), ("forward", 0, 1600, 1000), ("backward", 0, 2600, 2000),
         ("send_backward", 0, 4600, 100)]


def test_replay_runs_each_job_for_its_own_time_and_each_receive_as_a_hand_off():
    # rank 0 sends at 1.1; rank 1's data lands at 1.1 + L, its F and B end at 4.1 + L and its send
    # goes at 4.2 + L; rank 0's gradient lands at 4.2 + 2L, its B ends at 6.2 + 2L
    (measured, replayed), = sc.replay("IR_FThenB", [[_step(RANK0)], [_step(RANK1)]], latency=0.5, m=1)
    assert replayed == pytest.approx(6.2 + 2 * 0.5)
    assert measured == pytest.approx(8.1)   # the jobs' span: 0 -> 8.1 ms


def test_replay_refuses_merged_jobs():
    merged = [("forward+send_forward", 0, 0, 1100), ("recv_backward", 0, 1100, 5000), ("backward", 0, 6100, 2000)]
    with pytest.raises(ValueError, match="one job per action"):
        sc.replay("IR_FThenB", [[_step(merged)], [_step(RANK1)]], latency=0.5, m=1)


def test_kind_ms_sums_the_compute_jobs_per_step():
    two_steps = [[_step(RANK0), _step(RANK0)], [_step(RANK1)]]
    assert sc.kind_ms(two_steps) == [{"F": 1.0, "B": 2.0}, {"F": 1.0, "B": 2.0}]


def test_charged_adds_the_job_cost_and_each_cold_state_to_the_stage_cost():
    blocks = {b: [1.0, 0.5, 0.5, 2.0] for b in range(4)}
    prof = {"blocks": blocks, "job": 0.1, "message": 0.0, "latency": 0.0, "step": 0.0,
            "cold": {"weights": {b: [0.25, 0.0, 0.0, 0.0] for b in range(4)},
                     "gradients": {b: [0.0, 0.0, 0.0, 0.5] for b in range(4)}}}
    # a stage is two blocks: F 2, B 4. The step's first F reads cold weights (+0.5); the B after it
    # finds the weights warm and the gradients cold (+1.0)
    assert sc.charged_ms("IR_FThenB", prof, m=1) == [pytest.approx({"F": 2.6, "B": 5.1})] * 2



def test_the_first_stage_runs_its_input_backward_in_w():
    blocks = {0: [1.0, 0.0, 2.0, 2.5], 1: [1.0, 0.5, 0.5, 1.2], 2: [1.0, 0.5, 0.5, 1.2], 3: [1.0, 0.5, 0.5, 1.2]}
    prof = {"blocks": blocks, "job": 0.0, "message": 0.0, "latency": 0.0, "step": 0.0, "cold": {}}
    # ZBH1, 1 micro-batch: stage 0 (blocks 0, 1) sends nothing back, so its I (0.5) runs in W
    # (2.0 + 0.5 + 0.5); stage 1 splits as profiled (I 1.0, W 1.0)
    assert sc.charged_ms("ZBH1", prof, m=1) == [pytest.approx({"F": 2.0, "I": 0.0, "W": 3.0}),
                                                pytest.approx({"F": 2.0, "I": 1.0, "W": 1.0})]


def test_split_costs_moves_the_first_stages_input_backward_and_its_cold_extra_into_w():
    from paddle_ext.passes import Costs
    from paddle_ext.passes.static.job_model import split_costs

    stages = {0: Costs(1.0, 0.5, 2.0), 1: Costs(1.0, 0.5, 0.5)}
    cold = {0: {"weights": Costs(0.2, 0.3, 0.0)}, 1: {"weights": Costs(0.2, 0.3, 0.0)}}
    warm, extra = split_costs(stages, cold)
    assert (warm[0].backward_input, warm[0].backward_weight, warm[0].backward) == (0.0, 2.5, 2.5)
    assert (extra[0]["weights"].backward_input, extra[0]["weights"].backward_weight) == (0.0, 0.3)
    assert warm[1] == stages[1] and extra[1] == cold[1]
    assert split_costs(None, None) == (None, None)



def test_a_receive_posted_ahead_waits_only_for_its_send():
    # IR_FThenB, 2 micro-batches, L = 0.5 ms. Rank 0: F 1, send 0.1, F 1, send 0.1, then two B of 2
    # (each after its receive). Rank 1: F0 takes 3 ms, so it posts its second receive at 4.6, long
    # after rank 0 sent at 2.2
    rank0 = [("forward", 0, 0, 1000), ("send_forward", 0, 1000, 100), ("forward", 0, 1100, 1000),
             ("send_forward", 0, 2100, 100), ("recv_backward", 0, 2200, 100), ("backward", 0, 2300, 2000),
             ("recv_backward", 0, 4300, 100), ("backward", 0, 4400, 2000)]
    rank1 = [("recv_forward", 0, 0, 100), ("forward", 0, 100, 3000), ("recv_forward", 0, 3100, 100),
             ("forward", 0, 3200, 1000), ("backward", 0, 4200, 2000), ("send_backward", 0, 6200, 100),
             ("backward", 0, 6300, 2000), ("send_backward", 0, 8300, 100)]
    ranks = [[_step(rank0)], [_step(rank1)]]
    (_, rendezvous), = sc.replay("IR_FThenB", ranks, latency=0.5, m=2)
    (_, ahead), = sc.replay("IR_FThenB", ranks, latency=0.5, m=2, recv="blocking")
    # rendezvous: rank 1's F1 waits 4.6 + 0.5, B0, B1 and the sends follow (10.3); rank 0's last
    # receive, posted at 10.7, lands 11.2 and its B ends 13.2. Posted ahead: F1's data was there at
    # 2.7, rank 1 sends at 7.7 and 9.8, rank 0's gradients land at 8.2 and 10.3, its B ends 12.3
    assert rendezvous == pytest.approx(13.2) and ahead == pytest.approx(12.3)
