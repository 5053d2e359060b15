"""paddle-ext's SPMD rule engine (pure: imports neither Paddle nor compat).

* :mod:`.notation`  -- the rule notation (``"b m k, k n -> b m n | reduce(max): k"``).
* :mod:`.einsum`    -- einsum inference: merge, conflicts, partial outputs, reshards.
* :mod:`.dimtrans`  -- reshape-like ops as DimTrans maps.
* :mod:`.onedim`    -- rules written for one mesh dim, expanded to N-D meshes.
* :mod:`.registry`  -- ``register_spmd_rule`` / ``get_spmd_rule`` (Paddle's C++ rules as fallback).
* :mod:`.validator` -- ground truth on simulated ranks (false positives / negatives).

Paddle's C++ rules and its calling convention reach the registry through one port,
:class:`~.registry.PaddleRules`, which :mod:`paddle_ext.compat.ports.spmd_bridge` connects on
``import paddle_ext``.

Pure API::

    from paddle_ext.spmd import infer_forward
    infer_forward("matmul", [DistSpec((4, 8), (2,), "[S(1)]"), DistSpec((8, 6), (2,), "[R]")])
"""
from .notation import Notation, parse_notation  # noqa: F401
from .lookup import get_spmd_rule, infer_backward, infer_forward, infer_grad  # noqa: F401
from .registry import REGISTRY, Rows, SpmdRule, View, register_spmd_rule  # noqa: F401
from .result import Reshard, RuleResult  # noqa: F401

__all__ = ["Notation", "REGISTRY", "Reshard", "RuleResult", "Rows", "SpmdRule", "View", "get_spmd_rule",
           "infer_backward", "infer_forward", "infer_grad", "parse_notation", "register_spmd_rule"]
