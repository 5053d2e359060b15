"""How ``paddle-ext profile --static`` and ``tools/static_profile.py`` read a message's costs from
the two ranks' traces (``profile_static.message_pairs`` and what is built on it), by hand."""
import pytest

from paddle_ext.plan import profile_static as ps


def _traces():
    # rank 0 sends at 0 and at 5000 us; rank 1's first receive op was waiting (posted at -100,
    # done at 400), its second asked at 7000, long after its message landed, and took 50 us.
    # rank 1 sends once at 1000; rank 0's receive asked at 900, done at 1300.
    # One forward job per rank: 100 us, 80 of them in its ops.
    return [{"gloo_send": [(0, 20), (5000, 5020)], "gloo_recv": [(900, 1300)], "send": [20, 20],
             ("forward", 0): [(100, 80)]},
            {"gloo_send": [(1000, 1030)], "gloo_recv": [(-100, 400), (7000, 7050)], "send": [30],
             ("forward", 0): [(100, 80)]}]


def test_the_nth_send_is_the_other_ranks_nth_receive_both_ways():
    assert list(ps.message_pairs(_traces())) == [(0, -100, 400), (5000, 7000, 7050), (1000, 900, 1300)]


def test_hand_offs_and_landed_receives_by_hand():
    traces = _traces()
    # posted by their ops: from the later post to the receive's end
    assert ps.handoffs(traces, "rendezvous") == [400, 50, 300]
    # posted ahead: from the send, over the receives that were waiting when it started
    assert ps.handoffs(traces, "ahead") == [400, 300]
    # asked 1 ms or more after the send: landed, the op's own cost
    assert ps.landed_receives(traces) == [50]


@pytest.mark.parametrize("sockets, ahead, recv, latency, receive", [
    ("1", "0", "ahead", 0.35, 0.05),        # sockets: a message lands without its receive op
    ("0", "1", "ahead", 0.35, 0.05),        # gloo's channels, receives posted ahead
    ("0", "0", "rendezvous", 0.25, 0.0)])   # gloo's channels, each receive posted by its op
def test_the_simulators_message_costs_follow_the_transport(monkeypatch, sockets, ahead, recv, latency, receive):
    monkeypatch.setenv("PADDLE_EXT_P2P_SOCKETS", sockets)
    monkeypatch.setenv("PADDLE_EXT_RECV_AHEAD", ahead)
    costs = ps.message_costs_ms(_traces())
    assert costs["recv"] == recv
    assert costs["latency"] == pytest.approx(latency) and costs["receive"] == pytest.approx(receive)
    assert costs["message"] == pytest.approx(0.02)   # the send ops' median (20, 20, 30 us)
    assert costs["job"] == pytest.approx(0.02)   # a job less its ops
    # the planner's section is the same figures in seconds
    section = ps.runtime_from(_traces())
    assert section["latency_s"] == pytest.approx(latency / 1000) and section["recv"] == costs["recv"]
