"""Asking paddle-ext's rule for a dispatched op, and the errors a dispatch raises.

* :func:`get_rule` -- the rule for an op (the built-in families plus ``spmd_rules.gaps``);
* :func:`infer` -- the rule's answer for the given input specs, or a :class:`DispatchError`
  that names the op, the inputs and the fix;
* :func:`explain_call` -- what a dispatch would do for some input specs (pure, no tensors);
* :func:`paddle_agrees` -- whether Paddle's own rule for the op gives the same layout;
* :class:`DispatchError` / :class:`HandBack` -- the call cannot run as asked / Paddle's own op
  serves it.
"""
from __future__ import annotations

from typing import Sequence

from ..errors import ShardingRuleError
from ..placements import DistSpec
from ..spmd.opcases import CASES
from ..spmd.lookup import get_spmd_rule, load_builtin_rules
from ..spmd.registry import REGISTRY, paddle_rules
from .grad import grad_plan

FIXES = ("register a rule with @paddle_ext.spmd.register_spmd_rule(op)",
         "reshard the inputs first with paddle.distributed.reshard",
         "or replicate explicitly: dist.reshard(x, mesh, [dist.Replicate()])")


class DispatchError(ShardingRuleError):
    """A dispatched op cannot run as asked: no rule, mixed meshes, or unservable placements."""


class HandBack(DispatchError):
    """paddle-ext cannot serve this call, and Paddle can: the caller runs Paddle's own op.

    Raised before anything runs (no reshard, no collective), the same way on every rank that
    sees the same tensors: a 0-D operand, a dynamic (-1) dimension inside ``dist.to_static``, or
    a rank outside the tensors' mesh (Paddle's design: such a rank computes nothing locally). A caller with no
    Paddle op to hand back to (:func:`paddle_ext.dispatch.spmd_op`) reports it as the
    :class:`DispatchError` it is."""


def fix_text(*which: int) -> str:
    """The fixes numbered ``which`` in :data:`FIXES` (all of them by default), as one sentence."""
    return "; ".join(FIXES[i] for i in (which or range(len(FIXES))))


def get_rule(op: str):
    """paddle-ext's rule for ``op`` (the built-in families plus ``spmd_rules.gaps``)."""
    rule = REGISTRY.rules.get(op)
    if rule is not None:
        return rule
    load_builtin_rules(gaps=True)
    try:
        return get_spmd_rule(op, "ext")
    except ShardingRuleError as exc:
        raise DispatchError(
            f"{op}: no paddle-ext SPMD rule, so it cannot run on DistTensors through paddle_ext.dispatch "
            f"({exc}); fix: {fix_text()}") from None


def infer(rule, op: str, spec_slots: Sequence, attrs: dict, specs: Sequence[DistSpec]):
    """``rule.infer(spec_slots, attrs)``; a rule that cannot serve the inputs raises a
    :class:`DispatchError` naming them and the fixes."""
    try:
        return rule.infer(spec_slots, attrs)
    except ShardingRuleError as exc:
        given = ", ".join(str(s) for s in specs)
        raise DispatchError(
            f"{op}: the rule cannot serve inputs {given} with attributes {attrs}: {exc}; fix: "
            f"{fix_text(1, 2)}, or register a rule that covers them (register_spmd_rule({op!r}, override=True))"
        ) from None


def explain_call(op: str, specs: Sequence[DistSpec], attrs: dict | None = None) -> str:
    """What dispatch would do for these input specs (pure: no Paddle tensors needed)."""
    res = get_rule(op).infer(list(specs), attrs or {})
    plan = grad_plan(res.inputs, res.outputs, None, op)
    lines = [str(res)] + [f"  reshard {r}" for r in res.reshards] + [f"  {plan}"]
    return "\n".join(lines)


BUILTIN = "paddle_ext.spmd_rules."   # where paddle-ext's own rule families live


def paddle_agrees(op: str, specs: Sequence[DistSpec], attrs: dict, result) -> bool:
    """True when ``op``'s rule is paddle-ext's built-in one, Paddle has a C++ rule of the same
    name (the validator's case for ``op`` names it and maps the attributes), and that rule takes
    ``specs`` as they are and answers the output placements of paddle-ext's ``result``: Paddle's
    own op then computes the same layout. False for the gap rules (Paddle has none), a rule a
    user registered, or a Paddle rule that refuses the call (pure: specs only)."""
    case = CASES.get(op)
    rule = REGISTRY.rules.get(op)
    if (case is None or case.paddle != op or case.paddle_args is None or rule is None
            or not getattr(rule.fn, "__module__", "").startswith(BUILTIN)):
        return False
    try:
        got = paddle_rules().rule(op).infer_positional(case.paddle_args(list(specs), attrs))
    except Exception:   # Paddle's rule refuses these inputs or cannot be asked: paddle-ext's route serves
        return False
    return (len(got.inputs) == len(specs) and len(got.outputs) == len(result.outputs)
            and all(tuple(g.placements) == tuple(s.placements) for g, s in zip(got.inputs, specs))
            and all(tuple(g.placements) == tuple(o.placements) for g, o in zip(got.outputs, result.outputs)))


__all__ = ["DispatchError", "FIXES", "HandBack", "explain_call", "fix_text", "get_rule", "infer", "paddle_agrees"]
