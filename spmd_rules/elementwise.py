"""Elementwise ops: ``... -> ...`` and ``..., ... -> ...`` with numpy broadcasting.

Binary ops merge like Paddle's elementwise rules (``merge: follow``): the most-sharded input
keeps its layout and the other follows. Size-1 (broadcast) dims are never sharded.

Which ``Partial`` inputs pass through is the op's algebra, stated in each notation's
``partial(...)`` clause: a non-decreasing function commutes with an elementwise max/min
(``relu(max(a, b)) == max(relu(a), relu(b))``), so ``P(max)``/``P(min)`` stay; ``log`` and
``sqrt`` keep only ``P(min)`` (the parts of a ``P(max)`` may leave the domain, the parts of a
``P(min)`` are >= the value); ``add`` is linear in both operands together, ``multiply`` in each
alone, ``divide`` in its numerator.
"""
from __future__ import annotations

from paddle_ext.placements import DistSpec
from paddle_ext.spmd.registry import register_spmd_rule

#: non-decreasing on their whole domain: P(max) and P(min) pass
MONOTONE = ("relu", "exp", "tanh", "sigmoid", "floor", "ceil", "sign", "erf", "logsigmoid", "softsign",
            "relu6")
#: non-decreasing on a domain bounded below: only P(min) passes (its parts are >= the value)
MONOTONE_FROM_BELOW = ("sqrt", "log")
UNARY = ("cos", "sin", "abs", "silu", "rsqrt", "square", "reciprocal", "hardswish")
BINARY = ("fmax", "fmin", "elementwise_pow", "floor_divide", "remainder")

UNARY_NOTATION = "... -> ..."
MONOTONE_NOTATION = "... -> ... | partial(max min): 0"
MONOTONE_FROM_BELOW_NOTATION = "... -> ... | partial(min): 0"
COPY_NOTATION = "... -> ... | partial(sum avg max min): 0"
BINARY_NOTATION = "..., ... -> ... | merge: follow"
#: binary ops whose partial inputs pass, by the op's algebra
BINARY_PARTIAL = {
    "add": "partial(sum avg): 0 1 | partial(max min): 0, 1",        # linear; a shift is monotone
    "subtract": "partial(sum avg): 0 1 | partial(max min): 0",      # linear; x - c is monotone in x
    "multiply": "partial(sum avg): 0, 1",                           # linear in each operand alone
    "divide": "partial(sum avg): 0",                                # linear in the numerator
    "maximum": "partial(max): 0 1 | partial(min): 0, 1",            # max/min distribute (a lattice)
    "minimum": "partial(min): 0 1 | partial(max): 0, 1",
}


def _unary(x: DistSpec):
    """... -> ..."""
    return UNARY_NOTATION


def _monotone(x: DistSpec):
    """... -> ... | partial(max min): 0"""
    return MONOTONE_NOTATION


def _monotone_from_below(x: DistSpec):
    """... -> ... | partial(min): 0"""
    return MONOTONE_FROM_BELOW_NOTATION


def _copy(x: DistSpec):
    """... -> ... | partial(sum avg max min): 0"""
    return COPY_NOTATION


def _binary(x: DistSpec, y: DistSpec):
    """..., ... -> ... | merge: follow"""
    return BINARY_NOTATION


def _binary_rule(clause: str):
    def rule(x: DistSpec, y: DistSpec):
        return f"{BINARY_NOTATION} | {clause}"
    rule.__doc__ = f"{BINARY_NOTATION} | {clause}"
    return rule


def _gelu(x: DistSpec, approximate: bool = False):
    """... -> ..."""
    return UNARY_NOTATION


def _leaky_relu(x: DistSpec, negative_slope: float = 0.01):
    """... -> ... | partial(max min): 0   (negative_slope >= 0: non-decreasing)"""
    return MONOTONE_NOTATION if negative_slope >= 0 else UNARY_NOTATION


def _elu(x: DistSpec, alpha: float = 1.0):
    """... -> ... | partial(max min): 0   (alpha >= 0: non-decreasing)"""
    return MONOTONE_NOTATION if alpha >= 0 else UNARY_NOTATION


for _name in UNARY + ("swish",):   # Paddle's swish kernel takes no attribute
    register_spmd_rule(_name)(_unary)
for _name in MONOTONE:
    register_spmd_rule(_name)(_monotone)
for _name in MONOTONE_FROM_BELOW:
    register_spmd_rule(_name)(_monotone_from_below)
register_spmd_rule("assign")(_copy)
register_spmd_rule("gelu")(_gelu)
register_spmd_rule("leaky_relu")(_leaky_relu)
register_spmd_rule("elu")(_elu)
for _name in BINARY:
    register_spmd_rule(_name)(_binary)
for _name, _clause in BINARY_PARTIAL.items():
    register_spmd_rule(_name)(_binary_rule(_clause))


@register_spmd_rule("scale")
def scale(x: DistSpec, scale: float = 1.0, bias: float = 0.0, bias_after_scale: bool = True):
    """... -> ... | partial(avg): 0   (affine; + sum when bias == 0, + max min when scale >= 0)"""
    ops = ["avg"] + (["sum"] if bias == 0 else []) + (["max", "min"] if scale >= 0 else [])
    return f"{UNARY_NOTATION} | partial({' '.join(ops)}): 0"


@register_spmd_rule("where")
def where(condition: DistSpec, x: DistSpec, y: DistSpec):
    """..., ..., ... -> ... | merge: follow | partial(sum avg max min): 1 2   (picks from x and y)"""
    return "..., ..., ... -> ... | merge: follow | partial(sum avg max min): 1 2"
