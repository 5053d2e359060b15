"""Elementwise and triangular ops Paddle 3.3.1 computes replicated on sharded inputs.

Measured on 2 ranks: ``masked_fill``, ``isfinite``, ``tril``/``triu``, ``flip``, ``cumprod``,
``repeat_interleave`` came back Replicate (inputs all-gathered without a word). ``isnan`` and
``isinf`` have no Paddle rule either (the isfinite family; the worked example of
``docs/architecture.md``).

``tril``/``triu`` keep *every* dim sharded: the local function shifts the diagonal by the
block's row and column offsets (``diagonal + row_offset - col_offset``).

Partial inputs pass where the op's algebra allows (the notations' ``partial(...)`` clauses):
``tril``/``triu``/``flip``/``repeat_interleave`` copy elements or write zeros (any partial);
``masked_fill`` picks from ``x`` or a constant (``avg``/``max``/``min``; ``sum`` when the
constant is 0); ``lerp`` is linear in ``x`` and ``y`` together, affine in ``weight``.
"""
from __future__ import annotations

import math

import numpy as np

from paddle_ext.placements import DistSpec
from paddle_ext.spmd.registry import Rows, register_spmd_rule

from ._common import COPY_PARTIALS, axis_of, dims, gap_case, inputs_of, names_text, partial_rows, shard_rows, world

FOLLOW = "..., ... -> ... | merge: follow"


@register_spmd_rule("masked_fill", case=gap_case(
    "masked_fill", lambda a: (lambda x, m: np.where(m > 0.5, a.get("value", 0.0), x)),
    [([(4, 6), (4, 6)], {"value": 0.5}), ([(5, 7), (7,)], {"value": -1.0})], inputs_of(["f", "m"])))
def masked_fill(x: DistSpec, mask: DistSpec, value: object = 0.0):
    """..., ... -> ... | merge: follow | partial(avg max min): 0   (value == 0: sum too)"""
    zero = isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0
    return f"{FOLLOW} | partial({'sum ' if zero else ''}avg max min): 0"


@register_spmd_rule("isfinite", case=gap_case("isfinite", lambda a: np.isfinite, [([(5, 7)], {})]))
def isfinite(x: DistSpec):
    """... -> ..."""
    return "... -> ..."


def _with_nan_and_inf(rng, shapes, attrs):
    """Normal values with about a third of them NaN, +inf or -inf (so isnan/isinf see both answers;
    sum/avg partial parts of such values are not exact, so the case tries max/min parts only)."""
    out = []
    for s in shapes:
        x = rng.standard_normal(s)
        x[rng.random(s) < 0.1], x[rng.random(s) < 0.1], x[rng.random(s) < 0.1] = np.nan, np.inf, -np.inf
        out.append(x)
    return out


@register_spmd_rule("isnan", case=gap_case("isnan", lambda a: np.isnan, [([(5, 7)], {}), ([(4, 6, 2)], {})],
                                           _with_nan_and_inf, partial_ok=("max", "min")))
def isnan(x: DistSpec):
    """... -> ...   (Paddle 3.3.1 has no rule for isnan: replicated, like isfinite)"""
    return "... -> ..."


@register_spmd_rule("isinf", case=gap_case("isinf", lambda a: np.isinf, [([(5, 7)], {}), ([(4, 6, 2)], {})],
                                           _with_nan_and_inf, partial_ok=("max", "min")))
def isinf(x: DistSpec):
    """... -> ...   (Paddle 3.3.1 has no rule for isinf: replicated, like isfinite)"""
    return "... -> ..."


@register_spmd_rule("lerp", case=gap_case("lerp", lambda a: (lambda x, y, w: x + w * (y - x)),
                                         [([(4, 6), (4, 6), (4, 6)], {}), ([(5, 7), (5, 7), (7,)], {})]))
def lerp(x: DistSpec, y: DistSpec, weight: DistSpec | None = None):
    """..., ..., ... -> ... | merge: follow | partial(sum): 0 1 | partial(avg): 0 1, 2   (no weight: 2 inputs)"""
    if weight is None:
        return f"{FOLLOW} | partial(sum avg): 0 1"
    return "..., ..., ... -> ... | merge: follow | partial(sum): 0 1 | partial(avg): 0 1, 2"


def _triangular(x: DistSpec) -> str:
    names = dims(x.ndim)
    return f"{names_text(names)} -> {names_text(names)} | partial({COPY_PARTIALS}): 0"


def _triangular_dense(fn):
    """The numpy op on a block: the diagonal shifted by the block's row and column offsets."""
    def make(a):
        def f(ctx, x):
            d = int(a.get("diagonal", 0))
            if ctx is not None:
                d += ctx.offset(0, x.ndim - 2) - ctx.offset(0, x.ndim - 1)
            return fn(x, d)
        return f
    return make


