"""Rule-driven dispatch: run a function written for local tensors on DistTensors.

One call of a dispatched op does, in order:

1. **lookup** (:mod:`.plan_cache`): the call's :class:`~.call_plan.Plan`, found by one dict lookup
   keyed by op, attributes and the inputs' layouts (global shapes, placements, mesh) -- key and
   lookup one compiled call (``fast_key.PLAN_OF``) once built --, else made
   by :func:`~.call_plan.make_plan`: every DistTensor input's :class:`DistSpec` (a dense tensor next
   to them is taken as replicated, Paddle's own convention) and paddle-ext's rule for the op
   (``paddle_ext.spmd``) -- a missing rule, inputs on different meshes or a rule that cannot
   serve the placements raise :class:`DispatchError` naming the op, the placements and the fix;
   nothing is ever replicated silently;
2. **route** (:func:`_decide`, the one place that chooses; its most common answer -- a repeated
   differentiable call that Paddle's op serves, no route switch, no audit -- is also taken by the
   compiled entry ``fast_key.ROUTE``, which hands every other call to :func:`_decide` with its
   lookup): the inputs the plan expects (dense
   tensors replicated, the rule's required reshards done, differentiably), then one of four
   routes --

   * *no autograd*: no input requires grad, or grad is off -- the local op on the local values;
   * *Paddle's op*: where Paddle's own op does what the plan does (:attr:`Plan.paddle_serves`:
     inputs as given, even shards, Paddle's C++ rule answers the same placements), the function
     runs on the DistTensors themselves, so Paddle's one grad node is the call's only one. The
     plan's first such call checks that the outputs have the plan's global shapes, placements
     and mesh; if they do not (or the function fails on DistTensors), that plan keeps the
     routes below for good and the call is run again through them;
   * *native*: Paddle's own C++ autograd, where it is exact (:attr:`Plan.native_hints`):
     ``dtensor_to_local`` with the gradient placements of the :class:`~.grad.GradPlan` as its
     placements (its backward builds the input gradient with them, so a replicated input
     consumed locally gets ``P(sum)``), the local op, and ``dtensor_from_local`` (whose backward
     reshards ``dy`` to the output's placements);
   * *PyLayer*: everything else (:mod:`.autograd`);

3. **run**: the function on the local shards, its outputs checked against the local shapes the
   rule claims and wrapped with its placements and global shapes (:mod:`.outputs`).

:func:`pylayer_only` sends every differentiable call through the PyLayer inside a ``with``
block, :func:`own_routes` through paddle-ext's native route or the PyLayer (tests compare the
routes). Inside ``dist.to_static`` the same steps run without a
cache, on PIR values (:mod:`.static`).
"""
from __future__ import annotations

import contextlib
import contextvars
import logging
from typing import Callable, NamedTuple, Sequence

from ..compat.ports import dispatch as cd
from ..compat.ports.dispatch import DygraphRuntime, dygraph_runtime
from ..compat.ports.internals import local_value
from ..placements import format_placements
from .audit_report import _ACTIVE, record_dispatch
from .autograd import dispatch_function, reshard
from .outputs import wrap_checked
from .call_plan import LocalCtx, Plan
from ..compat.native.fast_key import PLAN_OF, ROUTE, bind_route
from .plan_cache import PLANS, lookup
from .rule_lookup import DispatchError, HandBack, explain_call, get_rule
from .slots import flatten_slots, restructure
from .static import dispatch_static

_ALL_ROUTES = (True, True)
#: (Paddle's native autograd allowed, Paddle's op on the DistTensors allowed): one read per call
_ROUTES = contextvars.ContextVar("paddle_ext_dispatch_routes", default=_ALL_ROUTES)
log = logging.getLogger("paddle_ext.dispatch")


class Call(NamedTuple):
    """One dispatched call as the PyLayer sees it: the op, the cached :class:`Plan`, the call's
    slots (their structure) and its local function ``run_local(local slots, LocalCtx)``."""

    op: str
    plan: Plan
    slots: list
    run_local: Callable


def dispatch(op: str, slots: Sequence, attrs: dict, run_local: Callable):
    """Run ``op`` on DistTensors through its paddle-ext rule (see the module docstring).

    ``slots``: one entry per tensor parameter of the rule (a tensor, a list of tensors, or None);
    ``attrs``: the rule's attributes; ``run_local(local_slots, ctx)`` computes on local tensors
    (``ctx``: a :class:`LocalCtx`, None when no input is a DistTensor).
    """
    route = ROUTE[0]   # the compiled entry, once built and checked: its hot route, else _decide below
    if route is not None:
        return route(op, slots, attrs, run_local)
    return _decide(op, slots, attrs, run_local, None)


