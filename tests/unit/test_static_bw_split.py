"""The B/W split of a static backward (passes/static/bw_split.py) on small PIR programs: the split
program computes what Paddle's fused ``matmul_grad`` computes, and a weight gradient whose only
use is its gradient-merge accumulation is written into the buffer by one ``addmm_``."""
import numpy as np
import paddle
import pytest

from paddle_ext.compat.ports.internals import pir_ops
from paddle_ext.passes.static.bw_split import classify_backward, split_matmul_grads

BACKWARD = 1


def _program(x_shape, trans_y, grad_also_used):
    """``dx, dy = matmul_grad(x, w, dout)``, then ``acc += dy`` marked as gradient merge (as
    Paddle's gradient-merge pass writes it); returns the program and the values to fetch."""
    k, n = x_shape[-1], 6
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", x_shape, "float32")
        w = paddle.static.data("w", [n, k] if trans_y else [k, n], "float32")
        dout = paddle.static.data("dout", list(x_shape[:-1]) + [n], "float32")
        acc = paddle.static.data("acc", [n, k] if trans_y else [k, n], "float32")
        ops = pir_ops()
        dx, dy = ops.matmul_grad(x, w, dout, False, trans_y)
        merged = ops.add_(acc, dy)
        for value in (dx, merged):
            value.get_defining_op().op_role = BACKWARD
        merged.get_defining_op().set_bool_attr("grad_merge_add", True)
        fetch = [paddle.scale(dx, 1.0), paddle.scale(merged, 1.0)]
        if grad_also_used:
            fetch.append(paddle.scale(dy, 2.0))
    return main, fetch


def _run(program, fetch, feed):
    return paddle.static.Executor(paddle.CPUPlace()).run(program, feed=dict(feed), fetch_list=fetch)


@pytest.fixture
def static_mode():
    paddle.enable_static()
    yield
    paddle.disable_static()


@pytest.mark.parametrize("x_shape,trans_y", [([4, 8], False), ([4, 8], True), ([2, 3, 8], False)])
def test_split_accumulates_into_the_merge_buffer_as_the_fused_backward(static_mode, x_shape, trans_y):
    rng = np.random.default_rng(3)
    k, n = x_shape[-1], 6
    w_shape = [n, k] if trans_y else [k, n]
    feed = {"x": rng.standard_normal(x_shape), "w": rng.standard_normal(w_shape),
            "dout": rng.standard_normal(list(x_shape[:-1]) + [n]), "acc": rng.standard_normal(w_shape)}
    feed = {name: v.astype("float32") for name, v in feed.items()}
    fused_program, fused_fetch = _program(x_shape, trans_y, grad_also_used=False)
    want = _run(fused_program, fused_fetch, {k_: v.copy() for k_, v in feed.items()})
    split_program, split_fetch = _program(x_shape, trans_y, grad_also_used=False)
    assert split_matmul_grads(split_program) == 1
    names = [op.name() for op in split_program.global_block().ops]
    assert "pd_op.matmul_grad" not in names and "pd_op.add_" not in names
    assert names.count("pd_op.addmm_") == 1
    split = classify_backward(split_program)
    assert split.ok
    w_names = {names[i] for i in split.w_ops}
    assert "pd_op.addmm_" in w_names and "pd_op.transpose" in w_names
    got = _run(split_program, split_fetch, {k_: v.copy() for k_, v in feed.items()})
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-6)  # dx
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-5)  # acc + dy
    dense_dy = (feed["dout"].reshape(-1, n).T @ feed["x"].reshape(-1, k) if trans_y
                else feed["x"].reshape(-1, k).T @ feed["dout"].reshape(-1, n))
    np.testing.assert_allclose(got[1], feed["acc"] + dense_dy, rtol=1e-5, atol=1e-5)


def test_weight_gradient_with_another_use_keeps_its_matmul_and_add(static_mode):
    rng = np.random.default_rng(4)
    feed = {"x": rng.standard_normal([4, 8]), "w": rng.standard_normal([8, 6]),
            "dout": rng.standard_normal([4, 6]), "acc": rng.standard_normal([8, 6])}
    feed = {name: v.astype("float32") for name, v in feed.items()}
    fused_program, fused_fetch = _program([4, 8], False, grad_also_used=True)
    want = _run(fused_program, fused_fetch, {k: v.copy() for k, v in feed.items()})
    split_program, split_fetch = _program([4, 8], False, grad_also_used=True)
    assert split_matmul_grads(split_program) == 1
    names = [op.name() for op in split_program.global_block().ops]
    assert names.count("pd_op.matmul") == 2 and "pd_op.add_" in names and "pd_op.addmm_" not in names
    got = _run(split_program, split_fetch, {k: v.copy() for k, v in feed.items()})
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
