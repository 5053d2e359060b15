"""Spatial ops on NCHW / NHWC tensors: pooling, adaptive pooling, interpolate, pad.

Paddle 3.3.1 has no rule for ``pool2d``, ``interpolate`` or ``pad3d`` (4-D ``F.pad``) and
all-gathers them (measured). Their batch and channel dims are independent, so those keep their
sharding; the spatial dims, which the windows span, stay whole -- except a pooled dim whose
windows tile it without padding or overlap (``kernel == stride``) and whose even shards hold whole
windows (size divisible by ``mesh size * stride``): every shard pools its own windows. Averaging and resampling are
linear (``P(sum)``/``P(avg)`` pass), a max of maxima is the maximum (``P(max)``), nearest
resampling and padding copy elements or write zeros (any partial).
"""
from __future__ import annotations

import math

import numpy as np

from paddle_ext.errors import ShardingRuleError
from paddle_ext.placements import DistSpec
from paddle_ext.spmd.registry import Rows, register_spmd_rule

from ._common import COPY_PARTIALS, gap_case, partial_rows, shard_rows, world


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


def _pool(x: DistSpec, kernel_size, stride, padding, ceil_mode, data_format, op, partials: str):
    keep, spatial = _layout(x, data_format, op)
    nd = len(spatial)
    if not (len(kernel_size) == len(stride) == nd and len(padding) == 2 * nd):
        raise ShardingRuleError(f"{op}: give kernel_size and stride with {nd} values and padding with {2 * nd} "
                                f"(low, high per spatial dim); got {kernel_size}, {stride}, {padding}")
    shape = list(x.shape)
    tiled = []
    for j, d in enumerate(spatial):
        shape[d] = pool_out_size(x.shape[d], kernel_size[j], stride[j], padding[2 * j], padding[2 * j + 1], ceil_mode)
        if (kernel_size[j] == stride[j] and padding[2 * j] == padding[2 * j + 1] == 0
                and x.shape[d] % (world(x) * stride[j]) == 0):
            tiled.append(d)
    return Rows(shard_rows([(d, d) for d in keep + tiled]) + partial_rows(partials), (tuple(shape),))


# -- ground truth: the numpy ops ---------------------------------------------------------------------
def _spatial_dims(fmt: str, nd: int) -> list[int]:
    c = fmt.index("C")
    return [d for d in range(1, nd) if d != c]


