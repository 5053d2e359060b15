"""Rules written for one mesh dim, expanded to any mesh.

An author lists the valid layouts for a single mesh dim as rows ``(outputs, inputs)`` of
placements (text or values). The engine adds the all-Replicate row, and for every mesh dim
independently picks the row matching the inputs' placements on that mesh dim; when none
matches, the row whose required input changes are cheapest (slices before gathers before
all-reduces; the author's order breaks ties). Two mesh dims picking ``S(d)`` for one tensor dim
co-shard it (the lower mesh dim is the outer split): a row valid for a tensor is valid for each
of its blocks. A replicated input meets a row's ``P(avg|max|min)`` as it is when another input
on that mesh dim holds that partial: a replicated tensor is its own average, maximum and minimum
(``P(sum)`` is not: a replicated member is made partial locally, kept on coordinate 0).

>>> from paddle_ext.placements import DistSpec
>>> rows = [("S(0)", "S(0), S(0)"), ("S(1)", "S(1), S(1)"), ("P(sum)", "P(sum), P(sum)")]
>>> x = DistSpec((4, 6), (2, 2), "[S(0),P(sum)]"); y = DistSpec((4, 6), (2, 2), "[R,P(sum)]")
>>> str(infer_onedim(rows, [x, y], op="add"))
'add: [S(0),P(sum)],[R,P(sum)] -> [S(0),P(sum)],[S(0),P(sum)] = [S(0),P(sum)]'
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..errors import ShardingRuleError
from ..placements import DistSpec, Partial, Placement, Replicate, Shard, parse_placements
from .einsum import check_same_mesh
from .result import RuleResult, make_result, transition_cost


@dataclass(frozen=True)
class OneDimRule:
    """Normalised rows: ``((out placements...), (in placements...))``, all-Replicate last."""

    rows: tuple
    n_inputs: int
    n_outputs: int


def _row_text(row) -> str:
    outs, ins = row
    return f"({', '.join(map(str, outs))}) <- ({', '.join(map(str, ins))})"


def normalize_rows(rows, n_inputs: int, n_outputs: int, op: str = "rule") -> OneDimRule:
    """Parse and check rows; add the all-Replicate row (an author must not write it)."""
    if isinstance(rows, OneDimRule):
        return rows
    out = []
    rep = (tuple([Replicate()] * n_outputs), tuple([Replicate()] * n_inputs))
    for k, row in enumerate(rows):
        try:
            outs, ins = row
        except (TypeError, ValueError):
            raise ShardingRuleError(
                f"{op}: row {k} {row!r} is not a pair (outputs, inputs); write e.g. ('S(0)', 'S(0), R')") from None
        outs, ins = parse_placements(outs), parse_placements(ins)
        if len(outs) != n_outputs or len(ins) != n_inputs:
            raise ShardingRuleError(
                f"{op}: row {k} {_row_text((outs, ins))} has {len(outs)} output and {len(ins)} input placements, "
                f"but the op has {n_outputs} outputs and {n_inputs} inputs; give one placement per tensor")
        if (outs, ins) == rep:
            raise ShardingRuleError(f"{op}: row {k} is the all-Replicate row, which the engine adds itself; drop it")
        out.append((outs, ins))
    out.append(rep)
    return OneDimRule(tuple(out), n_inputs, n_outputs)


def _fits(p: Placement, spec: DistSpec) -> bool:
    return not isinstance(p, Shard) or p.dim < spec.ndim


def _as_met(have: tuple, row_in: tuple) -> tuple:
    """``row_in`` with each ``P(avg|max|min)`` a replicated input already meets (see the module doc)."""
    return tuple(a if isinstance(b, Partial) and b.op != "sum" and isinstance(a, Replicate) and b in have else b
                 for a, b in zip(have, row_in))


def infer_onedim(rows, specs: Sequence[DistSpec], op: str = "rule", out_shapes=None) -> RuleResult:
    """Expand one-mesh-dim rows over the specs' mesh (see the module docstring)."""
    mesh = check_same_mesh(op, specs)
    rule = normalize_rows(rows, len(specs), len(out_shapes) if out_shapes is not None else 1, op)
    if len(specs) != rule.n_inputs:
        raise ShardingRuleError(f"{op}: the rule has {rule.n_inputs} inputs but {len(specs)} specs were given")
    out_shapes = list(out_shapes) if out_shapes is not None else [specs[0].shape]
    req = [list(s.placements) for s in specs]
    outs = [[Replicate()] * len(mesh) for _ in out_shapes]
    for m in range(len(mesh)):
        have = tuple(s.placements[m] for s in specs)
        best, best_cost = None, None
        for row_out, row_in in rule.rows:
            if not all(_fits(p, s) for p, s in zip(row_in, specs)):
                continue
            row_in = _as_met(have, row_in)
            cost = sum(transition_cost(a, b) for a, b in zip(have, row_in))
            if best is None or cost < best_cost:
                best, best_cost = (row_out, row_in), cost
            if cost == 0:
                break
        row_out, row_in = best
        for i, p in enumerate(row_in):
            req[i][m] = p
        for k, p in enumerate(row_out):
            outs[k][m] = p
    required = [DistSpec(s.shape, mesh, r) for s, r in zip(specs, req)]
    outputs = [DistSpec(shape, mesh, o) for shape, o in zip(out_shapes, outs)]
    return make_result(op, specs, required, outputs, "; ".join(_row_text(r) for r in rule.rows))


def infer_onedim_reverse(rows, specs: Sequence[DistSpec], out_specs: Sequence[DistSpec],
                         op: str = "rule") -> RuleResult:
    """Input layouts from output layouts: per mesh dim, the row matching the most requested
    outputs (when the outputs disagree, as split pieces may: a sharded row before the replicated
    one, then the author's order).

    >>> rows = [("S(0), S(0)", "S(0)"), ("S(1), S(1)", "S(1)")]
    >>> x = DistSpec((4, 6), (2,), "[R]")
    >>> outs = [DistSpec((4, 2), (2,), "[R]"), DistSpec((4, 4), (2,), "[S(0)]")]
    >>> str(infer_onedim_reverse(rows, [x], outs, op="split"))
    'split: [R] -> [S(0)] = [R],[S(0)]'
    """
    mesh = check_same_mesh(op, list(specs) + list(out_specs))
    rule = normalize_rows(rows, len(specs), len(out_specs), op)
    req = [[Replicate()] * len(mesh) for _ in specs]
    for m in range(len(mesh)):
        have = tuple(s.placements[m] for s in out_specs)
        best, best_key = None, None
        for k, (row_out, row_in) in enumerate(rule.rows):
            hits = sum(a == b for a, b in zip(row_out, have))
            if not hits or not all(_fits(p, s) for p, s in zip(row_in, specs)):
                continue
            key = (-hits, all(isinstance(p, Replicate) for p in row_out), k)
            if best_key is None or key < best_key:
                best, best_key = row_in, key
        for i, p in enumerate(best or ()):
            req[i][m] = p
    required = [DistSpec(s.shape, mesh, r) for s, r in zip(specs, req)]
    return make_result(op, specs, required, out_specs, "; ".join(_row_text(r) for r in rule.rows))


__all__ = ["OneDimRule", "infer_onedim", "infer_onedim_reverse", "normalize_rows"]
