"""paddle-ext's static (PIR) ReshardFunctions on 2 CPU ranks.

Three launches with paddle-ext's functions and one with Paddle's own:

* one reshard per hand-built PIR program, lowered by Paddle's own reshard pass and run by the
  static Executor: exact values for every covered transition, uneven shapes, every reduce type,
  a mesh without global rank 0, a reversed mesh and a one-rank mesh;
* the same kind of programs with Paddle's functions only: R -> P on ``ProcessMesh([1])`` gives
  zeros (Paddle keeps the value on GLOBAL rank 0), S -> P has no function, S -> S, P -> S and
  uneven S -> R fail to build;
* ``dist.to_static`` training with the reshards inside the forward: loss parity with dense.
"""
import numpy as np
import pytest

import static_reshard_ranks as sr
from paddle_ext.placements import DistSpec, Partial, Replicate, Shard, parse_placement
from paddle_ext.testing import run_ranks

pytestmark = pytest.mark.multirank

# (shape, mesh process ids, src, dst)
PROGRAM_CASES = [
    ((4, 6), (0, 1), "S(0)", "P(sum)"),
    ((5, 6), (0, 1), "S(0)", "P(max)"),
    ((5, 7), (0, 1), "S(1)", "P(avg)"),
    ((3, 4), (0, 1), "S(0)", "P(min)"),
    ((5, 6), (0, 1), "S(0)", "S(1)"),
    ((4, 7), (0, 1), "S(1)", "S(0)"),
    ((2, 3, 5), (0, 1), "S(2)", "S(1)"),
    ((4, 6), (1, 0), "S(0)", "S(1)"),   # mesh order is not rank order: chunk 0 lives on rank 1
    ((5, 6), (0, 1), "P(sum)", "S(0)"),
    ((4, 6), (0, 1), "P(avg)", "S(1)"),
    ((4, 5), (0, 1), "P(max)", "S(1)"),
    ((4, 7), (0, 1), "S(1)", "R"),
    ((4, 6), (0, 1), "S(0)", "R"),
    ((4, 6), (1,), "R", "P(sum)"),      # a mesh without global rank 0
    ((4, 6), (1, 0), "R", "P(sum)"),
    ((4, 6), (0, 1), "R", "P(max)"),
    ((4, 6), (1,), "S(0)", "P(sum)"),   # one-rank meshes: no communication at all
    ((4, 6), (1,), "P(sum)", "S(0)"),
    ((4, 6), (1,), "S(1)", "S(0)"),
]

FUNCTION_OF = {("S", "P"): "SToPStaticReshard", ("R", "P"): "RToPStaticReshard",
               ("S", "S"): "SToSStaticReshard", ("P", "S"): "PToSStaticReshard",
               ("S", "R"): "SToRStaticReshard"}

_NEUTRAL = {"sum": 0.0, "avg": 0.0, "max": -np.inf, "min": np.inf}
_REDUCE = {"sum": np.sum, "avg": np.mean, "max": np.max, "min": np.min}


def _expected_local(shape, mesh_ids, src: str, dst: str, index: int) -> np.ndarray:
    """What paddle-ext's function leaves on the rank at ``index`` in the mesh."""
    dense, n = sr.program_dense(shape), len(mesh_ids)
    s, d = parse_placement(src), parse_placement(dst)
    if isinstance(d, Shard):
        spec = DistSpec(shape, (n,), (d,))
        return dense[tuple(slice(o, o + length) for o, length in spec.local_slices((index,)))]
    if isinstance(d, Replicate):
        return dense
    if isinstance(s, Shard):  # own shard in place, the op's neutral elsewhere
        out = np.full(shape, _NEUTRAL[d.op], dtype="float32")
        box = tuple(slice(o, o + length) for o, length in DistSpec(shape, (n,), (s,)).local_slices((index,)))
        out[box] = dense[box] * (n if d.op == "avg" else 1)
        return out
    return dense if d.op != "sum" or index == 0 else np.zeros(shape, "float32")


def test_static_functions_give_exact_values(tmp_path):
    per_rank = run_ranks(sr.program_cases, nproc=2, args=(PROGRAM_CASES, True), timeout=120,
                         log_dir=tmp_path / "log")
    for i, (shape, mesh_ids, src, dst) in enumerate(PROGRAM_CASES):
        kind = (src[0], dst[0])
        locals_ = []
        for rank in range(2):
            status, value, chosen = per_rank[rank][i]
            assert chosen == [FUNCTION_OF[kind]], (src, dst, chosen)
            if rank not in mesh_ids:
                assert status == "skip"
                continue
            assert status == "ok", (shape, mesh_ids, src, dst, rank, value)
            index = list(mesh_ids).index(rank)
            np.testing.assert_array_equal(value, _expected_local(shape, mesh_ids, src, dst, index),
                                          err_msg=f"{src}->{dst} {shape} mesh {mesh_ids} rank {rank}")
            locals_.append(value)
        d = parse_placement(dst)
        if isinstance(d, Partial):  # and the partial values reduce to the tensor
            np.testing.assert_allclose(_REDUCE[d.op](np.stack(locals_), axis=0), sr.program_dense(shape))


