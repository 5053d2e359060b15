"""Elementwise ops: ``... -> ...`` and ``..., ... -> ...`` with numpy broadcasting.

Binary ops merge like Paddle's elementwise rules (``merge: follow``): the most-sharded input
keeps its layout and the other follows. Size-1 (broadcast) dims are never sharded.
"""
from __future__ import annotations

from paddle_ext.placements import DistSpec
from paddle_ext.spmd.registry import register_spmd_rule

UNARY = ("relu", "exp", "tanh", "sigmoid", "sqrt", "abs", "silu", "sin", "cos", "log", "rsqrt",
         "square", "floor", "ceil", "sign", "reciprocal", "erf", "logsigmoid", "softsign", "relu6",
         "hardswish", "assign")
UNARY_WITH_ATTR = {"gelu": ("approximate", bool), "leaky_relu": ("negative_slope", float),
                   "swish": ("beta", float), "elu": ("alpha", float)}
BINARY = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "fmax", "fmin",
          "elementwise_pow", "floor_divide", "remainder")

UNARY_NOTATION = "... -> ..."
BINARY_NOTATION = "..., ... -> ... | merge: follow"


def _unary(x: DistSpec):
    """... -> ..."""
    return UNARY_NOTATION


def _binary(x: DistSpec, y: DistSpec):
    """..., ... -> ... | merge: follow"""
    return BINARY_NOTATION


def _gelu(x: DistSpec, approximate: bool = False):
    """... -> ..."""
    return UNARY_NOTATION


def _float_attr(x: DistSpec, value: float = 0.0):
    """... -> ..."""
    return UNARY_NOTATION


for _name in UNARY:
    register_spmd_rule(_name)(_unary)
register_spmd_rule("gelu")(_gelu)
for _name in ("leaky_relu", "swish", "elu"):
    register_spmd_rule(_name)(_float_attr)
for _name in BINARY:
    register_spmd_rule(_name)(_binary)


@register_spmd_rule("scale")
def scale(x: DistSpec, scale: float = 1.0, bias: float = 0.0, bias_after_scale: bool = True):
    """... -> ..."""
    return UNARY_NOTATION


@register_spmd_rule("where")
def where(condition: DistSpec, x: DistSpec, y: DistSpec):
    """..., ..., ... -> ... | merge: follow"""
    return "..., ..., ... -> ... | merge: follow"
