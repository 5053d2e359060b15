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


def _leaky_relu(x: DistSpec, negative_slope: float = 0.01):
    """... -> ..."""
    return UNARY_NOTATION


def _elu(x: DistSpec, alpha: float = 1.0):
    """... -> ..."""
    return UNARY_NOTATION


for _name in UNARY + ("swish",):   # Paddle's swish kernel takes no attribute
    register_spmd_rule(_name)(_unary)
register_spmd_rule("gelu")(_gelu)
register_spmd_rule("leaky_relu")(_leaky_relu)
register_spmd_rule("elu")(_elu)
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
