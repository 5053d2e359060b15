"""Groups of any size on the gloo-like simulated backend, and plan steps that move 0 bytes.

The simulated backend (``paddle_ext.reshard.simulated``) numbers every send, receive and
collective per rank as Paddle's gloo process group does, and fails when a message's number
differs from the receiver's (a gloo timeout on real ranks). Before odd groups were run as
scatters, every exchange on 3, 5 or 7 ranks raised; before 0-byte steps were skipped, a world
of one raised and 0-byte steps sent dummy messages.
"""
import numpy as np
import pytest

from paddle_ext.placements import DistSpec
from paddle_ext.reshard.exact import dense_for, exact_locals
from paddle_ext.reshard.planner import format_plan, plan_bytes, plan_reshard
from paddle_ext.reshard.simulated import NumpyBackend, simulate_reshard
from paddle_ext.simulated_ranks import assemble

PAIRS = [("[S(0)]", "[S(1)]"), ("[S(1)]", "[S(0)]"), ("[P(sum)]", "[S(0)]"), ("[P(avg)]", "[S(1)]"),
         ("[P(max)]", "[S(0)]"), ("[S(0)]", "[P(sum)]"), ("[S(1)]", "[P(max)]"), ("[S(0)]", "[R]"),
         ("[P(sum)]", "[R]"), ("[R]", "[S(1)]")]


def _run(src, dst, s_ranks=None, d_ranks=None, dtype=np.float32):
    dense = dense_for(src.shape, dtype, 3)
    stats, padding = {}, {}
    out = simulate_reshard(exact_locals(dense, src, 3), src, dst, src_ranks=s_ranks, dst_ranks=d_ranks,
                           stats=stats, padding=padding, lockstep=True)
    got = assemble(out, dst, rtol=0, atol=0)
    assert got.dtype == dense.dtype
    assert np.array_equal(got, dense), f"{src} -> {dst}"
    return stats, padding


@pytest.mark.parametrize("n", range(1, 9))
@pytest.mark.parametrize("pair", PAIRS, ids=["->".join(p) for p in PAIRS])
def test_every_group_size_is_bit_exact_in_lockstep(n, pair):
    for shape in ((2 * n, n + 3), (n + 1, 2 * n - 1)):  # even-ish and uneven
        src, dst = DistSpec(shape, (n,), pair[0]), DistSpec(shape, (n,), pair[1])
        plan = plan_reshard(src, dst, itemsize=4)
        stats, _ = _run(src, dst)
        assert max(stats.values(), default=0) <= plan_bytes(plan), (n, shape, format_plan(plan), stats)


@pytest.mark.parametrize("n", [3, 5, 7])
def test_odd_groups_pad_nothing_on_even_splits(n):
    src, dst = DistSpec((2 * n, n * 4), (n,), "[S(0)]"), DistSpec((2 * n, n * 4), (n,), "[S(1)]")
    stats, padding = _run(src, dst)
    assert not any(padding.values()), padding
    assert max(stats.values()) == plan_bytes(plan_reshard(src, dst, itemsize=4))


def test_a_group_of_three_inside_a_world_of_six():
    # a 2x3 mesh: the all-to-all runs in lines of 3 inside a lockstep world of 6 ranks
    src, dst = DistSpec((6, 9), (2, 3), "[R, S(0)]"), DistSpec((6, 9), (2, 3), "[R, S(1)]")
    _run(src, dst)
    src, dst = DistSpec((6, 9), (2, 3), "[S(1), P(sum)]"), DistSpec((6, 9), (2, 3), "[S(1), S(0)]")
    _run(src, dst)


def test_zero_byte_steps_send_nothing(monkeypatch):
    def refuse(self, *args, **kwargs):
        raise AssertionError(f"rank {self.rank} communicated during a 0-byte step")

    for name in ("send", "recv", "scatter", "gather_sizes"):
        monkeypatch.setattr(NumpyBackend, name, refuse)
    # one process: [R,R,R] on a 1x1x1 mesh (a pp dim of size 1) -> [R,R] on the stage sub-mesh
    src, dst = DistSpec((4, 6), (1, 1, 1), "[R, R, R]"), DistSpec((4, 6), (1, 1), "[R, R]")
    plan = plan_reshard(src, dst, src_ranks=(0,), dst_ranks=(0,), itemsize=4)
    assert plan_bytes(plan) == 0, format_plan(plan)
    _run(src, dst, (0,), (0,))
    # four ranks: R on a 2x2 mesh -> R on the same ranks as a 1-D mesh (every piece stays local)
    src, dst = DistSpec((4, 6), (2, 2), "[R, R]"), DistSpec((4, 6), (4,), "[R]")
    assert plan_bytes(plan_reshard(src, dst, src_ranks=(0, 1, 2, 3), dst_ranks=(0, 1, 2, 3), itemsize=4)) == 0
    _run(src, dst, (0, 1, 2, 3), (0, 1, 2, 3))
    # a world of one: every pair of placements on a mesh of one rank
    for a, b in PAIRS:
        _run(DistSpec((3, 5), (1,), a), DistSpec((3, 5), (1,), b))
