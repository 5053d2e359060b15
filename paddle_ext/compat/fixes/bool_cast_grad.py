"""``bool-cast-grad``: a cast to ``bool`` passes no gradient.

A boolean is piecewise constant in its input, so the gradient of ``x.cast(paddle.bool)`` with
respect to ``x`` is 0. Paddle 3.3.1 keeps such an output trainable and its ``cast`` backward
hands the incoming gradient through unchanged: ``x.cast(paddle.bool).cast(x.dtype)`` passes a
gradient of 1. PaddleNLP's MoE gates build their dispatch masks that way, so every gradient
upstream of the mask is silently wrong (DeepSeek-V2's auto gate weight: norm 21.7 where the
dense truth is 0.036, on one process, Paddle alone).

The fix wraps Paddle's op builder ``_C_ops.cast`` (which ``paddle.cast``, ``Tensor.cast``,
``Tensor.astype`` and their PIR twins under ``dist.to_static`` all reach): an output whose dtype
is ``bool`` is marked ``stop_gradient``, so no backward runs through it, in dygraph and in a
static program alike. Every value is unchanged; only a gradient that was wrong becomes 0.
``needed()`` probes Paddle itself: the fix applies only where a bool cast still passes a gradient.

Importing this module imports no Paddle.
"""
from __future__ import annotations

import contextlib

from ..version import require_paddle


def _ops():
    return require_paddle("fix bool-cast-grad")._C_ops


def needed() -> bool:
    """True when Paddle's own ``cast`` to bool passes a non-zero gradient (Paddle 3.3.1)."""
    paddle = require_paddle("fix bool-cast-grad")
    cast = getattr(_ops().cast, "__wrapped__", _ops().cast)   # probe Paddle's, not ours
    with contextlib.nullcontext() if paddle.in_dynamic_mode() else paddle.base.dygraph.guard():
        x = paddle.to_tensor([0.5, 0.0], stop_gradient=False)
        mask = cast(x, paddle.bool)
        if mask.stop_gradient:
            return False
        (cast(mask, x.dtype) * 3.0).sum().backward()
        return x.grad is not None and float(abs(x.grad).sum()) != 0.0


def apply():
    paddle = require_paddle("fix bool-cast-grad")
    ops = _ops()
    original = ops.cast

    def cast(x, dtype, *args, **kwargs):
        out = original(x, dtype, *args, **kwargs)
        if out.dtype == paddle.bool and not out.stop_gradient:
            out.stop_gradient = True
        return out

    cast.__doc__ = original.__doc__
    cast.__wrapped__ = original
    ops.cast = cast
    return [(ops, "cast", original)]
