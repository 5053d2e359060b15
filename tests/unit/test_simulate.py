"""Simulated ranks: shard then assemble is the identity; wrong claims are caught."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paddle_ext.placements import DistSpec, Partial, Replicate, Shard
from paddle_ext.simulated_ranks import AssembleError, assemble, shard_dense, simulate


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 7), min_size=1, max_size=3), st.data())
def test_shard_then_assemble_is_identity(shape, data):
    mesh = tuple(data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=2)))
    pls = [data.draw(st.one_of(st.just(Replicate()), st.builds(Shard, st.integers(0, len(shape) - 1)),
                               st.builds(Partial, st.sampled_from(["sum", "avg", "max", "min"]))))
           for _ in mesh]
    spec = DistSpec(shape, mesh, pls)
    dense = np.random.default_rng(1).standard_normal(shape)
    local = shard_dense(dense, spec, seed=3)
    for c in spec.coords():
        assert local[c].shape == spec.local_shape(c)
    np.testing.assert_allclose(assemble(local, spec), dense, rtol=1e-12, atol=1e-12)


def test_partial_parts_are_asymmetric():
    spec = DistSpec((4, 3), (2,), "[P(sum)]")
    dense = np.ones((4, 3))
    a, b = shard_dense(dense, spec).values()
    assert not np.allclose(a, b) and not np.allclose(a, dense / 2)
    spec = DistSpec((4, 3), (3,), "[P(max)]")
    parts = list(shard_dense(dense, spec).values())
    assert all((p <= 1).all() for p in parts) and not any((p == 1).all() for p in parts)


def test_wrong_claims_are_caught():
    dense = np.arange(12.0).reshape(4, 3)
    spec = DistSpec((4, 3), (2,), "[S(0)]")
    local = shard_dense(dense, spec)
    with pytest.raises(AssembleError, match="Replicate .* hold different values"):
        assemble(local, DistSpec((2, 3), (2,), "[R]"))
    with pytest.raises(AssembleError, match="holds shape \\[2, 3\\], but .* gives it \\[4, 3\\]"):
        assemble(local, DistSpec((4, 3), (2,), "[R]"))


def test_uneven_mean_is_wrong_as_measured_on_paddle():
    # the local-means-then-P(avg) strategy is wrong on uneven shards: the simulation shows it
    x = np.arange(35.0).reshape(5, 7)
    got = simulate(lambda a: a.mean(keepdims=True).reshape(1), [x], [DistSpec((5, 7), (2,), "[S(0)]")],
                   [DistSpec((1,), (2,), "[P(avg)]")])[0]
    assert not np.isclose(got[0], x.mean())
    even = np.arange(28.0).reshape(4, 7)
    got = simulate(lambda a: a.mean(keepdims=True).reshape(1), [even], [DistSpec((4, 7), (2,), "[S(0)]")],
                   [DistSpec((1,), (2,), "[P(avg)]")])[0]
    assert np.isclose(got[0], even.mean())
