"""Elementwise and triangular ops Paddle 3.3.1 computes replicated on sharded inputs.

Measured on 2 ranks: ``masked_fill``, ``isfinite``, ``tril``/``triu``, ``flip``, ``cumprod``,
``repeat_interleave`` came back Replicate (inputs all-gathered without a word).

``tril``/``triu`` keep *every* dim sharded: the local function shifts the diagonal by the
block's row and column offsets (``diagonal + row_offset - col_offset``).
"""
from __future__ import annotations

import math

from paddle_ext.placements import DistSpec
from paddle_ext.spmd.registry import Rows

from ._common import axis_of, dims, gap_rule, names_text, shard_rows, world

FOLLOW = "..., ... -> ... | merge: follow"


@gap_rule("masked_fill")
def masked_fill(x: DistSpec, mask: DistSpec, value: object = 0.0):
    """..., ... -> ... | merge: follow"""
    return FOLLOW


@gap_rule("isfinite")
def isfinite(x: DistSpec):
    """... -> ..."""
    return "... -> ..."


@gap_rule("lerp")
def lerp(x: DistSpec, y: DistSpec, weight: DistSpec | None = None):
    """..., ..., ... -> ... | merge: follow   (weight a tensor; a float weight: ..., ... -> ...)"""
    if weight is None:
        return FOLLOW
    return "..., ..., ... -> ... | merge: follow"


def _triangular(x: DistSpec) -> str:
    names = dims(x.ndim)
    return f"{names_text(names)} -> {names_text(names)}"


@gap_rule("tril")
def tril(x: DistSpec, diagonal: int = 0):
    """d0 d1 -> d0 d1   (local diagonal = diagonal + row offset - column offset)"""
    return _triangular(x)


@gap_rule("triu")
def triu(x: DistSpec, diagonal: int = 0):
    """d0 d1 -> d0 d1   (local diagonal = diagonal + row offset - column offset)"""
    return _triangular(x)


@gap_rule("flip")
def flip(x: DistSpec, axis: list[int] = ()):
    """d0 d1 -> d0 d1 | replicate: d1   (axis=[1]: flipped dims stay whole)"""
    names = dims(x.ndim)
    rep = [names[axis_of(a, x.ndim, "flip")] for a in axis] if x.ndim else []
    body = names_text(names)
    return f"{body} -> {body}" + (f" | replicate: {names_text(rep)}" if rep else "")


def _scan(x: DistSpec, axis, op: str):
    if axis is None or x.ndim == 0:
        return Rows((), ((math.prod(x.shape),),))       # flattened scan: replicate
    names = dims(x.ndim)
    a = axis_of(int(axis), x.ndim, op)
    body = names_text(names)
    return f"{body} -> {body} | replicate: {names[a]}"


@gap_rule("cumprod")
def cumprod(x: DistSpec, dim: object = None):
    """d0 d1 -> d0 d1 | replicate: d1   (dim=1; dim=None scans the flattened tensor: replicate)"""
    return _scan(x, dim, "cumprod")


@gap_rule("logcumsumexp")
def logcumsumexp(x: DistSpec, axis: object = None):
    """d0 d1 -> d0 d1 | replicate: d1   (axis=1; axis=None: replicate)"""
    return _scan(x, axis, "logcumsumexp")


@gap_rule("repeat_interleave")
def repeat_interleave(x: DistSpec, repeats: int = 1, axis: object = None):
    """S(d) -> S(d) rows for every dim; the repeated dim only when it splits evenly over the mesh"""
    if axis is None:
        return Rows((), ((math.prod(x.shape) * repeats,),))
    a = axis_of(int(axis), x.ndim, "repeat_interleave")
    shape = list(x.shape)
    shape[a] *= repeats
    pairs = [(d, d) for d in range(x.ndim) if d != a or x.shape[d] % world(x) == 0]
    return Rows(shard_rows(pairs), (tuple(shape),))