def _decide(op: str, slots: Sequence, attrs: dict, run_local: Callable, got):
    """:func:`dispatch`'s decision. ``got``: the compiled lookup's answer when the compiled entry
    looked (``(plan or None, layout, no_grad)``; False: the slots have no compiled key), else None."""
    rt = dygraph_runtime()
    if rt.tracer() is None:   # not dygraph
        return dispatch_static(op, slots, attrs, run_local)
    if got is None:
        plan_of = PLAN_OF[0]   # the compiled key and lookup in one call, once built (a repeated call: a hit)
        got = plan_of(PLANS, op, attrs, slots) if plan_of is not None and attrs.__class__ is dict else None
    if got and got[0] is not None:
        plan, _, no_grad = got
    else:
        found = lookup(rt, op, slots, attrs)
        if found is None:   # no DistTensor among the inputs
            return run_local(list(slots), None)
        plan, no_grad = found
    if no_grad or not rt.grad_enabled():
        flat = slots if plan.ready else _inputs(rt, plan, slots)
        lin = [local_value(t) for t in flat]
    else:
        outs = None
        routes = _ROUTES.get()
        if plan.by_paddle is not False and (routes is _ALL_ROUTES or all(routes)):
            outs = run_local(slots, None) if plan.by_paddle else _first_by_paddle(plan, slots, run_local)
        if outs is not None:
            if _ACTIVE:
                record_dispatch(op)
            return outs
        flat = slots if plan.ready else _inputs(rt, plan, slots)
        if plan.native_hints is None or not routes[0]:
            outs = dispatch_function().apply(Call(op, plan, list(slots), run_local), *flat)
            if _ACTIVE:
                record_dispatch(op)
            return outs
        to_local, mesh = rt.to_local, plan.cmesh
        lin = [to_local(t, mesh, h) if not t.stop_gradient else local_value(t)
               for t, h in zip(flat, plan.native_hints)]
    out = run_local(lin if plan.direct else restructure(slots, lin), plan.ctx)
    if plan.single and not isinstance(out, (tuple, list)) and out.shape == plan.out_local[0]:
        outs = rt.from_local(out, plan.cmesh, plan.out_paddle[0])   # the common case of wrap_checked, inline
    else:
        outs = wrap_checked(rt.from_local, op, plan, out)
    if _ACTIVE:
        record_dispatch(op)
    return outs


bind_route(PLANS, _ROUTES, _ALL_ROUTES, _ACTIVE, _decide)


def _first_by_paddle(plan: Plan, slots, run_local: Callable):
    """The first differentiable call of ``plan`` where Paddle's op may serve it: the function
    on the DistTensors themselves. Its outputs are returned, and the plan takes this route from
    now on, when they have the plan's global shapes, placements and mesh (the same answer on
    every rank); otherwise None, and the plan keeps paddle-ext's own routes for good."""
    plan.by_paddle = False
    if not plan.paddle_serves:
        return None
    try:
        outs = run_local(slots, None)
    except Exception as exc:   # the function does not run on DistTensors (a custom kernel): paddle-ext's route
        log.debug("%s: Paddle's op on the DistTensors failed (%s); paddle-ext's route serves it", plan.op, exc)
        return None
    if not _same_layout(plan, outs):
        log.debug("%s: Paddle's op gave another layout than the plan; paddle-ext's route serves it", plan.op)
        return None
    plan.by_paddle = True
    return outs


def _same_layout(plan: Plan, outs) -> bool:
    """Every output is a DistTensor with the plan's global shape, Paddle placements and mesh."""
    outs = outs if isinstance(outs, (tuple, list)) else (outs,)
    if len(outs) != len(plan.out_paddle):
        return False
    for o, pls, spec in zip(outs, plan.out_paddle, plan.result.outputs):
        if not (cd.is_dist(o) and tuple(o.shape) == tuple(spec.shape) and list(o.placements) == list(pls)
                and o.process_mesh == plan.mesh):
            return False
    return True


def _inputs(rt: DygraphRuntime, plan: Plan, slots) -> list:
    """The flat inputs the plan expects: dense tensors replicated, the required reshards done
    (a reshard keeps ``stop_gradient``, so ``no_grad`` still holds)."""
    flat = [t if cd.is_dist(t) else (cd.replicate_dense(t, plan.mesh) if cd.is_tensor(t) else t)
            for t in flatten_slots(slots)]
    if plan.reshards:
        grad_on = rt.grad_enabled()
        for i, pls in plan.reshards:
            flat[i] = reshard(flat[i], plan.mesh, pls, grad_on)
    return flat


@contextlib.contextmanager
def pylayer_only():
    """Inside the block, every differentiable dygraph dispatch takes the PyLayer route."""
    token = _ROUTES.set((False, _ROUTES.get()[1]))
    try:
        yield
    finally:
        _ROUTES.reset(token)


@contextlib.contextmanager
def own_routes():
    """Inside the block, no differentiable dygraph dispatch runs Paddle's op on the DistTensors:
    paddle-ext's native route or its PyLayer serves it (tests compare the routes)."""
    token = _ROUTES.set((_ROUTES.get()[0], False))
    try:
        yield
    finally:
        _ROUTES.reset(token)


def has_dist(slots) -> bool:
    """True when a slot holds a DistTensor (dygraph) or a dist value (``dist.to_static``)."""
    if cd.any_dist(slots):
        return True
    for s in slots:   # a list slot: one level down (as flatten_slots reads the slots)
        if isinstance(s, (list, tuple)) and cd.any_dist(s):
            return True
    return False


__all__ = ["Call", "DispatchError", "HandBack", "LocalCtx", "dispatch", "explain_call", "format_placements",
           "get_rule", "has_dist", "own_routes", "pylayer_only"]
