"""Shared helpers of the gap rules: layout helpers for the rules, builders for their ground truth.

A gap rule is registered like any rule, with its validator case next to it::

    @register_spmd_rule("isfinite", case=gap_case("isfinite", lambda a: np.isfinite, [([(5, 7)], {})]))
"""
from __future__ import annotations

import math

import numpy as np

from paddle_ext.placements import DistSpec
from paddle_ext.spmd.opcases import OpCase

from .._names import axis_of, dims  # noqa: F401  (re-exported for the family modules)

ALL_PARTIALS = ("sum", "avg", "max", "min")


def world(x: DistSpec) -> int:
    return math.prod(x.mesh_shape)


def shard_rows(dims_in_out, n_in: int = 1, index: int = 0) -> tuple:
    """One-mesh-dim rows: ``S(o)`` output from ``S(i)`` on input ``index``, the others ``R``."""
    rows = []
    for i, o in dims_in_out:
        ins = ["R"] * n_in
        ins[index] = f"S({i})"
        rows.append((f"S({o})", ", ".join(ins)))
    return tuple(rows)


#: a copy (each output element one input element, or a constant 0) keeps any partial
COPY_PARTIALS = "sum avg max min"


def partial_rows(ops: str = COPY_PARTIALS, n_out: int = 1) -> tuple:
    """One-mesh-dim rows of a one-input op passing ``P(op)`` for each op in ``ops``.

    >>> partial_rows("sum avg")
    (('P(sum)', 'P(sum)'), ('P(avg)', 'P(avg)'))
    """
    return tuple((", ".join([f"P({o})"] * n_out), f"P({o})") for o in ops.split())


def names_text(names) -> str:
    return " ".join(names)


# -- ground truth ------------------------------------------------------------------------------------
def gap_case(op: str, dense, examples, inputs=None, needs_ctx: bool = False,
             partial_ok: tuple = ALL_PARTIALS) -> OpCase:
    """The validator's case for a gap rule: ``dense(attrs)`` is the numpy op, ``examples`` are
    ``(input shapes, attrs)`` instances (the first one also serves as the random instance);
    Paddle has no callable rule to compare with."""
    examples = tuple(examples)
    return OpCase(op, dense, examples, lambda rng: examples[0], None, None, inputs, needs_ctx, partial_ok,
                  ("gaps",))


def inputs_of(kinds):
    """Inputs builder: per input ``'f'`` normal, ``'m'`` 0/1 mask, ``('i', hi)`` index below ``hi``,
    ``('u', hi)`` unique index below ``hi`` (indices as exact small floats; the dense op casts them)."""
    def make(rng, shapes, attrs):
        out = []
        for k, s in zip(kinds, shapes):
            if k == "f":
                out.append(rng.standard_normal(s))
            elif k == "m":
                out.append((rng.random(s) < 0.5).astype(np.float64))
            elif k[0] == "i":
                out.append(rng.integers(0, k[1], size=s).astype(np.float64))
            else:
                out.append(rng.permutation(k[1])[:s[0]].astype(np.float64))
        return out
    return make
