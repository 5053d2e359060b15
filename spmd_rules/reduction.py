"""Reductions: a sharded reduced dim makes the output ``Partial(op)``.

``mean`` reduces with ``avg``, which is only right when every rank holds the same number of
elements of the reduced dims, so its reduced factors are ``even``: an uneven shard is resharded
to Replicate first (Paddle's rule claims ``P(avg)`` there and gets the wrong value).

A reduction passes the partials it commutes with: ``sum``/``mean`` are linear (``P(sum)``,
``P(avg)`` stay), ``max`` of maxima is the maximum (``P(max)``), likewise ``min``.
"""
from __future__ import annotations

from paddle_ext.placements import DistSpec
from paddle_ext.spmd.registry import register_spmd_rule

from ._names import axis_of, dims


#: the input partials each reduction passes (see the module docstring)
PASSES = {"sum": "sum avg", "avg": "sum avg", "max": "max", "min": "min"}


def reduce_notation(ndim: int, axis, keepdim: bool, op: str, name: str = "reduce") -> str:
    """``d0 d1 -> d0 | reduce(op): d1 | partial(...): 0`` for the given axes.

    >>> reduce_notation(3, [1], True, "max")
    'd0 d1 d2 -> d0 1 d2 | reduce(max): d1 | partial(max): 0'
    >>> reduce_notation(2, [], False, "avg")
    'd0 d1 -> | reduce(avg): d0 d1 | partial(sum avg): 0'
    """
    names = dims(ndim)
    if isinstance(axis, int):
        axis = [axis]
    axes = sorted({axis_of(a, ndim, name) for a in axis}) if axis else list(range(ndim))
    out = [("1" if keepdim else None) if d in axes else n for d, n in enumerate(names)]
    red = " ".join(names[d] for d in axes)
    clause = f" | reduce({op}): {red}" if red else ""
    return f"{' '.join(names)} -> {' '.join(o for o in out if o)}{clause} | partial({PASSES[op]}): 0"


@register_spmd_rule("sum")
def sum_(x: DistSpec, axis: list[int] = (), keepdim: bool = False):
    """d0 d1 -> d0 | reduce(sum): d1 | partial(sum avg): 0   (for axis=[1])"""
    return reduce_notation(x.ndim, axis, keepdim, "sum", "sum")


@register_spmd_rule("max")
def max_(x: DistSpec, axis: list[int] = (), keepdim: bool = False):
    """d0 d1 -> d0 | reduce(max): d1 | partial(max): 0   (for axis=[1])"""
    return reduce_notation(x.ndim, axis, keepdim, "max", "max")


@register_spmd_rule("min")
def min_(x: DistSpec, axis: list[int] = (), keepdim: bool = False):
    """d0 d1 -> d0 | reduce(min): d1 | partial(min): 0   (for axis=[1])"""
    return reduce_notation(x.ndim, axis, keepdim, "min", "min")


@register_spmd_rule("mean")
def mean(x: DistSpec, axis: list[int] = (), keepdim: bool = False):
    """d0 d1 -> d0 | reduce(avg): d1 | partial(sum avg): 0   (for axis=[1]; avg factors are even)"""
    return reduce_notation(x.ndim, axis, keepdim, "avg", "mean")


@register_spmd_rule("mean_all")
def mean_all(x: DistSpec):
    """d0 d1 -> | reduce(avg): d0 d1 | partial(sum avg): 0"""
    return reduce_notation(x.ndim, [], False, "avg", "mean_all")
