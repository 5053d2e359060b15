"""The dispatcher's compiled entry (``fast_key.ROUTE``), single process.

Its one answer -- a repeated differentiable call whose plan Paddle's own op serves, in dygraph,
grad on, no route switch, no audit -- must be what the Python decision gives (Paddle's op on the
DistTensors: its one grad node, the same bits), and every other call must reach the Python
decision with the lookup it made. It reads the dygraph tracer and the grad switch through
Paddle's C++ functions; those readings are checked against Paddle's Python ones.
"""
import logging

import numpy as np
import pytest

import paddle  # noqa: E402 - required: a broken install fails here, never skips
dist = paddle.distributed

from paddle_ext.compat.native import cpp_build, fast_key  # noqa: E402
from paddle_ext.dispatch import core, dispatch, plan_cache  # noqa: E402
from paddle_ext.dispatch.audit import audit  # noqa: E402
from paddle_ext.dispatch.audit_report import _ACTIVE  # noqa: E402

MESH = dist.ProcessMesh([0], dim_names=["x"])
RNG = np.random.default_rng(11)
A, B = (RNG.standard_normal((4, 6)).astype("float32") for _ in range(2))


@pytest.fixture(scope="module")
def module():
    fast_key.use(True)   # builds on first use, then cached
    assert fast_key.ROUTE[0] is not None, fast_key.status()
    yield cpp_build.build_and_load("fast_key")
    fast_key.use(True)


@pytest.fixture
def decisions(module):
    """The route bound to a spy around the dispatcher's Python decision: the list of the lookups
    it was handed, one per call that reached it."""
    seen = []

    def spy(op, slots, attrs, run_local, found):
        seen.append(found)
        return core._decide(op, slots, attrs, run_local, found)

    fast_key.bind_route(plan_cache.PLANS, core._ROUTES, core._ALL_ROUTES, _ACTIVE, spy)
    plan_cache.forget("add")
    yield seen
    fast_key.bind_route(plan_cache.PLANS, core._ROUTES, core._ALL_ROUTES, _ACTIVE, core._decide)
    plan_cache.forget("add")


def _pair(requires_grad=True):
    ts = [dist.shard_tensor(paddle.to_tensor(a), MESH, [dist.Shard(0)]) for a in (A, B)]
    for t in ts:
        t.stop_gradient = not requires_grad
    return ts


def _add(t, ctx):
    return paddle.add(t[0], t[1])


def test_grad_state_reads_what_paddle_says(module):
    assert module.grad_state() is True
    with paddle.no_grad():
        assert module.grad_state() is False
        with paddle.enable_grad():
            assert module.grad_state() is True
    with paddle.base.framework._dygraph_guard(None):
        assert module.grad_state() is None and not paddle.in_dynamic_mode()
    assert module.grad_state() is True
    assert fast_key.route_agrees(module, paddle)


def test_a_module_that_misreads_the_grad_switch_is_not_used(caplog):
    class Misreads:
        @staticmethod
        def grad_state():
            return True   # says grad is on under paddle.no_grad() too

    assert not fast_key.route_agrees(Misreads, paddle)
    with caplog.at_level(logging.WARNING, logger="paddle_ext.dispatch"):
        assert not fast_key._route_checked(Misreads)
    assert "decides every route in Python" in caplog.text


def test_the_repeated_call_paddle_serves_runs_in_the_compiled_entry(decisions):
    x, y = _pair()
    first = dispatch("add", [x, y], {}, _add)
    assert len(decisions) == 1 and decisions[0][0] is None and decisions[0][2] is False   # a miss: planned
    plan = plan_cache.cached_plans()[-1]
    assert plan.op == "add" and plan.by_paddle is True
    again = dispatch("add", [x, y], {}, _add)
    assert len(decisions) == 1   # the compiled entry ran it
    alone = paddle.add(x, y)
    for out in (first, again):
        assert out.grad_fn.name() == alone.grad_fn.name() == "AddGradNode"
        assert str(out.placements) == str(alone.placements) and out.process_mesh == alone.process_mesh
        np.testing.assert_array_equal(out._local_value().numpy(), alone._local_value().numpy())
    (again * again).sum().backward()
    gx, gy = x.grad.numpy(), y.grad.numpy()
    np.testing.assert_array_equal(gx, 2 * (A + B))
    np.testing.assert_array_equal(gy, 2 * (A + B))


@pytest.mark.parametrize("state", ["no_grad", "own_routes", "pylayer_only", "audit", "stop_gradient"])
def test_every_other_call_reaches_the_python_decision_with_the_lookup(decisions, state):
    x, y = _pair()
    dispatch("add", [x, y], {}, _add)   # plan it; Paddle's op serves it
    plan = plan_cache.cached_plans()[-1]
    decisions.clear()
    if state == "stop_gradient":
        x, y = _pair(requires_grad=False)
        out = dispatch("add", [x, y], {}, _add)
    elif state == "audit":
        with audit() as report:
            out = dispatch("add", [x, y], {}, _add)
        assert report.dispatched.get("add") == 1
    else:
        block = {"no_grad": paddle.no_grad, "own_routes": core.own_routes, "pylayer_only": core.pylayer_only}[state]
        with block():
            out = dispatch("add", [x, y], {}, _add)
    assert len(decisions) == 1
    found = decisions[0]
    if state == "stop_gradient":   # another key: no input requires grad
        assert found[2] is True
    else:
        assert found[0] is plan and found[2] is False
    np.testing.assert_array_equal(out._local_value().numpy(), (A + B))


def test_calls_without_a_compiled_key_or_with_other_attributes_reach_python(decisions):
    from collections import OrderedDict

    x, y = _pair()
    dense = paddle.to_tensor(B)
    out = dispatch("add", [x, dense], {}, _add)   # a dense input: no compiled key
    assert decisions == [False]
    np.testing.assert_allclose(out._local_value().numpy(), A + B)
    decisions.clear()
    dispatch("add", [x, y], OrderedDict(), _add)   # not a plain dict: the compiled entry does not look
    assert decisions == [None]


def test_an_error_in_the_function_comes_out_of_the_compiled_entry(decisions):
    x, y = _pair()
    dispatch("add", [x, y], {}, _add)

    def fails(t, ctx):
        raise ValueError("the local function failed")

    n = len(decisions)
    with pytest.raises(ValueError, match="the local function failed"):
        dispatch("add", [x, y], {}, fails)
    assert len(decisions) == n   # raised from the compiled entry itself


def test_the_route_needs_its_state(module):
    with pytest.raises(TypeError, match="set_route_state"):
        module.set_route_state({}, core._ROUTES, core._ALL_ROUTES, "not a list", core._decide)
    with pytest.raises(TypeError, match=r"route\(op, slots, attrs, run_local\) takes 4 arguments"):
        module.route("add", [], {})
