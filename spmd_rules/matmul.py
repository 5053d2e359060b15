"""matmul and bmm: contraction over ``k`` gives ``Partial(sum)`` when ``k`` stays sharded.

A product is linear in each operand alone: a ``P(sum)``/``P(avg)`` operand whose partner is
replicated on that mesh dim gives a partial product (``partial(sum avg): 0, 1``).
"""
from __future__ import annotations

from paddle_ext.errors import ShardingRuleError
from paddle_ext.placements import DistSpec
from paddle_ext.spmd.notation import parse_notation
from paddle_ext.spmd.registry import register_spmd_rule


def matmul_notation(x_ndim: int, y_ndim: int, trans_x: bool = False, trans_y: bool = False) -> str:
    """The matmul notation for the operand ranks and transpose flags.

    >>> matmul_notation(2, 2)
    '... m k, ... k n -> ... m n'
    >>> matmul_notation(3, 2, trans_y=True)
    '... m k, ... n k -> ... m n'
    >>> matmul_notation(1, 3)
    'k, ... k n -> ... n'
    """
    if x_ndim == 0 or y_ndim == 0:
        raise ShardingRuleError("matmul: an operand is 0-D; matmul needs tensors of rank >= 1")
    if (trans_x and x_ndim < 2) or (trans_y and y_ndim < 2):
        raise ShardingRuleError("matmul: trans_x/trans_y need an operand of rank >= 2")
    x = "k" if x_ndim == 1 else ("... k m" if trans_x else "... m k")
    y = "k" if y_ndim == 1 else ("... n k" if trans_y else "... k n")
    out = " ".join(["..."] * (x_ndim > 1 or y_ndim > 1) + ["m"] * (x_ndim > 1) + ["n"] * (y_ndim > 1))
    return f"{x}, {y} -> {out}"


#: the clause ``partial(sum avg): 0, 1``, declared beside the notation text (errors quote the text)
LINEAR_EACH = (("sum avg", "0, 1"),)


@register_spmd_rule("matmul")
def matmul(x: DistSpec, y: DistSpec, trans_x: bool = False, trans_y: bool = False):
    """... m k, ... k n -> ... m n  (trans_x: ... k m; trans_y: ... n k)

    | partial(sum avg): 0, 1 -- a product is linear in each operand alone
    """
    return parse_notation(matmul_notation(x.ndim, y.ndim, trans_x, trans_y), partial=LINEAR_EACH)


@register_spmd_rule("bmm")
def bmm(x: DistSpec, y: DistSpec):
    """b m k, b k n -> b m n | partial(sum avg): 0, 1"""
    return parse_notation("b m k, b k n -> b m n", partial=LINEAR_EACH)
