"""The dispatcher inside ``dist.to_static`` (PIR): plan, reshard, run -- no cache, no fast path.

A program is traced once, so each call plans afresh (:func:`~.call_plan.make_plan`) and lowers to
``dtensor_to_local(x, mesh, grad_placements)`` -> local op -> ``dtensor_from_local``: the
placements given to ``dtensor_to_local`` become the gradient's placements in backward, the hint
that gives a replicated input consumed locally its ``Partial(sum)`` gradient. Required input
reshards are Paddle's ``dist.reshard`` (lowered by the static reshard pass).

An output the rule claims ``Partial`` would get a wrong gradient from PIR's
``dtensor_from_local`` backward (measured: step-2 loss 20.7 vs dense 59.6), so here the rule is
asked again with the partial-producing mesh dims replicated -- an explicit, logged reshard
(:func:`without_partial_outputs`).
"""
from __future__ import annotations

import logging
from typing import Callable, Sequence

from ..compat.ports import dispatch as cd
from ..placements import DistSpec, Partial, Replicate
from ..spmd.result import make_result
from .audit_report import record_dispatch
from .call_plan import make_plan
from .rule_lookup import DispatchError, infer
from .slots import flatten_slots, restructure

log = logging.getLogger("paddle_ext.dispatch")


def dispatch_static(op: str, slots: Sequence, attrs: dict, run_local: Callable):
    """:func:`~paddle_ext.dispatch.dispatch` while ``dist.to_static`` traces."""
    if attrs:
        attrs = {k: tuple(v) if isinstance(v, list) else v for k, v in attrs.items()}
    flat = flatten_slots(slots)
    dist_ts = [t for t in flat if cd.is_dist(t)]
    if not dist_ts:
        return run_local(list(slots), None)
    plan = make_plan(op, list(slots), attrs, flat, cd.mesh_of(dist_ts[0]), adjust=without_partial_outputs)
    if len(dist_ts) != len(flat):
        flat = [t if cd.is_dist(t) else (cd.replicate_dense(t, plan.mesh) if cd.is_tensor(t) else t) for t in flat]
    for i, pls in plan.reshards:
        flat[i] = cd.pir_reshard(flat[i], plan.mesh, pls)
    res = plan.result
    gp = plan.grad_plan(tuple([True] * len(res.outputs)))
    if gp.partialize:
        raise DispatchError(
            f"{op}: inside dist.to_static an op whose replicated input feeds both split and replicated "
            f"outputs ({res}) has no gradient hint in PIR; reshard the input to Shard first or call the op in dygraph")
    lin = [cd.static_to_local(x, plan.mesh, g.placements) for x, g in zip(flat, gp.input_grads)]
    out = run_local(restructure(slots, lin), plan.ctx)
    multi = isinstance(out, (tuple, list))
    out = tuple(out) if multi else (out,)
    if len(out) != len(res.outputs):
        raise DispatchError(f"{op}: the local function returned {len(out)} tensors but the rule claims "
                            f"{len(res.outputs)} outputs ({res})")
    wrapped = [cd.static_from_local(o, plan.mesh, spec.placements, spec.shape) for o, spec in zip(out, res.outputs)]
    record_dispatch(op)
    return tuple(wrapped) if multi else wrapped[0]


def without_partial_outputs(rule, op, slots, attrs, specs, result):
    """``(result, notes)``: the rule's answer re-inferred with the mesh dims that give
    ``Partial`` outputs replicated on the inputs (unchanged when no output is ``Partial``)."""
    if not any(isinstance(p, Partial) for o in result.outputs for p in o.placements):
        return result, ()
    given = list(specs)
    cur = result
    for _ in range(len(specs[0].mesh_shape) + 1):
        bad = {m for o in cur.outputs for m, p in enumerate(o.placements) if isinstance(p, Partial)}
        if not bad:
            break
        given = [DistSpec(s.shape, s.mesh_shape,
                          [Replicate() if m in bad else p for m, p in enumerate(s.placements)]) for s in given]
        cur = infer(rule, op, restructure(slots, given), attrs, given)
    else:
        raise DispatchError(f"{op}: inside dist.to_static the rule still claims a Partial output ({cur}); "
                            f"PIR's dtensor_from_local backward is wrong for Partial outputs -- replicate the inputs")
    note = f"{op}: to_static replicates mesh dims that would give Partial outputs: {cur}"
    log.info(note)
    return make_result(op, specs, cur.inputs, cur.outputs, cur.rule), (note,)


__all__ = ["dispatch_static", "without_partial_outputs"]
