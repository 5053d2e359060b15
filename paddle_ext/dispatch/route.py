"""Route and run a dygraph dispatch: the one place that chooses how a call meets autograd.

Given the call's :class:`~.plan.Plan` (from :mod:`.plan_cache`), :func:`run` makes the inputs
the plan expects -- dense tensors replicated, the rule's required reshards done (differentiable:
:func:`~.autograd.reshard`) -- and takes one of three routes:

* ``no autograd``: no input requires grad, or grad is off -- the local op on the local values;
* ``native``: Paddle's own C++ autograd, where it is exact (:attr:`Plan.native_hints`):
  ``dtensor_to_local`` with the gradient placements of the :class:`~.grad.GradPlan` as its
  placements (its backward builds the input gradient with them, so a replicated input consumed
  locally gets ``P(sum)``), the local op, and ``dtensor_from_local`` (whose backward reshards
  ``dy`` to the output's placements);
* ``PyLayer``: everything else (:func:`~.autograd.dispatch_function`).

:func:`pylayer_only` sends every differentiable call through the PyLayer inside a ``with``
block (tests compare both routes).
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Callable, NamedTuple

from ..compat import dispatch as cd
from ..compat.dispatch import DygraphRuntime
from .audit_report import _ACTIVE, record_dispatch
from .autograd import dispatch_function, reshard
from .outputs import wrap_checked
from .plan import Plan
from .slots import flatten_slots, restructure

_NATIVE = contextvars.ContextVar("paddle_ext_dispatch_native_autograd", default=True)


class Call(NamedTuple):
    """One dispatched call as the PyLayer sees it: the op, the cached :class:`Plan`, the call's
    slots (their structure) and its local function ``run_local(local slots, LocalCtx)``."""

    op: str
    plan: Plan
    slots: list
    run_local: Callable


@contextlib.contextmanager
def pylayer_only():
    """Inside the block, every differentiable dygraph dispatch takes the PyLayer route."""
    token = _NATIVE.set(False)
    try:
        yield
    finally:
        _NATIVE.reset(token)


def run(rt: DygraphRuntime, plan: Plan, op: str, slots, run_local: Callable, no_grad: bool):
    """Run a dygraph call of ``op`` on ``slots`` by ``plan`` (``no_grad``: no input requires grad)."""
    if plan.direct:   # every slot one DistTensor: the slots are the inputs
        flat = slots
    else:
        flat = [t if cd.is_dist(t) else (cd.replicate_dense(t, plan.mesh) if cd.is_tensor(t) else t)
                for t in flatten_slots(slots)]
    if plan.reshards:
        grad_on = rt.grad_enabled()
        flat = list(flat)
        for i, pls in plan.reshards:   # a reshard keeps stop_gradient, so no_grad still holds
            flat[i] = reshard(flat[i], plan.mesh, pls, grad_on)
    if no_grad or not rt.grad_enabled():
        lin = [t._local_value() for t in flat]
    elif plan.native_hints is not None and _NATIVE.get():
        to_local, mesh = rt.to_local, plan.cmesh
        lin = [to_local(t, mesh, h) if not t.stop_gradient else t._local_value()
               for t, h in zip(flat, plan.native_hints)]
    else:
        outs = dispatch_function().apply(Call(op, plan, list(slots), run_local), *flat)
        if _ACTIVE:
            record_dispatch(op)
        return outs
    out = run_local(lin if plan.direct else restructure(slots, lin), plan.ctx)
    if plan.single and not isinstance(out, (tuple, list)) and out.shape == plan.out_local[0]:
        outs = rt.from_local(out, plan.cmesh, plan.out_paddle[0])   # the common case of wrap_checked, inline
    else:
        outs = wrap_checked(rt.from_local, op, plan, out)
    if _ACTIVE:
        record_dispatch(op)
    return outs


__all__ = ["Call", "pylayer_only", "run"]