NATIVE_CASES = [
    ((4, 6), (1,), "R", "P(sum)"),
    ((4, 6), (0, 1), "R", "P(sum)"),
    ((4, 6), (0, 1), "S(0)", "P(sum)"),
    ((4, 6), (0, 1), "P(sum)", "S(0)"),
    ((4, 6), (0, 1), "S(0)", "S(1)"),
    ((4, 7), (0, 1), "S(1)", "R"),
]


def test_paddle_own_functions_zero_a_mesh_without_rank0_and_lack_the_rest(tmp_path):
    """Without paddle-ext's functions: the R -> P bug is real, P -> S and S -> S run on the
    cpu-collectives hook, the other gaps fail."""
    per_rank = run_ranks(sr.program_cases, nproc=2, args=(NATIVE_CASES, False), timeout=120,
                         log_dir=tmp_path / "log")
    (r0_status, _, r0_chosen), (status, value, chosen) = per_rank[0][0], per_rank[1][0]
    assert r0_status == "skip" and chosen == ["RToPReshardFunction"]
    assert status == "ok" and not value.any()  # rank 1 alone holds the Partial value: all zeros
    assert np.abs(sr.program_dense((4, 6))).sum() > 0
    # on a mesh with global rank 0 the same function is right: rank 0 keeps it, rank 1 zeros
    np.testing.assert_array_equal(per_rank[0][1][1], sr.program_dense((4, 6)))
    assert not per_rank[1][1][1].any()
    for rank in range(2):
        assert per_rank[rank][2][0] == "error" and "There is no reshard function" in per_rank[rank][2][1]
        # P -> S and S -> S: Paddle's own functions' reduce_scatter and all_to_all run on
        # install()'s cpu-collectives hook, exactly; uneven S -> R fails
        for i, function in ((3, "PToSReshardFunction"), (4, "SToSReshardFunction")):
            shape, mesh_ids, src, dst = NATIVE_CASES[i]
            status, value, chosen = per_rank[rank][i]
            assert status == "ok" and chosen == [function], (NATIVE_CASES[i], per_rank[rank][i])
            np.testing.assert_array_equal(value, _expected_local(shape, mesh_ids, src, dst, rank))
        assert per_rank[rank][5][0] == "error", (NATIVE_CASES[5], per_rank[rank][5])


TRAIN_CASES = ["p_to_s", "s_to_s", "uneven_chain"]
# paddle-ext functions each case's program used (S -> R: every 1-D S -> R is paddle-ext's)
EXPECTED_CALLS = {
    "p_to_s": {"PToSStaticReshard": 1, "SToRStaticReshard": 2},   # backward of P -> S is S(0) -> R
    "s_to_s": {"SToSStaticReshard": 2, "SToRStaticReshard": 1},   # S(1)->S(0) and back
    "uneven_chain": {"RToPStaticReshard": 2, "SToRStaticReshard": 1},
}


def test_to_static_training_matches_dense(tmp_path):
    steps = 5
    per_rank = run_ranks(sr.run_cases, nproc=2, args=(TRAIN_CASES, steps, True), timeout=180,
                         log_dir=tmp_path / "log")
    for case in TRAIN_CASES:
        dense = sr.dense_losses(case, steps)
        results = [per_rank[rank][case] for rank in range(2)]
        for r in results:
            assert r["status"] == "ok", (case, r.get("error"), r.get("traceback"))
            assert r["calls"] == EXPECTED_CALLS[case], (case, r["calls"])
        losses = np.array([r["losses"] for r in results])
        if case == "uneven_chain":  # the loss is replicated: every rank has the dense value
            for row in losses:
                np.testing.assert_allclose(row, dense, rtol=1e-5)
        else:  # the output is sharded by rows: each rank's loss is its half's, and their mean the whole's
            halves = np.array(sr.dense_losses(case, steps, row_blocks=2))   # [step, rank]
            for rank in range(2):
                np.testing.assert_allclose(losses[rank], halves[:, rank], rtol=1e-5, err_msg=f"{case} rank {rank}")
            np.testing.assert_allclose(losses.mean(axis=0), dense, rtol=1e-5)
