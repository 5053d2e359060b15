"""``@spmd_op`` and ``enable()`` bind a call without ``inspect.Signature.bind`` where they can
(the decorator through an entry generated from the signature, ``enable()``'s wrappers through
``Binder``); single process.

The ground truth is the undecorated function called the same way on the dense values (the
1-rank mesh makes the local value the whole tensor) and Python's own binding errors.
"""
import numpy as np
import pytest

import paddle  # noqa: E402 - required: a broken install fails here, never skips
dist = paddle.distributed

import paddle_ext.dispatch as pd  # noqa: E402
from paddle_ext.dispatch.binding import Binder  # noqa: E402
from paddle_ext.dispatch.core import dispatch, has_dist  # noqa: E402
from paddle_ext.dispatch.entry import make_entry  # noqa: E402

MESH = dist.ProcessMesh([0], dim_names=["x"])
A = np.random.default_rng(3).standard_normal((4, 6)).astype("float32")


def _softmax(x, axis=-1):
    return paddle.nn.functional.softmax(x, axis)


def _softmax_kw(x, *, axis=-1):
    return paddle.nn.functional.softmax(x, axis)


def _softmax_posonly(x, /, axis=-1):
    return paddle.nn.functional.softmax(x, axis)


def _softmax_varargs(x, *rest, axis=-1):
    return paddle.nn.functional.softmax(x, axis)


def _sharded():
    return dist.shard_tensor(paddle.to_tensor(A), MESH, [dist.Shard(0)])


@pytest.mark.parametrize("fn, plain", [(_softmax, True), (_softmax_kw, True), (_softmax_posonly, False),
                                       (_softmax_varargs, False)])
@pytest.mark.parametrize("call", [((), {}), ((0,), {}), ((), {"axis": 0}), ((), {"axis": -1})])
def test_a_decorated_call_gives_the_functions_own_result(fn, plain, call):
    args, kwargs = call
    import inspect
    assert (Binder.of(inspect.signature(fn)) is not None) == plain
    op = pd.spmd_op("softmax")(fn)
    assert (op.spmd._entry() is not None) == plain   # the generated entry, or Signature.bind
    if fn is _softmax_kw and args:   # axis is keyword-only there: Python refuses it by position, and so do we
        with pytest.raises(TypeError, match="positional"):
            fn(paddle.to_tensor(A), *args, **kwargs)
        with pytest.raises(pd.DispatchError, match="softmax: too many positional arguments"):
            op(_sharded(), *args, **kwargs)
        return
    want = fn(paddle.to_tensor(A), *args, **kwargs).numpy()
    dense = op(paddle.to_tensor(A), *args, **kwargs)
    np.testing.assert_array_equal(dense.numpy(), want)
    x = _sharded()
    x.stop_gradient = False
    got = op(x, *args, **kwargs)
    assert got.is_dist()
    np.testing.assert_allclose(got._local_value().numpy(), want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("args, kwargs, message", [
    ((1, 2), {}, "too many positional arguments"),
    ((), {"axis": 0, "dim": 1}, "unexpected keyword argument 'dim'"),
    ((0,), {"axis": 0}, "multiple values for argument 'axis'"),
])
def test_a_call_the_function_refuses_is_a_named_error(args, kwargs, message):
    op = pd.spmd_op("softmax")(_softmax)
    with pytest.raises(pd.DispatchError, match=f"softmax: .*{message}"):
        op(_sharded(), *args, **kwargs)
    with pytest.raises(pd.DispatchError, match="missing a required argument: 'x'"):
        op(axis=0)


def test_the_binder_declines_what_it_cannot_bind_plainly():
    import inspect
    b = Binder.of(inspect.signature(_softmax))
    assert b.bind(("x",), {}) == {"x": "x", "axis": -1}
    assert b.bind(("x",), {"axis": 1}) == {"x": "x", "axis": 1}
    assert b.bind((), {"x": "x"}) == {"x": "x", "axis": -1}
    for args, kwargs in (((1, 2, 3), {}), (("x",), {"x": 1}), ((), {"nope": 1}), ((), {})):
        assert b.bind(args, kwargs) is None, (args, kwargs)


def test_a_shard_aware_function_gets_its_context_and_none_when_dense():
    seen = []

    @pd.spmd_op("softmax")
    def aware(x, axis=-1, spmd_ctx=None):
        seen.append(spmd_ctx)
        return paddle.nn.functional.softmax(x, axis)

    aware(paddle.to_tensor(A))
    assert seen == [None]
    from paddle_ext.dispatch import core
    with core.own_routes():   # paddle-ext's route: the function runs on the local shards, with a context
        aware(_sharded(), axis=-1)
    assert seen[-1] is not None and seen[-1].coord == (0,)


def test_an_entry_is_made_only_for_plain_signatures_and_own_names():
    import inspect

    def takes(name):
        return lambda fn: make_entry(fn, inspect.signature(fn), "softmax", [name], ["axis"], dispatch, has_dist)

    assert takes("x")(_softmax) is not None and takes("x")(_softmax_kw) is not None
    assert takes("x")(_softmax_posonly) is None and takes("x")(_softmax_varargs) is None

    def clash(__pe_slots, axis=-1):   # a parameter named like the entry's own variables
        return __pe_slots

    assert takes("__pe_slots")(clash) is None
    assert takes("y")(_softmax) is None   # a rule tensor the function does not take


def test_a_type_error_inside_the_function_is_not_taken_for_a_bad_call():
    @pd.spmd_op("softmax")
    def fails(x, axis=-1):
        raise TypeError("the function's own TypeError")

    for x in (paddle.to_tensor(A), _sharded()):
        with pytest.raises(TypeError, match="the function's own TypeError") as got:
            fails(x, axis=-1)
        assert not isinstance(got.value, pd.DispatchError)


def test_a_list_attribute_reaches_the_rule_as_a_tuple():
    seen = []

    @pd.spmd_op("flip")
    def flip(x, axis):
        seen.append(axis)
        return paddle.flip(x, axis)

    out = flip(_sharded(), [1])
    np.testing.assert_array_equal(out._local_value().numpy(), A[:, ::-1])
    assert seen == [[1]]   # the function gets the list it was given
    from paddle_ext.dispatch import plan_cache
    assert any(p.op == "flip" and dict(p.attrs).get("axis") == (1,) for p in plan_cache.cached_plans())
