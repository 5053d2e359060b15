"""The ports of Paddle internals adapters call (paddle_ext.compat.ports.internals), on the real Paddle:
each answers what Paddle's own object says, so a Paddle that renames one fails here, in one place."""
import numpy as np
import paddle
import paddle.distributed as dist

from paddle_ext.compat.ports import internals


def _dist(value, placements):
    return dist.shard_tensor(paddle.to_tensor(value), dist.ProcessMesh([0], dim_names=["x"]), placements)


def test_local_value_is_this_ranks_dense_tensor():
    x = _dist(np.arange(6, dtype="float32").reshape(2, 3), [dist.Replicate()])
    local = internals.local_value(x)
    assert not local.is_dist() and x.is_dist()
    np.testing.assert_array_equal(local.numpy(), np.arange(6, dtype="float32").reshape(2, 3))


def test_placements_text_tells_placements_apart():
    a = _dist(np.ones((2, 2), "float32"), [dist.Replicate()])
    b = _dist(np.ones((2, 2), "float32"), [dist.Shard(0)])
    c = _dist(np.zeros((2, 2), "float32"), [dist.Shard(0)])
    assert internals.placements_text(b) == internals.placements_text(c)
    assert internals.placements_text(a) != internals.placements_text(b)


def test_is_initialized_sees_a_lazy_parameter():
    with paddle.LazyGuard():
        lazy = paddle.nn.Linear(2, 2)
    assert not internals.is_initialized(lazy.weight)
    assert internals.is_initialized(paddle.nn.Linear(2, 2).weight)


def test_auto_parallel_api_is_where_dist_reshard_lives():
    assert internals.auto_parallel_api().reshard is dist.reshard


def test_insertion_points_place_new_pir_ops():
    main = paddle.static.Program()
    with paddle.pir_utils.IrGuard(), paddle.static.program_guard(main):
        x = paddle.static.data("x", [2], "float32")
        y = paddle.exp(x)
        exp_op = y.get_defining_op()
        internals.set_insertion_point(exp_op)
        paddle.abs(x)
        internals.set_insertion_point_after(exp_op)
        paddle.tanh(x)
        names = [op.name() for op in main.global_block().ops]
    assert names.index("pd_op.abs") < names.index("pd_op.exp") < names.index("pd_op.tanh")
