"""The fast path of a repeated reshard (paddle_ext/reshard/fast.py) on real gloo ranks.

* Every 1-D pair of the reshard matrix on 2 ranks, three calls each (S -> S once more with the
  exchange of blocks that serves tensors above ``fast.GATHER_BELOW``) (and every 2x2 and cross-mesh
  case of the matrix on 4 ranks, two calls each) (the first fills the cache,
  the others are served from it) through ``dist.reshard`` after ``install()`` and through
  ``paddle_ext.reshard``: bit-exact against dense every time, the source never written, the
  result never sharing the source's memory.
* Ranks asking for different cached keys with ``check=True``: the named error on every rank,
  before any data moves, and the ranks stay in step.
* The debug switch sends every call through the full path; a hand-back to Paddle served from
  the cache still calls Paddle's reshard and tells the listeners on every call.
"""
import numpy as np
import pytest

import fast_path_ranks as fr
from paddle_ext.reshard.checks import assemble_case
from paddle_ext.reshard.exact import dense_for
from paddle_ext.reshard.matrix_cases import cross_cases, one_d_cases, two_d_cases
from paddle_ext.testing import run_ranks

pytestmark = pytest.mark.multirank


def _check_repeated(cases, res, calls):
    bad = []
    for c in cases:
        for way in ("dist", "ext"):
            for i in range(calls):
                ok, why = assemble_case(c, [r[(c.id, way, i)] for r in res])
                if not ok:
                    bad.append(f"{c.id} {way} call {i + 1}: {why}")
    assert not bad, f"{len(bad)} failed:\n" + "\n".join(bad[:20])
    assert all(r["cached"] > 0 for r in res)
    # a result still held is never the buffer of a later call (the gather writes into the last
    # output only when nothing holds it any more)
    assert all(not r["overwritten"] for r in res), [r["overwritten"] for r in res]


def test_repeated_calls_are_bit_exact_on_2_ranks(tmp_path):
    cases = one_d_cases(2)
    res = run_ranks(fr.repeated_calls, nproc=2, args=(cases, 3, None, True), timeout=300, log_dir=tmp_path)
    _check_repeated(cases, res, 3)
    # small S(0) -> S(1): one all_gather of the whole shards and a slice (below GATHER_BELOW); it,
    # S(0) -> R and P -> R each as one native call on the gloo communicator
    assert "gathered_slice" in res[0]["runners"], res[0]["runners"]
    for r in res:
        assert {"gather_take", "all_gather_into", "all_reduce_into"} <= set(r["native_calls"]), r["native_calls"]


def test_one_collective_runners_without_the_native_calls_are_bit_exact_on_2_ranks(tmp_path):
    """Without the compiled gloo runners (not built yet, another backend): Paddle's collectives
    (all_gather into the output or the kept buffer and a slice; a copy and all_reduce), the same values."""
    cases = [c for c in one_d_cases(2) if c.src.startswith(("[S(0)", "[P")) and c.src != c.dst]
    assert len(cases) >= 3
    res = run_ranks(fr.repeated_calls, nproc=2, args=(cases, 2, None, False), timeout=300, log_dir=tmp_path)
    _check_repeated(cases, res, 2)
    assert {"gathered_slice", "gathered", "reduced"} <= set(res[0]["runners"]), res[0]["runners"]
    assert all(r["native_calls"] == {} for r in res)


def test_s_to_s_by_the_exchange_of_blocks_is_bit_exact_on_2_ranks(tmp_path):
    """Above ``fast.GATHER_BELOW`` (0 here) S -> S and P -> S trade blocks by a send and a recv."""
    cases = [c for c in one_d_cases(2) if "S(" in c.dst and c.src[1] in "SP" and c.src != c.dst]
    res = run_ranks(fr.repeated_calls, nproc=2, args=(cases, 2, 0), timeout=300, log_dir=tmp_path)
    _check_repeated(cases, res, 2)
    assert {"swapped", "reduced"} <= set(res[0]["runners"]) and "gathered_slice" not in res[0]["runners"], res[0]["runners"]


@pytest.mark.long_tail   # CI runs the same 4-rank cases through the full path (test_reshard_multirank.py)
def test_repeated_2x2_and_cross_mesh_calls_are_bit_exact_on_4_ranks(tmp_path):
    cases = two_d_cases() + cross_cases()
    res = run_ranks(fr.repeated_calls, nproc=4, args=(cases, 2), timeout=400, log_dir=tmp_path)
    _check_repeated(cases, res, 2)


def test_a_mismatch_on_cache_hits_is_a_named_error_on_every_rank(tmp_path):
    res = run_ranks(fr.mismatch_on_hits, nproc=2, timeout=200, log_dir=tmp_path)
    for rank, (errors, after) in enumerate(res):
        assert all("different global shape" in e for e in errors), (rank, errors)
        assert np.array_equal(after, dense_for((4, 6)) * 0 + np.arange(24, dtype="float32").reshape(4, 6))


def test_debug_switch_and_hand_back_from_the_cache(tmp_path):
    res = run_ranks(fr.debug_and_hand_back, nproc=2, timeout=200, log_dir=tmp_path)
    dense = np.arange(24, dtype="float32").reshape(4, 6)
    for rank, (counts, y, w) in enumerate(res):
        assert counts["full path, debug=False"] == 0 and counts["full path, debug=True"] == 3, counts
        assert counts["native calls"] == 3 and counts["heard"] >= 3, counts
        assert np.array_equal(y, dense[2 * rank:2 * rank + 2])
        assert np.array_equal(w, dense[:, 3 * rank:3 * rank + 3])


def test_dropped_results_are_reused_and_nothing_held_is_written(tmp_path):
    """A small result that needs no gradient is written into an earlier result of the same
    runner once nothing holds that one (``y = dist.reshard(...)`` in a loop reuses the one before
    the last); a kept ``_local_value()`` or a result given a gradient is never written or handed out."""
    res = run_ranks(fr.reused_results, nproc=2, timeout=200, log_dir=tmp_path)
    g = np.arange(64, dtype="float32").reshape(8, 8)
    for rank, out in enumerate(res):
        expected = {"S(0)->R": lambda k: g * k, "P->R": lambda k: g * k * 3,
                    "S(0)->S(1)": lambda k: (g * k)[:, 4 * rank:4 * rank + 4]}
        for name, want in expected.items():
            o = out[name]
            for k, got in enumerate(o["seen"], start=1):
                assert np.array_equal(got, want(k)), (rank, name, k)
            assert np.array_equal(o["kept"], want(10)), (rank, name, "a kept _local_value() was written")
            for k, got in zip((11, 12, 13), o["later"]):
                assert np.array_equal(got, want(k)), (rank, name, k)
            for k, (frozen, no_grad, got) in zip((21, 22, 23), o["after"]):
                assert frozen and no_grad, (rank, name, k, "a result given a gradient was handed out again")
                assert np.array_equal(got, want(k)), (rank, name, k)
            # the loop (calls 3-5) and the dropped results after the kept part (calls 12-13) reuse
            assert o["reused"] >= 5, (rank, name, o["reused"])
