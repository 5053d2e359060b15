"""Looking a rule up: paddle-ext's built-in rules loaded first, then the registry asked.

:mod:`.registry` holds the rules and takes registrations; the rule families in
``paddle_ext.spmd_rules`` register into it when they are imported. This module imports them
(:func:`load_builtin_rules`), so the registry never imports its own plugins (no import cycle,
string imports included), and answers lookups and inference by op name.
"""
from __future__ import annotations

import functools
import importlib
from typing import Mapping, Sequence

from ..placements import DistSpec
from .registry import REGISTRY
from .result import RuleResult


@functools.lru_cache(maxsize=2)
def load_builtin_rules(gaps: bool = False) -> None:
    """Import ``paddle_ext.spmd_rules`` (its modules register paddle-ext's rules); ``gaps=True``
    also ``spmd_rules.gaps``, the rules dispatch and ``enable()`` serve for ops Paddle lacks."""
    importlib.import_module("paddle_ext.spmd_rules")
    if gaps:
        importlib.import_module("paddle_ext.spmd_rules.gaps")


def get_spmd_rule(op: str, source: str = "auto"):
    """The rule for ``op``: paddle-ext's, else Paddle's C++ rule; a miss lists close names."""
    load_builtin_rules()
    return REGISTRY.get(op, source)


def infer_forward(op: str, specs: Sequence, attrs: Mapping | None = None) -> RuleResult:
    """Pure forward inference: ``RuleResult`` for ``op`` on :class:`DistSpec` values."""
    return get_spmd_rule(op, "ext").infer(specs, attrs)


def infer_backward(op: str, specs: Sequence, out_specs: Sequence[DistSpec],
                   attrs: Mapping | None = None) -> RuleResult:
    """Pure reverse inference: input layouts that produce ``out_specs``."""
    return get_spmd_rule(op, "ext").infer_reverse(specs, out_specs, attrs)


def infer_grad(op: str, specs: Sequence, out_grads: Sequence[DistSpec],
               attrs: Mapping | None = None) -> RuleResult:
    """Pure gradient inference (input gradients' layouts) from the forward notation."""
    return get_spmd_rule(op, "ext").infer_grad(specs, out_grads, attrs)


__all__ = ["get_spmd_rule", "infer_backward", "infer_forward", "infer_grad", "load_builtin_rules"]
