"""Rule-driven dispatch: run a function written for local tensors on DistTensors.

One call of a dispatched op does, in order:

1. **lookup** (:mod:`.plan_cache`): the call's :class:`~.plan.Plan`, found by one dict lookup
   keyed by op, attributes and the inputs' layouts (global shapes, placements, mesh), else made
   by :func:`~.plan.make_plan`: every DistTensor input's :class:`DistSpec` (a dense tensor next
   to them is taken as replicated, Paddle's own convention) and paddle-ext's rule for the op
   (``paddle_ext.spmd``) -- a missing rule, inputs on different meshes or a rule that cannot
   serve the placements raise :class:`DispatchError` naming the op, the placements and the fix;
   nothing is ever replicated silently;
2. **route** (:mod:`.route`): reshard the inputs the rule lists as required reshards, then choose
   between no autograd, Paddle's native autograd and paddle-ext's PyLayer (:mod:`.autograd`) --
   backward produces the gradient placements of :func:`~paddle_ext.dispatch.grad.grad_plan`, so a
   replicated input consumed locally gets a ``Partial(sum)`` gradient;
3. **run**: the function on the local shards, its outputs checked against the local shapes the
   rule claims and wrapped with its placements and global shapes (:mod:`.outputs`).

Inside ``dist.to_static`` the same steps run without a cache, on PIR values (:mod:`.static`).
"""
from __future__ import annotations

from typing import Callable, Sequence

from ..compat import dispatch as cd
from ..placements import format_placements
from .plan import LocalCtx
from .plan_cache import lookup
from .route import run
from .rules import DispatchError, HandBack, explain_call, get_rule
from .slots import flatten_slots
from .static import dispatch_static


def dispatch(op: str, slots: Sequence, attrs: dict, run_local: Callable):
    """Run ``op`` on DistTensors through its paddle-ext rule (see the module docstring).

    ``slots``: one entry per tensor parameter of the rule (a tensor, a list of tensors, or None);
    ``attrs``: the rule's attributes; ``run_local(local_slots, ctx)`` computes on local tensors
    (``ctx``: a :class:`LocalCtx`, None when no input is a DistTensor).
    """
    rt = cd.dygraph_runtime()
    if not rt.in_dygraph():
        return dispatch_static(op, slots, attrs, run_local)
    found = lookup(rt, op, slots, attrs)
    if found is None:   # no DistTensor among the inputs
        return run_local(list(slots), None)
    plan, attrs, no_grad = found
    return run(rt, plan, op, slots, run_local, no_grad)


def has_dist(slots) -> bool:
    """True when a slot holds a DistTensor (dygraph) or a dist value (``dist.to_static``)."""
    return any(cd.is_dist(t) for t in flatten_slots(slots))


__all__ = ["DispatchError", "HandBack", "LocalCtx", "dispatch", "explain_call", "format_placements", "get_rule",
           "has_dist"]
