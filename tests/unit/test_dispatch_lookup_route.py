"""Dispatch's one plan cache and its one route choice, single process (mesh of one rank).

* lookup: a repeated call finds the very plan object it made, under either key form; a call with
  a list slot, a None slot or a dense tensor is cached too; a mesh of another shape (same ids)
  or another op gets its own plan; mixed meshes are never cached and raise the mixed-mesh error.
* route: ``pylayer_only()`` sends a differentiable call through paddle-ext's PyLayer (and only
  inside the block), and both routes give the dense gradients.
"""
import numpy as np
import pytest

import paddle  # noqa: E402 - required: a broken install fails here, never skips
dist = paddle.distributed

from paddle_ext.compat.native import fast_key  # noqa: E402
from paddle_ext.dispatch import DispatchError, autograd, core, dispatch, plan_cache  # noqa: E402


@pytest.fixture(params=["python", "compiled"])
def key(request):
    fast_key.use(request.param == "compiled")
    yield request.param
    fast_key.use(True)


def _add(t, ctx):
    return t[0] + t[1]


def test_a_repeated_call_finds_its_plan(key):
    mesh = dist.ProcessMesh([0], dim_names=["x"])
    x = dist.shard_tensor(paddle.ones([4, 6]), mesh, [dist.Shard(0)])
    y = dist.shard_tensor(paddle.ones([4, 6]), mesh, [dist.Shard(0)])
    first = plan_cache.plan_for("add", [x, y], {})
    x2 = dist.shard_tensor(paddle.full([4, 6], 2.0), mesh, [dist.Shard(0)])   # same layout, new tensor
    assert plan_cache.plan_for("add", [x2, y], {}) is first
    assert plan_cache.plan_for("subtract", [x2, y], {}) is not first
    # same process ids, another mesh shape: another plan
    mesh11 = dist.ProcessMesh([[0]], dim_names=["a", "b"])
    z = dist.shard_tensor(paddle.ones([4, 6]), mesh11, [dist.Shard(0), dist.Replicate()])
    w = dist.shard_tensor(paddle.ones([4, 6]), mesh11, [dist.Shard(0), dist.Replicate()])
    other = plan_cache.plan_for("add", [z, w], {})
    assert other is not first and tuple(other.mesh.shape) == (1, 1)
    assert plan_cache.plan_for("add", [z, w], {}) is other


def test_list_none_and_dense_slots_are_cached_and_right(key):
    mesh = dist.ProcessMesh([0], dim_names=["x"])
    a = np.arange(24, dtype="float32").reshape(4, 6)
    x = dist.shard_tensor(paddle.to_tensor(a), mesh, [dist.Shard(0)])
    dense = paddle.to_tensor(a * 2)
    plan = plan_cache.plan_for("add", [x, dense], {})
    assert plan_cache.plan_for("add", [x, dense], {}) is plan and not plan.direct
    out = dispatch("add", [x, dense], {}, _add)
    np.testing.assert_array_equal(out._local_value().numpy(), a * 3)
    listed = plan_cache.plan_for("concat", [[x, x]], {"axis": 0})
    assert plan_cache.plan_for("concat", [[x, x]], {"axis": 0}) is listed
    got = dispatch("concat", [[x, x]], {"axis": 0}, lambda t, c: paddle.concat(t[0], axis=0))
    assert list(got.shape) == [8, 6]
    np.testing.assert_array_equal(got._local_value().numpy(), np.concatenate([a, a]))
    y = dist.shard_tensor(paddle.to_tensor(a * 5), mesh, [dist.Shard(0)])
    optional = plan_cache.plan_for("lerp", [x, y, None], {})
    assert plan_cache.plan_for("lerp", [x, y, None], {}) is optional
    assert plan_cache.plan_for("lerp", [x, y, dense], {}) is not optional


def test_mixed_meshes_are_never_cached(key):
    x = dist.shard_tensor(paddle.ones([4, 6]), dist.ProcessMesh([0], dim_names=["x"]), [dist.Shard(0)])
    y = dist.shard_tensor(paddle.ones([4, 6]), dist.ProcessMesh([[0]], dim_names=["a", "b"]),
                          [dist.Shard(0), dist.Replicate()])
    before = len(plan_cache.cached_plans())
    for _ in range(2):
        with pytest.raises(DispatchError, match="inputs are on different meshes"):
            dispatch("add", [x, y], {}, _add)
    assert len(plan_cache.cached_plans()) == before


def test_pylayer_only_changes_the_route_not_the_gradients(monkeypatch):
    mesh = dist.ProcessMesh([0], dim_names=["x"])
    rng = np.random.default_rng(0)
    xa, wa = rng.standard_normal((4, 6)).astype("float32"), rng.standard_normal((6, 8)).astype("float32")
    xd, wd = paddle.to_tensor(xa), paddle.to_tensor(wa)
    xd.stop_gradient = wd.stop_gradient = False
    (paddle.matmul(xd, wd) ** 2).sum().backward()

    applied = []
    real = autograd.dispatch_function

    def counting():
        applied.append(1)
        return real()

    monkeypatch.setattr(core, "dispatch_function", counting)
    for pylayer in (False, True, False):
        x = dist.shard_tensor(paddle.to_tensor(xa), mesh, [dist.Replicate()])
        w = dist.shard_tensor(paddle.to_tensor(wa), mesh, [dist.Shard(1)])
        x.stop_gradient = w.stop_gradient = False
        assert plan_cache.plan_for("matmul", [x, w], {}).native_hints is not None   # native is exact here
        del applied[:]
        if pylayer:
            with core.pylayer_only():
                y = dispatch("matmul", [x, w], {}, lambda t, c: paddle.matmul(t[0], t[1]))
        else:
            y = dispatch("matmul", [x, w], {}, lambda t, c: paddle.matmul(t[0], t[1]))
        assert len(applied) == int(pylayer)
        (y ** 2).sum().backward()
        np.testing.assert_allclose(x.grad._local_value().numpy(), xd.grad.numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(w.grad._local_value().numpy(), wd.grad.numpy(), rtol=1e-5, atol=1e-5)
