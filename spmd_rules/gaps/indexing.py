"""Gather/scatter-style ops: the indexed dim stays whole, every other dim keeps its sharding.

Measured on 2 ranks, Paddle 3.3.1 has rules for ``gather``/``gather_nd``/``scatter`` but their
dygraph calls (``gather`` with ``axis != 0``, ``gather_nd``, ``scatter``) came back Replicate, and
``index_add`` has no rule. Index tensors may be sharded along their own batch dims (the output
follows them); the indexed dim of the data never is. A gather copies elements of the data (any
partial passes); scatter/index_add are linear in the data and the values together (scatter with
``overwrite`` copies, so any partial), and add a fixed amount to the data (a max/min of the data
alone passes; not of the values, which duplicate indices add up).
"""
from __future__ import annotations

import numpy as np

from paddle_ext.errors import ShardingRuleError
from paddle_ext.placements import DistSpec
from paddle_ext.spmd.registry import register_spmd_rule

from ._common import axis_of, dims, gap_case, inputs_of, names_text


@register_spmd_rule("gather", case=gap_case(
    "gather", lambda a: (lambda x, i: np.take(x, i.astype(int), axis=int(a.get("axis", 0)) % x.ndim)),
    [([(5, 6), (4,)], {"axis": 1}), ([(4, 5, 3), (6,)], {"axis": 1})], inputs_of(["f", ("i", 5)])))
def gather(x: DistSpec, index: DistSpec, axis: int = 0):
    """d0 a d2, i -> d0 i d2 | replicate: a | partial(sum avg max min): 0   (axis=1; the index may be sharded)"""
    if index.ndim != 1:
        raise ShardingRuleError(f"gather: index must be 1-D, got shape {list(index.shape)}; flatten it first")
    names = dims(x.ndim)
    a = axis_of(axis, x.ndim, "gather")
    out = list(names)
    out[a] = "idx"
    return f"{names_text(names)}, idx -> {names_text(out)} | replicate: {names[a]} | partial(sum avg max min): 0"


def _gather_nd_dense(a):
    def f(x, i):
        i = i.astype(int)
        return x[tuple(i[..., j] for j in range(i.shape[-1]))]
    return f


@register_spmd_rule("gather_nd", case=gap_case("gather_nd", _gather_nd_dense,
                                              [([(4, 5, 6), (6, 1)], {}), ([(4, 5, 3), (3, 2)], {})],
                                              inputs_of(["f", ("i", 4)])))
def gather_nd(x: DistSpec, index: DistSpec):
    """a0 a1 t2, b0 k -> b0 t2 | replicate: a0 a1 k | partial(sum avg max min): 0

    (index [..., k] picks x's first k dims)"""
    k = index.shape[-1] if index.ndim else 0
    if index.ndim == 0 or k > x.ndim:
        raise ShardingRuleError(f"gather_nd: index {list(index.shape)} must be [..., k] with k <= rank of x "
                                f"{list(x.shape)}")
    xs = [f"a{d}" for d in range(k)] + [f"t{d}" for d in range(k, x.ndim)]
    bs = [f"b{d}" for d in range(index.ndim - 1)]
    out = bs + xs[k:]
    rep = xs[:k] + ["kk"]
    return (f"{names_text(xs)}, {names_text(bs + ['kk'])} -> {names_text(out)} | replicate: {names_text(rep)}"
            " | partial(sum avg max min): 0")


def _index_add_dense(a):
    def f(x, i, v):
        out = x.copy()
        ax = int(a.get("axis", 0)) % x.ndim
        idx = [slice(None)] * x.ndim
        idx[ax] = i.astype(int)
        np.add.at(out, tuple(idx), v)
        return out
    return f


@register_spmd_rule("index_add", case=gap_case("index_add", _index_add_dense, [([(5, 6), (3,), (5, 3)], {"axis": 1})],
                                              inputs_of(["f", ("u", 6), "f"])))
def index_add(x: DistSpec, index: DistSpec, value: DistSpec, axis: int = 0):
    """d0 a d2, i, d0 i d2 -> d0 a d2 | replicate: a i | partial(sum avg): 0 2 | partial(max min): 0   (axis=1)"""
    names = dims(x.ndim)
    a = axis_of(axis, x.ndim, "index_add")
    val = list(names)
    val[a] = "idx"
    return (f"{names_text(names)}, idx, {names_text(val)} -> {names_text(names)} "
            f"| replicate: {names[a]} idx | partial(sum avg): 0 2 | partial(max min): 0")


def _scatter_dense(a):
    def f(x, i, u):
        out = x.copy()
        i = i.astype(int)
        if a.get("overwrite", True):
            out[i] = u
        else:
            out[i] = 0
            np.add.at(out, i, u)
        return out
    return f


@register_spmd_rule("scatter", case=gap_case("scatter", _scatter_dense,
                                            [([(6, 5), (3,), (3, 5)], {}), ([(6, 4), (3,), (3, 4)], {"overwrite": False})],
                                            inputs_of(["f", ("u", 6), "f"])))
def scatter(x: DistSpec, index: DistSpec, updates: DistSpec, overwrite: bool = True):
    """n d1, m, m d1 -> n d1 | replicate: n m | partial(sum avg max min): 0 2   (overwrite=False: max min of x alone)"""
    names = dims(x.ndim)
    rest = names[1:]
    partial = "partial(sum avg max min): 0 2" if overwrite else "partial(sum avg): 0 2 | partial(max min): 0"
    return (f"{names_text(['n'] + rest)}, m, {names_text(['m'] + rest)} -> {names_text(['n'] + rest)} "
            f"| replicate: n m | {partial}")
