"""grad_parity's assembly and judgement on hand-made rank records (no ranks, no Paddle)."""
import numpy as np
import pytest

from paddle_ext.models import grad_parity as gp

G = np.arange(24, dtype="float32").reshape(4, 6)


def _rec(local, ids, shape, placements):
    return {"local": local, "mesh": ids, "shape": shape, "placements": placements, "global_shape": list(G.shape)}


def test_shards_on_two_mesh_dims_concatenate_in_mesh_order():
    # mesh [[0,1],[2,3]]: dim 0 shards rows, dim 1 shards columns
    recs = [_rec(G[r * 2:(r + 1) * 2, c * 3:(c + 1) * 3], [0, 1, 2, 3], [2, 2], ["S(0)", "S(1)"])
            for r in range(2) for c in range(2)]
    np.testing.assert_array_equal(gp.assemble(recs, "w"), G)


def test_two_mesh_dims_sharding_one_tensor_dim_are_outer_major():
    blocks = np.array_split(G, 4, axis=0)
    recs = [_rec(blocks[i], [0, 1, 2, 3], [2, 2], ["S(0)", "S(0)"]) for i in range(4)]
    np.testing.assert_array_equal(gp.assemble(recs, "w"), G)


@pytest.mark.parametrize("kind, want", [("sum", G), ("avg", G / 2)])
def test_partial_reduces(kind, want):
    recs = [_rec(G * 0.25, [0, 1], [2], [f"P({kind})"]), _rec(G * 0.75, [0, 1], [2], [f"P({kind})"])]
    np.testing.assert_allclose(gp.assemble(recs, "w"), want)


def test_replicas_that_differ_are_an_error_not_a_pick():
    recs = [_rec(G, [0, 1], [2], ["R"]), _rec(G + 1e-6, [0, 1], [2], ["R"])]
    with pytest.raises(gp.AssemblyError, match="copies differ"):
        gp.assemble(recs, "w")


def test_a_missing_rank_is_an_error():
    with pytest.raises(gp.AssemblyError, match="1 of the 2 ranks"):
        gp.assemble([_rec(G[:2], [0, 1], [2], ["S(0)"])], "w")


def _run(grads, weights0, updates):
    """Two dp ranks each holding the whole (replicated) value; the weights after the step are
    the float32 sum of the weights before and ``updates``."""
    weights1 = {n: (weights0[n].astype("float64") + u).astype("float32") for n, u in updates.items()}
    per_rank = []
    for rank in (0, 1):
        per_rank.append({"rank": rank,
                         **{k: {n: _rec(v, [0, 1], [2], ["R"]) | {"global_shape": list(v.shape)}
                                for n, v in d.items()}
                            for k, d in (("grads", grads), ("weights0", weights0), ("weights1", weights1))}})
    return per_rank


def test_check_training_sees_a_gradient_off_by_a_factor_that_losses_would_not():
    rng = np.random.default_rng(0)
    w0 = {"a": rng.standard_normal((3, 4)).astype("float32"), "b": rng.standard_normal(4).astype("float32")}
    g = {"a": rng.standard_normal((3, 4)).astype("float32"), "b": rng.standard_normal(4).astype("float32")}
    upd = {n: -0.1 * v.astype("float64") for n, v in g.items()}
    dense = {"weights0": w0, "grads": g, "updates": upd}
    ok, why = gp.check_training(dense, _run(g, w0, upd), 1e-5)
    assert ok, why
    for factor in (2.0, 0.5):
        bad = {**g, "b": g["b"] * factor}
        ok, why = gp.check_training(dense, _run(bad, w0, {**upd, "b": upd["b"] * factor}), 1e-5)
        assert not ok and f"b rel {abs(factor - 1):.3g} x{factor:.6f}" in why, why


def test_initial_weights_must_be_equal_bit_for_bit():
    w0 = {"a": np.ones(3, "float32")}
    g = {"a": np.ones(3, "float32")}
    dense = {"weights0": w0, "grads": g, "updates": {"a": -0.1 * np.ones(3)}}
    nudged = {"a": np.nextafter(w0["a"], np.float32(2))}
    ok, why = gp.check_training(dense, _run(g, nudged, dense["updates"]), 1e-5)
    assert not ok and "initial weights differ" in why


def test_a_gradient_zero_in_exact_arithmetic_is_judged_at_the_floor():
    w0 = {"big": np.ones(4, "float32"), "zero": np.ones(2, "float32")}
    g = {"big": np.full(4, 0.05, "float32"), "zero": np.array([1e-10, -1e-10], "float32")}
    got = {**g, "zero": np.array([3e-10, 0.0], "float32")}     # noise: 200% relative, 1e-9 absolute
    upd = {n: -0.1 * v.astype("float64") for n, v in g.items()}
    dense = {"weights0": w0, "grads": g, "updates": upd}
    ok, why = gp.check_training(dense, _run(got, w0, upd), 1e-5)
    assert ok and "1 within the rounding floor" in why, why
    loud = {**g, "zero": np.array([1e-4, 0.0], "float32")}   # far above noise: a real error
    assert not gp.check_training(dense, _run(loud, w0, upd), 1e-5)[0]
