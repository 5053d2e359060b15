"""compat fix ``bool-cast-grad``: a cast to bool passes no gradient, in dygraph and to_static.

The truth is computed by hand: for ``y = x * w`` and ``loss = sum(c * cast(cast(y, bool), f32) + y)``
the mask term is piecewise constant in ``w``, so ``dloss/dw = x`` exactly. Paddle 3.3.1 alone
gives ``x * (1 + c)`` (the cast hands the gradient through)."""
import numpy as np
import paddle
import pytest

from paddle_ext.compat.fixes import bool_cast_grad, table as fixes

X = np.array([1.0, 0.0, 2.0, -3.0], dtype="float32")
C = np.array([5.0, 7.0, 11.0, 13.0], dtype="float32")


class Masked(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.w = paddle.create_parameter([4], "float32", default_initializer=paddle.nn.initializer.Constant(1.0))

    def forward(self, x, c):
        y = x * self.w
        mask = y.cast(paddle.bool).astype("float32")    # the MoE dispatch-mask idiom
        return (c * mask + y).sum()


def _grad(static: bool) -> np.ndarray:
    net = Masked()
    run = paddle.jit.to_static(net, full_graph=True) if static else net
    loss = run(paddle.to_tensor(X), paddle.to_tensor(C))
    loss.backward()
    return net.w.grad.numpy()


@pytest.fixture
def fix():
    f = fixes.FIXES["bool-cast-grad"]
    was_applied = f.is_applied()
    f.revert()
    yield f
    f.revert()
    if was_applied:   # leave the process as the test found it
        f.apply()


@pytest.mark.parametrize("static", [False, True], ids=["dygraph", "to_static"])
def test_a_bool_cast_passes_no_gradient_with_the_fix(fix, static):
    assert fix.needed(), "Paddle's own cast to bool passes no gradient any more: the fix can go"
    assert not np.allclose(_grad(static), X), "without the fix Paddle alone is expected to be wrong"
    assert fix.apply()
    np.testing.assert_array_equal(_grad(static), X)


def test_values_are_unchanged_and_other_casts_keep_their_gradient(fix):
    fix.apply()
    x = paddle.to_tensor([0.5, 0.0, -2.0], stop_gradient=False)
    mask = paddle.cast(x, "bool")
    assert mask.stop_gradient and mask.numpy().tolist() == [True, False, True]
    (x.astype("float64") * 2.0).sum().backward()    # a float cast stays differentiable
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0, 2.0])


def test_needed_probes_paddle_not_the_wrapper(fix):
    fix.apply()
    assert bool_cast_grad.needed()   # the probe reads Paddle's original, so doctor stays truthful
