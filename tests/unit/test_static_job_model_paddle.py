"""The static job model's view of Paddle's own pipeline passes (passes/static/job_model.py):
the order it runs their messages in, against Paddle's VPP job list, and the costs it charges."""
import pytest

from paddle_ext.errors import ScheduleError
from paddle_ext.passes import Costs
from paddle_ext.passes.schedule_ir import Action, Kind
from paddle_ext.passes.stage_placement import stages_on_rank
from paddle_ext.passes.static.job_model import StaticCosts, paddle_job_order, simulate_static
from paddle_ext.passes.static.jobs import rank_schedule

#: the job each action of Paddle's VPP runs in (a receive of a backward and a send of a forward
#: run inside the backward and forward jobs)
PADDLE_VPP_JOB = {Kind.RECV_F: "recv_forward", Kind.F: "forward", Kind.B: "backward", Kind.SEND_B: "send_backward"}


def paddle_vpp_jobs(rank, p, m):
    """Paddle's own VPP job list for ``rank`` (its pass's job builder, as the Engine calls it)."""
    from paddle_ext.compat.ports.pipeline_registry import registered_pipeline_passes

    vpp = registered_pipeline_passes()["VPP"]()
    for key, value in dict(num_micro_batches=m, pp_stage=rank, pp_degree=p, vpp_degree=2, split_backward=False).items():
        vpp.set_attr(key, value)
    vpp._in_pir_mode = True  # the PIR job list: recv_forward / send_backward jobs of their own
    return [(job.type(), job.micro_batch_id()) for job in vpp._create_job_list()][:-1]  # less the optimizer


@pytest.mark.parametrize("p,m", [(2, 8), (2, 4), (4, 8)])
def test_paddle_vpp_order_is_paddles_job_list(p, m):
    _, lowered, chunks = rank_schedule("VPP", p, m, 2)
    for rank in range(p):
        chunk = {s: c for c, s in enumerate(stages_on_rank(rank, p, 2, "loop"))}
        ours = [(f"{PADDLE_VPP_JOB[a.kind]}{chunk[a.stage]}", a.microbatch)
                for a in paddle_job_order(lowered[rank], defer_send_backward=True) if a.kind in PADDLE_VPP_JOB]
        # on rank 0, stage 0 receives no forward input and sends no gradient: Paddle runs those jobs empty
        silent = {"recv_forward0", "send_backward0"} if rank == 0 else set()
        assert ours == [(t, mb) for t, mb in paddle_vpp_jobs(rank, p, m) if t not in silent]


def test_paddle_order_puts_each_message_beside_its_compute():
    _, lowered, _ = rank_schedule("1F1B", 2, 4)
    for rank, actions in lowered.items():
        ordered = paddle_job_order(actions)
        assert sorted(map(str, ordered)) == sorted(str(a) for a in actions if a is not None)
        for i, a in enumerate(ordered):
            if a.kind in (Kind.RECV_F, Kind.RECV_B):
                assert ordered[i + 1] == Action(a.stage, Kind.F if a.kind is Kind.RECV_F else Kind.B, a.microbatch)
            if a.kind in (Kind.SEND_F, Kind.SEND_B):
                assert ordered[i - 1] == Action(a.stage, Kind.F if a.kind is Kind.SEND_F else Kind.B, a.microbatch)


def test_a_message_without_its_compute_is_refused():
    with pytest.raises(ScheduleError, match="without its compute"):
        paddle_job_order([Action(1, Kind.SEND_B, 0)])


def test_fthenb_as_paddle_runs_it_by_hand():
    # 2 ranks, 2 micro-batches, F = 1, full B = 2, latency 0.5, sends do not block, and a message's
    # data leaves when both its send and its receive are posted (gloo's rendezvous):
    # rank 1 posts F0's receive at 0, F0 is sent at 1: there at 1.5, F0 1.5-2.5; F1 was sent at 2,
    # its receive is posted at 2.5: there at 3.0 (not 2.5), F1 3-4, B0 4-6, B1 6-8;
    # rank 0 posted B0's receive at 2, B0 sent at 6: there at 6.5, B0 6.5-8.5; B1 was sent at 8,
    # its receive is posted at 8.5: there at 9.0, B1 9-11
    costs = StaticCosts(1, 1, 1, latency=0.5, full_backward=2)
    result = simulate_static("FThenB", 2, 2, costs=costs, paddle_pass=True)
    assert result.makespan == 11.0 and result.recv == "rendezvous"
    first_b = next(i for i, a in enumerate(result.actions[0]) if a.kind is Kind.B)
    assert (result.starts[0][first_b], result.ends[0][-1]) == (6.5, 11.0)


def test_a_receive_posted_after_its_send_pays_the_latency():
    # a message's latency counts from the later of the two posts: costs at the receive, not at the
    # send, when the receiver comes late. Only the receive's latency differs between the models
    from paddle_ext.passes import simulate_schedule

    _, lowered, _ = rank_schedule("FThenB", 2, 4)
    for latency in (0.0, 0.5):
        eager = simulate_schedule(lowered, Costs(1, 1, 1), comm_latency=latency, blocking_sends=False)
        rendezvous = simulate_schedule(lowered, Costs(1, 1, 1), comm_latency=latency, blocking_sends=False,
                                       recv="rendezvous")
        assert (rendezvous.makespan == eager.makespan) if latency == 0 else (rendezvous.makespan > eager.makespan)


def test_a_schedule_without_the_split_pays_the_full_backward():
    # one rank, 4 micro-batches: FThenB runs 4 F and 4 full B; ZBH1 runs F, I and W apiece
    stage = {0: Costs(1, 1, 1, full_backward=3)}
    unit = StaticCosts(1, 1, 1)
    assert simulate_static("FThenB", 1, 4, costs=unit, paddle_pass=True, stage_costs=stage).makespan == 16
    assert simulate_static("ZBH1", 1, 4, costs=unit, stage_costs=stage).makespan == 12
