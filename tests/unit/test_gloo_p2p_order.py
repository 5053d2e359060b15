"""gloo-batch-p2p-order: a batch of sends and receives, reordered, cannot deadlock on gloo.

The model of gloo here: a rank runs its batch one op at a time, and a send and the matching
receive complete together (a rendezvous); a rank whose current op has no partner waits. This
is how Paddle 3.3.1's gloo isend/irecv behave inside ``dist.batch_isend_irecv`` (Schedule1F1B
deadlocks so: tests/multirank/test_paddle_scenarios.py, ``pipelining[1F1B]``).
"""
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from paddle_ext.compat.fixes.gloo_p2p import deadlock_free_order


@dataclass(frozen=True)
class Op:
    kind: str   # "send" | "recv"
    peer: int
    seq: int    # the message's number within its direction (a -> b)


def _is_send(op):
    return op.kind == "send"


def run_rendezvous(batches: dict) -> tuple[bool, dict]:
    """Run every rank's batch with synchronous send/recv; (finished, what each rank received)."""
    pos = {r: 0 for r in batches}
    got = {r: [] for r in batches}
    progress = True
    while progress:
        progress = False
        for r, ops in batches.items():
            if pos[r] >= len(ops) or ops[pos[r]].kind != "send":
                continue
            send, p = ops[pos[r]], ops[pos[r]].peer
            other = batches[p][pos[p]] if pos[p] < len(batches[p]) else None
            if other is not None and other.kind == "recv" and other.peer == r:
                got[p].append((r, send.seq))
                pos[r] += 1
                pos[p] += 1
                progress = True
    return all(pos[r] == len(ops) for r, ops in batches.items()), got


def test_the_1f1b_exchange_deadlocks_as_paddle_orders_it_and_completes_reordered():
    # stage 0: forward send + backward receive; stage 1: backward send + forward receive
    batches = {0: [Op("send", 1, 0), Op("recv", 1, 0)], 1: [Op("send", 0, 0), Op("recv", 0, 0)]}
    assert run_rendezvous(batches)[0] is False
    fixed = {r: deadlock_free_order(ops, r, _is_send) for r, ops in batches.items()}
    assert fixed[0] == [Op("send", 1, 0), Op("recv", 1, 0)]   # the lower rank sends first
    assert fixed[1] == [Op("recv", 0, 0), Op("send", 0, 0)]
    assert run_rendezvous(fixed)[0] is True


def test_a_batch_with_one_peer_in_one_direction_runs_as_given_and_peers_go_in_rank_order():
    ops = [Op("send", 1, 0), Op("send", 1, 1)]
    assert deadlock_free_order(ops, 0, _is_send) == ops
    # three ranks, one direction each, in a cycle of waits as given; in rank order it completes
    batches = {0: [Op("recv", 1, 0), Op("recv", 1, 1), Op("recv", 2, 0)],
               1: [Op("send", 0, 0), Op("send", 2, 0), Op("send", 0, 1)],
               2: [Op("send", 0, 0), Op("recv", 1, 0)]}
    assert run_rendezvous(batches)[0] is False
    fixed = {r: deadlock_free_order(ops, r, _is_send) for r, ops in batches.items()}
    assert fixed[1] == [Op("send", 0, 0), Op("send", 0, 1), Op("send", 2, 0)]
    assert run_rendezvous(fixed)[0] is True


@st.composite
def exchanges(draw):
    """Ranks, a number of messages for each ordered pair, each rank's ops in a random order that
    keeps the order of messages within a direction (as a real batch does)."""
    n = draw(st.integers(2, 5))
    counts = {(a, b): draw(st.integers(0, 2)) for a in range(n) for b in range(n) if a != b}
    batches = {}
    for r in range(n):
        lanes = [[Op("send", b, k) for k in range(counts[r, b])] for b in range(n) if b != r]
        lanes += [[Op("recv", a, k) for k in range(counts[a, r])] for a in range(n) if a != r]
        lanes = [lane for lane in lanes if lane]
        ops = []
        while lanes:   # interleave the lanes at random, each lane in its own order
            lane = lanes[draw(st.integers(0, len(lanes) - 1))]
            ops.append(lane.pop(0))
            lanes = [lane for lane in lanes if lane]
        batches[r] = ops
    return batches


@settings(max_examples=300, deadline=None, derandomize=True)
@given(exchanges())
def test_reordered_batches_never_deadlock_and_keep_each_directions_order(batches):
    fixed = {r: deadlock_free_order(ops, r, _is_send) for r, ops in batches.items()}
    for r in batches:
        assert sorted(fixed[r], key=repr) == sorted(batches[r], key=repr)   # same ops
        for peer in {op.peer for op in batches[r]}:
            for kind in ("send", "recv"):
                lane = [op for op in batches[r] if op.peer == peer and op.kind == kind]
                assert [op for op in fixed[r] if op.peer == peer and op.kind == kind] == lane
    finished, got = run_rendezvous(fixed)
    assert finished, f"deadlock: {fixed}"
    for r, received in got.items():   # every message arrives, in order within its direction
        for peer in {p for p, _ in received}:
            seqs = [k for p, k in received if p == peer]
            assert seqs == sorted(seqs)
