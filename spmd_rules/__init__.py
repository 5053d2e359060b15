"""paddle-ext's SPMD rules, one module per op family; importing this package registers them.

Each rule is a small function registered with ``@register_spmd_rule``; most return a notation
string for the einsum engine (see ``docs/spmd_rules.md``).
"""
from . import (concat_split, elementwise, embedding, matmul, norm, reduction, scan,  # noqa: F401
               shape)
from . import gaps  # noqa: F401,E402  - rules for ops Paddle replicates (used by paddle_ext.enable())

__all__ = ["concat_split", "elementwise", "embedding", "matmul", "norm", "reduction", "scan", "shape", "gaps"]
