"""Shared helpers of the gap rules: registration that never clobbers another family's rule."""
from __future__ import annotations

import math

from paddle_ext.placements import DistSpec
from paddle_ext.spmd.registry import REGISTRY, register_spmd_rule

from .._names import axis_of, dims  # noqa: F401  (re-exported for the family modules)

OWNED: list[str] = []   # the op names this package registered (enable() and the docs list them)


def gap_rule(op: str):
    """``register_spmd_rule(op)`` unless a rule family already registered ``op`` (theirs wins)."""
    def deco(fn):
        if op in REGISTRY.rules and REGISTRY.rules[op].fn is not fn:
            return fn
        register_spmd_rule(op)(fn)
        OWNED.append(op)
        return fn
    return deco


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


def names_text(names) -> str:
    return " ".join(names)
