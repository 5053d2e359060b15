"""Spatial ops on NCHW / NHWC tensors: pooling, adaptive pooling, interpolate, pad.

Paddle 3.3.1 has no rule for ``pool2d``, ``interpolate`` or ``pad3d`` (4-D ``F.pad``) and
all-gathers them (measured). Their batch and channel dims are independent, so those keep their
sharding; the spatial dims, which the windows span, stay whole.
"""
from __future__ import annotations

import math

from paddle_ext.errors import ShardingRuleError
from paddle_ext.placements import DistSpec
from paddle_ext.spmd.registry import Rows

from ._common import gap_rule, shard_rows


def _layout(x: DistSpec, data_format: str, op: str) -> tuple[list[int], list[int]]:
    """(independent dims, spatial dims) for ``data_format`` (``NCHW``, ``NHWC``, ``NCL``, ...)."""
    fmt = data_format.upper()
    if len(fmt) != x.ndim or fmt[0] != "N" or "C" not in fmt:
        raise ShardingRuleError(f"{op}: data_format {data_format!r} does not describe a rank-{x.ndim} input "
                                f"{list(x.shape)}; use e.g. 'NCHW' or 'NHWC'")
    c = fmt.index("C")
    return [0, c], [d for d in range(1, x.ndim) if d != c]


def pool_out_size(n: int, k: int, s: int, pad_lo: int, pad_hi: int, ceil_mode: bool) -> int:
    """Paddle's pooling output size (``ceil_mode`` rounds the last window up).

    >>> pool_out_size(7, 2, 2, 0, 0, False), pool_out_size(7, 2, 2, 0, 0, True)
    (3, 4)
    """
    span = n + pad_lo + pad_hi - k
    return (-(-span // s) if ceil_mode else span // s) + 1


def _pool(x: DistSpec, kernel_size, stride, padding, ceil_mode, data_format, op):
    keep, spatial = _layout(x, data_format, op)
    nd = len(spatial)
    if not (len(kernel_size) == len(stride) == nd and len(padding) == 2 * nd):
        raise ShardingRuleError(f"{op}: give kernel_size and stride with {nd} values and padding with {2 * nd} "
                                f"(low, high per spatial dim); got {kernel_size}, {stride}, {padding}")
    shape = list(x.shape)
    for j, d in enumerate(spatial):
        shape[d] = pool_out_size(x.shape[d], kernel_size[j], stride[j], padding[2 * j], padding[2 * j + 1], ceil_mode)
    return Rows(shard_rows([(d, d) for d in keep]), (tuple(shape),))


@gap_rule("max_pool2d")
def max_pool2d(x: DistSpec, kernel_size: list[int], stride: list[int], padding: list[int],
               ceil_mode: bool = False, data_format: str = "NCHW"):
    """N C H W -> N C H' W': S(N), S(C) rows; H and W stay whole"""
    return _pool(x, kernel_size, stride, padding, ceil_mode, data_format, "max_pool2d")


@gap_rule("avg_pool2d")
def avg_pool2d(x: DistSpec, kernel_size: list[int], stride: list[int], padding: list[int],
               ceil_mode: bool = False, data_format: str = "NCHW"):
    """N C H W -> N C H' W': S(N), S(C) rows; H and W stay whole"""
    return _pool(x, kernel_size, stride, padding, ceil_mode, data_format, "avg_pool2d")


@gap_rule("max_pool1d")
def max_pool1d(x: DistSpec, kernel_size: list[int], stride: list[int], padding: list[int],
               ceil_mode: bool = False, data_format: str = "NCL"):
    """N C L -> N C L': S(N), S(C) rows; L stays whole"""
    return _pool(x, kernel_size, stride, padding, ceil_mode, data_format, "max_pool1d")


@gap_rule("avg_pool1d")
def avg_pool1d(x: DistSpec, kernel_size: list[int], stride: list[int], padding: list[int],
               ceil_mode: bool = False, data_format: str = "NCL"):
    """N C L -> N C L': S(N), S(C) rows; L stays whole"""
    return _pool(x, kernel_size, stride, padding, ceil_mode, data_format, "avg_pool1d")


def _resize(x: DistSpec, out_size, data_format: str, op: str):
    keep, spatial = _layout(x, data_format, op)
    if len(out_size) != len(spatial):
        raise ShardingRuleError(f"{op}: out_size {list(out_size)} needs {len(spatial)} values for {data_format}")
    shape = list(x.shape)
    for d, s in zip(spatial, out_size):
        shape[d] = int(s)
    return Rows(shard_rows([(d, d) for d in keep]), (tuple(shape),))


@gap_rule("adaptive_avg_pool2d")
def adaptive_avg_pool2d(x: DistSpec, output_size: list[int], data_format: str = "NCHW"):
    """N C H W -> N C h w: S(N), S(C) rows"""
    return _resize(x, output_size, data_format, "adaptive_avg_pool2d")


@gap_rule("interpolate")
def interpolate(x: DistSpec, out_size: list[int], mode: str = "nearest", data_format: str = "NCHW"):
    """N C H W -> N C H' W': S(N), S(C) rows (any mode: each image and channel is resized alone)"""
    return _resize(x, out_size, data_format, "interpolate")


@gap_rule("pad_nd")
def pad_nd(x: DistSpec, pad: list[int], mode: str = "constant", data_format: str = "NCHW"):
    """N C H W -> N C H+t+b W+l+r: S(N), S(C) rows   (pad = [left, right, top, bottom, ...], last dim first)"""
    keep, spatial = _layout(x, data_format, "pad_nd")
    if len(pad) != 2 * len(spatial):
        raise ShardingRuleError(f"pad_nd: pad {list(pad)} needs {2 * len(spatial)} values for {data_format}")
    shape = list(x.shape)
    for j, d in enumerate(reversed(spatial)):
        shape[d] += pad[2 * j] + pad[2 * j + 1]
    if math.prod(shape) and min(shape) < 0:
        raise ShardingRuleError(f"pad_nd: pad {list(pad)} gives a negative size {shape}")
    return Rows(shard_rows([(d, d) for d in keep]), (tuple(shape),))
