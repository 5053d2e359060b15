"""Gather/scatter-style ops: the indexed dim stays whole, every other dim keeps its sharding.

Measured on 2 ranks, Paddle 3.3.1 has rules for ``gather``/``gather_nd``/``scatter`` but their
dygraph calls (``gather`` with ``axis != 0``, ``gather_nd``, ``scatter``) came back Replicate, and
``index_add`` has no rule. Index tensors may be sharded along their own batch dims (the output
follows them); the indexed dim of the data never is.
"""
from __future__ import annotations

from paddle_ext.errors import ShardingRuleError
from paddle_ext.placements import DistSpec

from ._common import axis_of, dims, gap_rule, names_text


@gap_rule("gather")
def gather(x: DistSpec, index: DistSpec, axis: int = 0):
    """d0 a d2, i -> d0 i d2 | replicate: a   (axis=1; the index may be sharded)"""
    if index.ndim != 1:
        raise ShardingRuleError(f"gather: index must be 1-D, got shape {list(index.shape)}; flatten it first")
    names = dims(x.ndim)
    a = axis_of(axis, x.ndim, "gather")
    out = list(names)
    out[a] = "idx"
    return f"{names_text(names)}, idx -> {names_text(out)} | replicate: {names[a]}"


@gap_rule("gather_nd")
def gather_nd(x: DistSpec, index: DistSpec):
    """a0 a1 t2, b0 k -> b0 t2 | replicate: a0 a1 k   (index [..., k] picks x's first k dims)"""
    k = index.shape[-1] if index.ndim else 0
    if index.ndim == 0 or k > x.ndim:
        raise ShardingRuleError(f"gather_nd: index {list(index.shape)} must be [..., k] with k <= rank of x "
                                f"{list(x.shape)}")
    xs = [f"a{d}" for d in range(k)] + [f"t{d}" for d in range(k, x.ndim)]
    bs = [f"b{d}" for d in range(index.ndim - 1)]
    out = bs + xs[k:]
    rep = xs[:k] + ["kk"]
    return f"{names_text(xs)}, {names_text(bs + ['kk'])} -> {names_text(out)} | replicate: {names_text(rep)}"


@gap_rule("index_add")
def index_add(x: DistSpec, index: DistSpec, value: DistSpec, axis: int = 0):
    """d0 a d2, i, d0 i d2 -> d0 a d2 | replicate: a i   (axis=1)"""
    names = dims(x.ndim)
    a = axis_of(axis, x.ndim, "index_add")
    val = list(names)
    val[a] = "idx"
    return (f"{names_text(names)}, idx, {names_text(val)} -> {names_text(names)} "
            f"| replicate: {names[a]} idx")


@gap_rule("scatter")
def scatter(x: DistSpec, index: DistSpec, updates: DistSpec, overwrite: bool = True):
    """n d1, m, m d1 -> n d1 | replicate: n m   (rows are scattered; trailing dims keep sharding)"""
    names = dims(x.ndim)
    rest = names[1:]
    return (f"{names_text(['n'] + rest)}, m, {names_text(['m'] + rest)} -> {names_text(['n'] + rest)} "
            f"| replicate: n m")
