"""cumsum: the scanned dim stays whole; ``flatten=True`` scans the flattened tensor."""
from __future__ import annotations

import math

from paddle_ext.placements import DistSpec
from paddle_ext.spmd.registry import Rows, register_spmd_rule

from ._names import axis_of, dims


@register_spmd_rule("cumsum")
def cumsum(x: DistSpec, axis: int = -1, flatten: bool = False, exclusive: bool = False,
           reverse: bool = False):
    """d0 d1 -> d0 d1 | replicate: d1 | partial(sum avg): 0   (axis=-1; flatten=True: replicate everything)"""
    if flatten or x.ndim == 0:
        return Rows((("P(sum)", "P(sum)"), ("P(avg)", "P(avg)")), ((math.prod(x.shape),),))
    names = dims(x.ndim)
    a = axis_of(axis, x.ndim, "cumsum")
    return f"{' '.join(names)} -> {' '.join(names)} | replicate: {names[a]} | partial(sum avg): 0"