def _pool_dense(kind):
    """Max or average pooling in numpy (NaN padding, so padded cells never count)."""
    def make(a):
        def f(x):
            sp = _spatial_dims(a.get("data_format", "NCHW" if x.ndim == 4 else "NCL"), x.ndim)
            k, s, p = a["kernel_size"], a["stride"], a["padding"]
            outs = []   # computed here, not by the rule's pool_out_size: the truth stays independent
            for j, d in enumerate(sp):
                span = x.shape[d] + p[2 * j] + p[2 * j + 1] - k[j]
                outs.append((-(-span // s[j]) if a.get("ceil_mode") else span // s[j]) + 1)
            width = [(0, 0)] * x.ndim
            for j, d in enumerate(sp):
                extra = max(0, (outs[j] - 1) * s[j] + k[j] - (x.shape[d] + p[2 * j] + p[2 * j + 1]))
                width[d] = (p[2 * j], p[2 * j + 1] + extra)
            xp = np.pad(x.astype(np.float64), width, constant_values=np.nan)
            shape = list(x.shape)
            for j, d in enumerate(sp):
                shape[d] = outs[j]
            out = np.empty(shape)
            for idx in np.ndindex(*[outs[j] for j in range(len(sp))]):
                sl = [slice(None)] * x.ndim
                for j, d in enumerate(sp):
                    sl[d] = slice(idx[j] * s[j], idx[j] * s[j] + k[j])
                win = xp[tuple(sl)]
                val = np.nanmax(win, axis=tuple(sp)) if kind == "max" else np.nanmean(win, axis=tuple(sp))
                osl = [slice(None)] * x.ndim
                for j, d in enumerate(sp):
                    osl[d] = idx[j]
                out[tuple(osl)] = val
            return out
        return f
    return make


def _adaptive_dense(a):
    def f(x):
        sp = _spatial_dims(a.get("data_format", "NCHW"), x.ndim)
        osz = a["output_size"]
        shape = list(x.shape)
        for d, o in zip(sp, osz):
            shape[d] = o
        out = np.empty(shape)
        for idx in np.ndindex(*osz):
            sl, osl = [slice(None)] * x.ndim, [slice(None)] * x.ndim
            for j, d in enumerate(sp):
                n = x.shape[d]
                sl[d] = slice(math.floor(idx[j] * n / osz[j]), math.ceil((idx[j] + 1) * n / osz[j]))
                osl[d] = idx[j]
            out[tuple(osl)] = x[tuple(sl)].mean(axis=tuple(sp))
        return out
    return f


def _nearest_dense(a):
    def f(x):
        out = x
        for d, o in zip(_spatial_dims(a.get("data_format", "NCHW"), x.ndim), a["out_size"]):
            out = np.take(out, np.floor(np.arange(o) * x.shape[d] / o).astype(int), axis=d)
        return out
    return f


def _pad_dense(a):
    def f(x):
        width = [(0, 0)] * x.ndim
        for j, d in enumerate(reversed(_spatial_dims(a.get("data_format", "NCHW"), x.ndim))):
            width[d] = (a["pad"][2 * j], a["pad"][2 * j + 1])
        mode = {"constant": "constant", "reflect": "reflect", "replicate": "edge"}[a.get("mode", "constant")]
        return np.pad(x, width, mode=mode)
    return f


_P2 = {"kernel_size": [2, 2], "stride": [2, 2], "padding": [0, 0, 0, 0]}
_P2b = {"kernel_size": [3, 3], "stride": [2, 2], "padding": [1, 1, 1, 1]}


# -- the rules ------------------------------------------------------------------------------------------
@register_spmd_rule("max_pool2d", case=gap_case("max_pool2d", _pool_dense("max"),
                                               [([(4, 3, 6, 6)], _P2), ([(3, 2, 5, 5)], dict(_P2b, ceil_mode=True))]))
def max_pool2d(x: DistSpec, kernel_size: list[int], stride: list[int], padding: list[int],
               ceil_mode: bool = False, data_format: str = "NCHW"):
    """N C H W -> N C H' W': S(N), S(C), P(max) rows; H and W stay whole unless the windows tile them"""
    return _pool(x, kernel_size, stride, padding, ceil_mode, data_format, "max_pool2d", "max")


@register_spmd_rule("avg_pool2d", case=gap_case("avg_pool2d", _pool_dense("avg"),
                                               [([(4, 3, 6, 6)], _P2), ([(3, 2, 5, 5)], _P2b)]))
def avg_pool2d(x: DistSpec, kernel_size: list[int], stride: list[int], padding: list[int],
               ceil_mode: bool = False, data_format: str = "NCHW"):
    """N C H W -> N C H' W': S(N), S(C), P(sum), P(avg) rows; H and W stay whole unless the windows tile them"""
    return _pool(x, kernel_size, stride, padding, ceil_mode, data_format, "avg_pool2d", "sum avg")


@register_spmd_rule("max_pool1d", case=gap_case(
    "max_pool1d", _pool_dense("max"), [([(4, 3, 8)], {"kernel_size": [2], "stride": [2], "padding": [0, 0]})]))
def max_pool1d(x: DistSpec, kernel_size: list[int], stride: list[int], padding: list[int],
               ceil_mode: bool = False, data_format: str = "NCL"):
    """N C L -> N C L': S(N), S(C), P(max) rows; L stays whole unless the windows tile it"""
    return _pool(x, kernel_size, stride, padding, ceil_mode, data_format, "max_pool1d", "max")


@register_spmd_rule("avg_pool1d", case=gap_case(
    "avg_pool1d", _pool_dense("avg"), [([(3, 4, 7)], {"kernel_size": [3], "stride": [1], "padding": [1, 1]})]))
def avg_pool1d(x: DistSpec, kernel_size: list[int], stride: list[int], padding: list[int],
               ceil_mode: bool = False, data_format: str = "NCL"):
    """N C L -> N C L': S(N), S(C), P(sum), P(avg) rows; L stays whole unless the windows tile it"""
    return _pool(x, kernel_size, stride, padding, ceil_mode, data_format, "avg_pool1d", "sum avg")


def _resize(x: DistSpec, out_size, data_format: str, op: str, partials: str):
    keep, spatial = _layout(x, data_format, op)
    if len(out_size) != len(spatial):
        raise ShardingRuleError(f"{op}: out_size {list(out_size)} needs {len(spatial)} values for {data_format}")
    shape = list(x.shape)
    for d, s in zip(spatial, out_size):
        shape[d] = int(s)
    return Rows(shard_rows([(d, d) for d in keep]) + partial_rows(partials), (tuple(shape),))


@register_spmd_rule("adaptive_avg_pool2d", case=gap_case(
    "adaptive_avg_pool2d", _adaptive_dense, [([(4, 2, 7, 7)], {"output_size": [3, 3]})]))
def adaptive_avg_pool2d(x: DistSpec, output_size: list[int], data_format: str = "NCHW"):
    """N C H W -> N C h w: S(N), S(C), P(sum), P(avg) rows"""
    return _resize(x, output_size, data_format, "adaptive_avg_pool2d", "sum avg")


@register_spmd_rule("interpolate", case=gap_case(
    "interpolate", _nearest_dense, [([(4, 2, 3, 3)], {"out_size": [6, 6], "mode": "nearest"})]))
def interpolate(x: DistSpec, out_size: list[int], mode: str = "nearest", data_format: str = "NCHW"):
    """N C H W -> N C H' W': S(N), S(C) rows (any mode: each image and channel is resized alone); P(op) rows"""
    return _resize(x, out_size, data_format, "interpolate", COPY_PARTIALS if mode == "nearest" else "sum avg")


@register_spmd_rule("pad_nd", case=gap_case("pad_nd", _pad_dense,
                                           [([(4, 3, 5, 5)], {"pad": [1, 2, 0, 1], "mode": "reflect"}),
                                            ([(3, 4, 4, 4)], {"pad": [1, 1, 1, 1], "mode": "constant"})]))
def pad_nd(x: DistSpec, pad: list[int], mode: str = "constant", data_format: str = "NCHW"):
    """N C H W -> N C H+t+b W+l+r: S(N), S(C), P(op) rows   (pad = [left, right, top, bottom, ...], last dim first)"""
    keep, spatial = _layout(x, data_format, "pad_nd")
    if len(pad) != 2 * len(spatial):
        raise ShardingRuleError(f"pad_nd: pad {list(pad)} needs {2 * len(spatial)} values for {data_format}")
    shape = list(x.shape)
    for j, d in enumerate(reversed(spatial)):
        shape[d] += pad[2 * j] + pad[2 * j + 1]
    if math.prod(shape) and min(shape) < 0:
        raise ShardingRuleError(f"pad_nd: pad {list(pad)} gives a negative size {shape}")
    return Rows(shard_rows([(d, d) for d in keep]) + partial_rows(), (tuple(shape),))
