"""A dispatched call's local results as DistTensors: checked against the rule's claim, then
wrapped with the plan's placements and global shapes (dygraph).

The local shapes are checked on every call: a rule whose output shapes or placements do not fit
the function raises a :class:`~.rule_lookup.DispatchError` here instead of producing a DistTensor with
the wrong global shape. ``dtensor_from_local`` (on the plan's owned C++ mesh) wraps an output it
sizes right -- every sharded dim splits evenly -- and :func:`~paddle_ext.compat.ports.dispatch.make_dist`
the others (exact global shape for uneven shards).
"""
from __future__ import annotations

from ..compat.ports import dispatch as cd
from .call_plan import Plan
from .rule_lookup import DispatchError


def wrap_checked(from_local, op: str, plan: Plan, out):
    """The local result(s) ``out`` of ``op`` as DistTensors (a tuple when ``out`` is a tuple or
    list), after checking this rank's local shapes against the rule's claim."""
    if plan.single and not isinstance(out, (tuple, list)) and out.shape == plan.out_local[0]:
        return from_local(out, plan.cmesh, plan.out_paddle[0])   # checked, wrapped
    multi = isinstance(out, (tuple, list))
    out = tuple(out) if multi else (out,)
    check_local(op, plan, out)
    wrapped = wrap(plan, out)
    return tuple(wrapped) if multi else wrapped[0]


def check_local(op: str, plan: Plan, outs_local) -> None:
    """Raise a :class:`DispatchError` unless ``outs_local`` has the count and local shapes the rule claims."""
    if len(outs_local) != len(plan.out_local):
        raise DispatchError(f"{op}: the local function returned {len(outs_local)} tensors but the rule claims "
                            f"{len(plan.out_local)} outputs ({plan.result}); make them agree")
    for k, (o, want) in enumerate(zip(outs_local, plan.out_local)):
        if o.shape != want:
            spec = plan.result.outputs[k]
            raise DispatchError(
                f"{op}: output {k} has local shape {list(o.shape)} on mesh coordinate {list(plan.coord)}, but the "
                f"rule claims {spec} (local {want}); the rule's output shape or placements are wrong for this "
                f"function -- fix the rule (its out shapes) or the function")


def wrap(plan: Plan, outs) -> list:
    """Checked local outputs as DistTensors with the plan's placements and global shapes."""
    from_local = cd.dygraph_runtime().from_local
    return [from_local(o, plan.cmesh, pls) if fast else cd.make_dist(o, plan.mesh, pls, spec.shape)
            for o, spec, pls, fast in zip(outs, plan.result.outputs, plan.out_paddle, plan.out_fast)]


__all__ = ["check_local", "wrap", "wrap_checked"]
