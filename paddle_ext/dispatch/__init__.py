"""Rules that take effect on DistTensors: rule-driven dispatch, ``enable()``, the audit.

* :func:`spmd_op` -- decorator turning a function written for local tensors into a
  DistTensor-aware op driven by its registered SPMD rule (dygraph and ``dist.to_static``);
  :func:`dispatch` is the same for callers that bind arguments themselves.
* :func:`enable` / :func:`disable` -- route Paddle's public ops that lack a usable rule
  (``paddle.flip``, ``F.max_pool2d``, ``paddle.mean`` over uneven shards, ...) through
  paddle-ext's rules in ``spmd_rules/gaps``; dense calls go straight to Paddle.
* :class:`audit` -- list the op calls whose sharded inputs were computed replicated.
* :func:`grad_plan` -- the gradient placements a dispatched op produces (pure).

Importing this package imports no Paddle.
"""
from .audit import AuditReport, audit  # noqa: F401
from .core import DispatchError, LocalCtx, dispatch, explain_call, get_rule  # noqa: F401
from .decorator import SpmdOp, spmd_op  # noqa: F401
from .enable import disable, enable, enabled_ops, is_enabled  # noqa: F401
from .grad import GradPlan, grad_plan  # noqa: F401

__all__ = ["AuditReport", "DispatchError", "GradPlan", "LocalCtx", "SpmdOp", "audit", "disable", "dispatch",
           "enable", "enabled_ops", "explain_call", "get_rule", "grad_plan", "is_enabled", "spmd_op"]
