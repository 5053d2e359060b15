"""Dispatch's route through Paddle's own op, single process (mesh of one rank; 2 ranks:
tests/multirank/test_dispatch_multirank.py).

Where paddle-ext's rule and Paddle's give the same layout, a differentiable dispatched call runs
the function on the DistTensors, so Paddle's own grad node is its only one: the graph is the one
Paddle alone builds, and values and gradients are bit-equal to Paddle alone's and to paddle-ext's
own two routes. A function whose Paddle run gives another layout, or fails on DistTensors, keeps
paddle-ext's route (and its values). The decision is pure: Paddle's C++ rule is asked on specs.
"""
import numpy as np
import pytest

import paddle  # noqa: E402 - required: a broken install fails here, never skips
dist = paddle.distributed

from paddle_ext.dispatch import autograd, core, dispatch, plan_cache  # noqa: E402
from paddle_ext.dispatch.rule_lookup import get_rule, paddle_agrees  # noqa: E402
from paddle_ext.placements import DistSpec  # noqa: E402

MESH = dist.ProcessMesh([0], dim_names=["x"])
RNG = np.random.default_rng(7)
A, B, W = (RNG.standard_normal(s).astype("float32") for s in ((4, 6), (4, 6), (6, 8)))

# op: (arrays, placements, Paddle alone's call on the tensors, attrs)
CASES = {
    "add": ((A, B), ([dist.Shard(0)], [dist.Shard(0)]), lambda t: paddle.add(t[0], t[1]), {}),
    "matmul": ((A, W), ([dist.Shard(0)], [dist.Replicate()]), lambda t: paddle.matmul(t[0], t[1]), {}),
    "softmax": ((A,), ([dist.Shard(0)],), lambda t: paddle.nn.functional.softmax(t[0], -1), {"axis": -1}),
}


def _inputs(arrays, placements):
    ts = [dist.shard_tensor(paddle.to_tensor(a), MESH, p) for a, p in zip(arrays, placements)]
    for t in ts:
        t.stop_gradient = False
    return ts


def _graph(out):
    """The grad node of ``out`` and the names of the nodes it feeds."""
    node = out.grad_fn
    return node.name(), [n.name() for n in node.next_functions]


def _run(op, route):
    arrays, placements, fn, attrs = CASES[op]
    ts = _inputs(arrays, placements)
    if route == "paddle alone":
        out = fn(ts)
    elif route == "pylayer":
        with core.pylayer_only():
            out = dispatch(op, ts, attrs, lambda t, c: fn(t))
    elif route == "own native":
        with core.own_routes():
            out = dispatch(op, ts, attrs, lambda t, c: fn(t))
    else:
        out = dispatch(op, ts, attrs, lambda t, c: fn(t))
    graph = _graph(out)
    (out * out).sum().backward()
    return out, [t.grad for t in ts], graph


@pytest.mark.parametrize("op", CASES)
def test_paddles_op_serves_with_its_one_grad_node_and_the_same_bits(op):
    arrays, placements, _, attrs = CASES[op]
    plan = plan_cache.plan_for(op, _inputs(arrays, placements), attrs)
    assert plan.paddle_serves
    runs = {route: _run(op, route) for route in ("paddle alone", "dispatch", "own native", "pylayer")}
    assert plan.by_paddle is True
    alone_out, alone_grads, alone_graph = runs["paddle alone"]
    assert runs["dispatch"][2] == alone_graph                # the graph Paddle alone builds: one node for the op
    assert runs["own native"][2][0] == "DtensorFromLocalGradNode"   # paddle-ext's own route: three nodes
    assert runs["pylayer"][2][0] == "GradNodePyLayer_DispatchFunction"
    for route, (out, grads, _) in runs.items():
        assert str(out.placements) == str(alone_out.placements), route
        np.testing.assert_array_equal(out._local_value().numpy(), alone_out._local_value().numpy(), err_msg=route)
        for g, ref in zip(grads, alone_grads):
            assert str(g.placements) == str(ref.placements), route
            np.testing.assert_array_equal(g._local_value().numpy(), ref._local_value().numpy(), err_msg=route)


def test_a_function_paddle_runs_to_another_layout_keeps_paddle_exts_route():
    """The rule says add keeps S(0); this function, given DistTensors (``ctx`` None), replicates
    its result. The first call sees the layout differ, and the plan keeps paddle-ext's route."""
    x, y = _inputs((A, B), ([dist.Shard(0)], [dist.Shard(0)]))

    def replicating_add(t, ctx):
        out = t[0] + t[1]
        return dist.reshard(out, MESH, [dist.Replicate()]) if ctx is None and out.is_dist() else out

    plan_cache.forget("add")
    for _ in range(2):
        out = dispatch("add", [x, y], {}, replicating_add)
        assert out.placements == [dist.Shard(0)]
        np.testing.assert_array_equal(out._local_value().numpy(), A + B)
    assert plan_cache.plan_for("add", [x, y], {}).by_paddle is False
    plan_cache.forget("add")


def test_a_function_that_fails_on_dist_tensors_keeps_paddle_exts_route(monkeypatch):
    x, y = _inputs((A, B), ([dist.Shard(0)], [dist.Shard(0)]))
    applied = []
    real = autograd.dispatch_function
    monkeypatch.setattr(core, "dispatch_function", lambda: applied.append(1) or real())

    def local_only_add(t, ctx):
        if ctx is None and t[0].is_dist():
            raise TypeError("a kernel written for local tensors")
        return t[0] + t[1]

    plan_cache.forget("add")
    out = dispatch("add", [x, y], {}, local_only_add)
    np.testing.assert_array_equal(out._local_value().numpy(), A + B)
    (out * out).sum().backward()
    np.testing.assert_array_equal(x.grad._local_value().numpy(), 2 * (A + B))
    assert plan_cache.plan_for("add", [x, y], {}).by_paddle is False and not applied   # the native route
    plan_cache.forget("add")


def test_the_switches_turn_the_route_off_inside_their_block():
    x, y = _inputs((A, B), ([dist.Shard(0)], [dist.Shard(0)]))
    for block in (core.own_routes, core.pylayer_only):
        with block():
            out = dispatch("add", [x, y], {}, lambda t, c: paddle.add(t[0], t[1]))
        assert out.grad_fn.name() != "AddGradNode", block.__name__
    assert dispatch("add", [x, y], {}, lambda t, c: paddle.add(t[0], t[1])).grad_fn.name() == "AddGradNode"


def _spec(shape, placements):
    return DistSpec(shape, (2,), placements)


@pytest.mark.parametrize("op, specs, attrs, agrees", [
    ("add", [_spec((8, 16), "[S(0)]"), _spec((8, 16), "[S(0)]")], {}, True),
    ("add", [_spec((8, 16), "[R]"), _spec((8, 16), "[S(0)]")], {}, False),       # Paddle would reshard x
    ("matmul", [_spec((8, 16), "[R]"), _spec((16, 4), "[S(1)]")], {}, True),
    ("softmax", [_spec((8, 16), "[S(0)]")], {"axis": -1}, True),
    ("softmax", [_spec((8, 16), "[S(1)]")], {"axis": -1}, False),             # the softmax axis is split
    ("flip", [_spec((8, 16), "[S(0)]")], {"axis": (1,)}, False),               # a gap rule: Paddle has none
])
def test_paddle_agrees_asks_paddles_rule_on_specs(op, specs, attrs, agrees):
    result = get_rule(op).infer(specs, attrs)
    assert paddle_agrees(op, specs, attrs, result) is agrees
