"""Rules for the ops Paddle 3.3.1 computes replicated on sharded inputs (issue 6).

One module per family; importing this package registers them (``paddle_ext.dispatch`` imports
it). Each rule is registered with ``@register_spmd_rule(op, case=...)`` like any rule, its
validator case (numpy semantics and examples) written next to it. :data:`OWNED` lists the ops
this package registered.
"""
from paddle_ext.spmd.registry import REGISTRY

from . import indexing, linalg, pointwise, spatial, statistics  # noqa: F401

OWNED: tuple = tuple(op for op, rule in REGISTRY.rules.items() if rule.fn.__module__.startswith(__name__ + "."))

__all__ = ["OWNED", "indexing", "linalg", "pointwise", "spatial", "statistics"]