@register_spmd_rule("tril", case=gap_case("tril", _triangular_dense(np.tril),
                                         [([(5, 7)], {"diagonal": 1}), ([(2, 4, 5)], {"diagonal": -1})],
                                         needs_ctx=True))
def tril(x: DistSpec, diagonal: int = 0):
    """d0 d1 -> d0 d1 | partial(sum avg max min): 0   (local diagonal = diagonal + row offset - column offset)"""
    return _triangular(x)


@register_spmd_rule("triu", case=gap_case("triu", _triangular_dense(np.triu),
                                         [([(6, 5)], {"diagonal": 0}), ([(5, 7)], {"diagonal": 2})],
                                         needs_ctx=True))
def triu(x: DistSpec, diagonal: int = 0):
    """d0 d1 -> d0 d1 | partial(sum avg max min): 0   (local diagonal = diagonal + row offset - column offset)"""
    return _triangular(x)


@register_spmd_rule("flip", case=gap_case("flip", lambda a: (lambda x: np.flip(x, tuple(a["axis"]))),
                                         [([(5, 6)], {"axis": [1]}), ([(4, 5, 3)], {"axis": [0, 2]})]))
def flip(x: DistSpec, axis: list[int] = ()):
    """d0 d1 -> d0 d1 | replicate: d1 | partial(sum avg max min): 0   (axis=[1]: flipped dims stay whole)"""
    names = dims(x.ndim)
    rep = [names[axis_of(a, x.ndim, "flip")] for a in axis] if x.ndim else []
    body = names_text(names)
    return f"{body} -> {body}" + (f" | replicate: {names_text(rep)}" if rep else "") + f" | partial({COPY_PARTIALS}): 0"


def _scan(x: DistSpec, axis, op: str):
    if axis is None or x.ndim == 0:
        return Rows((), ((math.prod(x.shape),),))       # flattened scan: replicate
    names = dims(x.ndim)
    a = axis_of(int(axis), x.ndim, op)
    body = names_text(names)
    return f"{body} -> {body} | replicate: {names[a]}"


def _scan_dense(fn, key):
    def make(a):
        def f(x):
            axis = a.get(key)
            if axis is None:
                return fn(x.reshape(-1), 0)
            return fn(x, int(axis) % x.ndim)
        return f
    return make


@register_spmd_rule("cumprod", case=gap_case("cumprod", _scan_dense(lambda x, ax: np.cumprod(x, axis=ax), "dim"),
                                            [([(5, 4)], {"dim": 1}), ([(4, 6)], {"dim": 0}),
                                             ([(3, 4)], {"dim": None})]))
def cumprod(x: DistSpec, dim: object = None):
    """d0 d1 -> d0 d1 | replicate: d1   (dim=1; dim=None scans the flattened tensor: replicate)"""
    return _scan(x, dim, "cumprod")


@register_spmd_rule("logcumsumexp", case=gap_case(
    "logcumsumexp", _scan_dense(lambda x, ax: np.logaddexp.accumulate(x, axis=ax), "axis"),
    [([(4, 6)], {"axis": 0}), ([(5, 7)], {"axis": -1})]))
def logcumsumexp(x: DistSpec, axis: object = None):
    """d0 d1 -> d0 d1 | replicate: d1   (axis=1; axis=None: replicate)"""
    return _scan(x, axis, "logcumsumexp")


def _repeat_interleave_dense(a):
    axis = a.get("axis")
    return lambda x: np.repeat(x.reshape(-1) if axis is None else x, a["repeats"],
                               axis=0 if axis is None else int(axis) % x.ndim)


@register_spmd_rule("repeat_interleave", case=gap_case(
    "repeat_interleave", _repeat_interleave_dense,
    [([(4, 5)], {"repeats": 2, "axis": 0}), ([(5, 3)], {"repeats": 3, "axis": 1}), ([(5, 3)], {"repeats": 2, "axis": 0})]))
def repeat_interleave(x: DistSpec, repeats: int = 1, axis: object = None):
    """S(d) -> S(d) rows for every dim; the repeated dim only when it splits evenly over the mesh; P(op) rows"""
    if axis is None:
        return Rows(partial_rows(), ((math.prod(x.shape) * repeats,),))
    a = axis_of(int(axis), x.ndim, "repeat_interleave")
    shape = list(x.shape)
    shape[a] *= repeats
    pairs = [(d, d) for d in range(x.ndim) if d != a or x.shape[d] % world(x) == 0]
    return Rows(shard_rows(pairs) + partial_rows(), (tuple(shape),))
