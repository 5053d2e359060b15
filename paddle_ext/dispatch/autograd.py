"""The differentiable pieces of dygraph dispatch that paddle-ext writes itself: two PyLayers.

* :func:`dispatch_function` -- forward: the local op on the shards; backward: the local VJP
  with the gradients placed as the op's :class:`~.grad.GradPlan` says (a replicated output
  gradient kept on one coordinate, ``P(avg)`` scaling, uneven shards: what Paddle's own
  ``dtensor_to_local``/``dtensor_from_local`` autograd cannot express);
* :func:`reshard` -- a required input reshard whose backward reshards the gradient back to
  the input's layout, a Partial dim given a Replicate gradient (paddle-ext's executor both ways;
  the PyLayer is the reshard's own, :func:`paddle_ext.reshard.dygraph.differentiable`).

Which route a call takes -- no autograd, Paddle's native autograd or this PyLayer -- is decided
in one place, :func:`~.core.dispatch`.
"""
from __future__ import annotations

import functools

from ..compat.ports import dispatch as cd
from ..compat.ports.convert import to_paddle_placements
from ..compat.ports.internals import local_value
from ..placements import DistSpec
from ..reshard.dygraph import differentiable
from ..reshard.fast import reshard as ext_reshard
from .outputs import check_local, wrap
from .call_plan import Plan, fits_from_local
from .slots import restructure


@functools.cache
def dispatch_function():
    """The PyLayer class ``DispatchFunction``; ``apply(call, *flat_inputs)``, where ``call`` is
    a :class:`~.core.Call` (made once: it needs Paddle)."""
    paddle = cd._paddle()

    class DispatchFunction(paddle.autograd.PyLayer):
        """Forward: local op on the shards. Backward: local VJP, gradients placed by the GradPlan."""

        @staticmethod
        def forward(ctx, call, *xs):
            plan = call.plan
            need = [(not x.stop_gradient) and cd.is_float(x) for x in xs]
            with paddle.enable_grad():
                lin = []
                for x, n in zip(xs, need):
                    loc = local_value(x)
                    if n:
                        loc = loc.detach()
                        loc.stop_gradient = False
                    lin.append(loc)
                out = call.run_local(restructure(call.slots, lin), plan.ctx)
            multi = isinstance(out, (tuple, list))
            out = tuple(out) if multi else (out,)
            check_local(call.op, plan, out)
            diff = tuple(cd.is_float(o) and not o.stop_gradient for o in out)
            ctx.gplan = plan.grad_plan(diff) if any(need) else None
            wrapped = wrap(plan, [o.detach() for o in out])
            nondiff = [w for w, d in zip(wrapped, diff) if not d]
            if nondiff:
                ctx.mark_non_differentiable(*nondiff)
            ctx.plan, ctx.lin, ctx.need, ctx.out, ctx.diff = plan, lin, need, out, diff
            return tuple(wrapped) if multi else wrapped[0]

        @staticmethod
        def backward(ctx, *dys):
            plan, gp = ctx.plan, ctx.gplan
            outs, grads_out = [], []
            for k, dy in enumerate(dys):
                if not ctx.diff[k] or dy is None:
                    continue
                want = gp.output_grads[k]
                if dy.is_dist():
                    have = cd.spec_and_mesh(dy)[0]
                    if have.placements != want.placements:
                        dy = reshard_values(dy, plan.mesh, want.placements)
                    loc = local_value(dy)
                else:
                    loc = dy
                if gp.output_scale[k] != 1.0:
                    loc = loc * gp.output_scale[k]
                if any(kk == k and plan.coord[m] != 0 for kk, m in gp.partialize):
                    loc = paddle.zeros_like(loc)
                outs.append(ctx.out[k])
                grads_out.append(loc)
            ins = [x for x, n in zip(ctx.lin, ctx.need) if n]
            got = paddle.grad(outs, ins, grads_out, allow_unused=True) if outs and ins else [None] * len(ins)
            result, j = [], 0
            for i, n in enumerate(ctx.need):
                if not n:
                    result.append(None)
                    continue
                g = got[j]
                j += 1
                if g is None:
                    g = paddle.zeros_like(ctx.lin[i])
                result.append(_wrap_grad(plan, g, gp.input_grads[i]))
            return tuple(result)

    return DispatchFunction


def _wrap_grad(plan: Plan, g, spec: DistSpec):
    if fits_from_local(spec, plan.coord):
        return cd.dygraph_runtime().from_local(g, plan.mesh, to_paddle_placements(spec.placements))
    return cd.make_dist(g, plan.mesh, spec.placements, spec.shape)


def reshard_values(t, mesh, placements):
    """Non-differentiable reshard of dygraph ``t`` with paddle-ext's executor."""
    with cd._paddle().no_grad():
        return ext_reshard(t, cd.python_mesh(mesh), to_paddle_placements(placements), check=False)


def reshard(t, mesh, placements, grad_enabled: bool):
    """``t`` resharded to ``placements`` on ``mesh``; differentiable when ``t`` requires grad
    and grad is on (``grad_enabled``)."""
    if t.stop_gradient or not grad_enabled:
        return reshard_values(t, mesh, placements)
    return differentiable(t, mesh, lambda x, mesh: reshard_values(x, mesh, placements),
                          back=reshard_values)


__all__ = ["dispatch_function", "reshard", "reshard_values"]
