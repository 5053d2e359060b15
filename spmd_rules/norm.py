"""softmax, log_softmax, layer_norm, rms_norm: the normalised dims must stay whole.

The parameters enter the normalised output affinely (``out = n * scale + bias``, the statistics
do not depend on them): ``scale`` and ``bias`` partial together give a partial ``out``
(``sum``/``avg``), a partial ``bias`` alone shifts it (``avg``/``max``/``min``); mean, var and
rms_norm's ``inv`` stay replicated.
"""
from __future__ import annotations

from paddle_ext.placements import DistSpec
from paddle_ext.spmd.registry import register_spmd_rule

from ._names import axis_of, dims


def softmax_notation(ndim: int, axis: int, op: str = "softmax") -> str:
    """The softmax notation: the softmax axis is replicated.

    >>> softmax_notation(3, -1)
    'd0 d1 d2 -> d0 d1 d2 | replicate: d2'
    """
    if ndim == 0:
        return "... -> ..."
    names = dims(ndim)
    a = axis_of(axis, ndim, op)
    body = " ".join(names)
    return f"{body} -> {body} | replicate: {names[a]}"


@register_spmd_rule("softmax")
def softmax(x: DistSpec, axis: int = -1):
    """d0 d1 -> d0 d1 | replicate: d1   (axis=-1)"""
    return softmax_notation(x.ndim, axis, "softmax")


@register_spmd_rule("log_softmax")
def log_softmax(x: DistSpec, axis: int = -1):
    """d0 d1 -> d0 d1 | replicate: d1   (axis=-1)"""
    return softmax_notation(x.ndim, axis, "log_softmax")


def norm_notation(ndim: int, begin: int, params: int, stats: int, partial: str = "") -> str:
    """Batch dims ``b*`` keep their sharding; normalised dims ``n*`` and parameters ``s`` stay whole.

    >>> norm_notation(3, 2, 2, 2)
    'b0 b1 n2, s, s -> b0 b1 n2, b0 b1, b0 b1 | replicate: n2 s'
    """
    names = [f"b{i}" if i < begin else f"n{i}" for i in range(ndim)]
    x = " ".join(names)
    batch = " ".join(names[:begin])
    ins = [x] + ["s"] * params
    outs = [x] + [batch] * stats
    rep = " ".join(names[begin:] + (["s"] if params else []))
    return f"{', '.join(ins)} -> {', '.join(outs)}" + (f" | replicate: {rep}" if rep else "") + partial


def param_partials(scale: bool, bias: bool) -> str:
    """The ``partial(...)`` clauses of ``out = n * scale + bias`` (inputs 1, 2; output 0).

    >>> param_partials(True, True)
    ' | partial(sum avg): 1 2 -> 0 | partial(max min): 2 -> 0'
    >>> param_partials(False, True)
    ' | partial(avg max min): 1 -> 0'
    """
    if scale and bias:
        return " | partial(sum avg): 1 2 -> 0 | partial(max min): 2 -> 0"
    if scale:
        return " | partial(sum avg): 1 -> 0"
    return " | partial(avg max min): 1 -> 0" if bias else ""


@register_spmd_rule("layer_norm")
def layer_norm(x: DistSpec, scale: DistSpec | None = None, bias: DistSpec | None = None,
               epsilon: float = 1e-5, begin_norm_axis: int = 1):
    """b0 n1, s, s -> b0 n1, b0, b0 | replicate: n1 s | partial(sum avg): 1 2 -> 0 | partial(max min): 2 -> 0"""
    begin = axis_of(begin_norm_axis, x.ndim, "layer_norm")
    return norm_notation(x.ndim, begin, (scale is not None) + (bias is not None), 2,
                         param_partials(scale is not None, bias is not None))


@register_spmd_rule("rms_norm")
def rms_norm(x: DistSpec, scale: DistSpec, epsilon: float = 1e-6):
    """b0 b1 n2, s -> b0 b1 n2, b0 b1 | replicate: n2 s | partial(sum avg): 1 -> 0   (normalises the last dim)"""
    return norm_notation(x.ndim, x.ndim - 1, 1, 1, " | partial(sum avg): 1 -> 0")
