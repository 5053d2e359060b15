"""Whether slices of a dygraph tensor are views that write through to it.

paddle-ext's dygraph reshard executor builds each output in place: it receives and assigns every
piece into a slice of one preallocated tensor (no concatenation). That relies on Paddle's stride
kernels, on by default in Paddle 3.x: ``out[a:b]`` is then a view of ``out``. With
``FLAGS_use_stride_kernel=0`` a slice is a copy, the writes would land in the copy and the
reshard would return zeros where data belongs; :func:`require_writable_views` refuses that
before any collective starts.
"""
from __future__ import annotations

import paddle

from ...errors import CompatError

_WRITES_THROUGH: list = []  # [bool], probed once per process


def views_write_through() -> bool:
    """Probe once: does ``paddle.assign(y, output=x[1:3])`` change ``x``?"""
    if not _WRITES_THROUGH:
        with paddle.no_grad():
            x = paddle.zeros([4, 2], dtype="float32")
            paddle.assign(paddle.ones([2, 2], dtype="float32"), output=x[1:3])
            _WRITES_THROUGH.append(float(x.sum()) == 4.0)
    return _WRITES_THROUGH[0]


def require_writable_views(what: str = "paddle_ext.reshard") -> None:
    """Raise :class:`CompatError` when slices are copies (``FLAGS_use_stride_kernel=0``)."""
    if not views_write_through():
        raise CompatError(
            f"{what}: tensor slices are copies in this process (FLAGS_use_stride_kernel is off), but the "
            "reshard executor writes each received piece into a slice of its output; run with "
            "FLAGS_use_stride_kernel=1 (Paddle's default) or call Paddle's dist.reshard directly")
