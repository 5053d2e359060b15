"""The einsum engine: sharding merge, conflict resolution, partial outputs, reshards.

Laws, for a notation bound to shapes and one :class:`DistSpec` per input:

1. **Merge.** Every input dim proposes the mesh dims sharding it for its factor (a broadcast
   size-1 dim and the literal ``1`` propose nothing). Per factor, proposals are ordered longer
   first, then by more shards, then lexicographically, and concatenated without repeats -- a
   replicated proposal never overrides a sharded one.
2. **Replicate / even.** ``replicate`` factors drop every mesh dim; ``even`` factors drop trailing
   mesh dims until their size divides evenly (``avg`` reductions are ``even``).
3. **One mesh dim, one factor.** When several factors claim a mesh dim, the default policy
   keeps a factor that reaches an output over a reduction factor (no partial result), then the
   larger factor, then the first in the notation. ``merge: follow`` instead keeps every claim of
   the most-sharded input (ties: the first input) and lets the others fill free mesh dims.
4. **Inputs** take their factors' mesh dims. A Partial input is kept only on a mesh dim no
   factor uses and only as the notation's ``partial(...)`` clause allows (law 6); otherwise it
   shows up as a required reshard.
5. **Outputs** take their factors' mesh dims; a reduction factor that stays sharded makes the
   output ``Partial(op)`` on that mesh dim.
6. **Partial inputs pass** where the ``partial(ops): groups`` clause says so: on a free mesh
   dim where every Partial input has the same reduce op, listed in the clause, the group holding
   most of them (the first on a tie) keeps them (for ``sum`` the whole group is partial, its
   replicated members made partial locally; for ``avg``/``max``/``min`` a replicated member is
   its own average) and its outputs are ``Partial(op)``; partial inputs outside it are reduced.

>>> from paddle_ext.placements import DistSpec
>>> r = infer_einsum("m k, k n -> m n", [DistSpec((4, 8), (2,), "[S(1)]"), DistSpec((8, 6), (2,), "[R]")], op="matmul")
>>> str(r)
'matmul: [S(1)],[R] -> [S(1)],[S(0)] = [P(sum)]'
>>> [str(x) for x in r.reshards]
['in1: [R] -> [S(0)]']
>>> str(infer_einsum("m k, k n -> m n | partial(sum avg): 0, 1",
...                  [DistSpec((4, 8), (2,), "[R]"), DistSpec((8, 6), (2,), "[P(sum)]")], op="matmul"))
'matmul: [R],[P(sum)] = [P(sum)]'
"""
from __future__ import annotations

import math
from typing import Sequence

from ..errors import ShardingRuleError
from ..placements import DistSpec, Partial, Replicate, format_placements
from .notation import ONE, Binding, Notation, as_notation
from .result import RuleResult, make_result, spec_from_mapping


def check_same_mesh(op: str, specs: Sequence[DistSpec]) -> tuple[int, ...]:
    if not specs:
        raise ShardingRuleError(f"{op}: no tensor spec given; pass one DistSpec per tensor input")
    mesh = specs[0].mesh_shape
    for i, s in enumerate(specs):
        if not isinstance(s, DistSpec):
            raise ShardingRuleError(f"{op}: input {i} is {type(s).__name__}, not a DistSpec; build it with "
                                    f"DistSpec(shape, mesh_shape, placements)")
        if s.mesh_shape != mesh:
            raise ShardingRuleError(
                f"{op}: input {i} is on mesh {list(s.mesh_shape)} but input 0 on {list(mesh)}; "
                f"every tensor of one op must be on the same mesh (reshard across meshes first)")
    return mesh


def _shards(mdims: Sequence[int], mesh: Sequence[int]) -> int:
    return math.prod(mesh[m] for m in mdims)


def proposals(binding: Binding, specs: Sequence[DistSpec]) -> list[tuple[int, int, str, tuple[int, ...]]]:
    """``(input, dim, factor, mesh_dims)`` for every sharded, non-broadcast input dim."""
    out = []
    for i, (facts, spec) in enumerate(zip(binding.inputs, specs)):
        for d, f in enumerate(facts):
            if f == ONE or (i, d) in binding.broadcast:
                continue
            mdims = spec.shard_mesh_dims(d)
            if mdims:
                out.append((i, d, f, mdims))
    return out


def merge(notation: Notation, binding: Binding, specs: Sequence[DistSpec],
          mesh: Sequence[int], votes: bool = False) -> dict[str, tuple[int, ...]]:
    """Factor -> mesh dims after laws 1-3 of the module docstring. With ``votes`` (reverse
    inference, ``specs`` being the requested outputs), law 3 first keeps the factor more of the
    specs shard on that mesh dim: the answer then differs from the fewest requested outputs."""
    props = proposals(binding, specs)
    count = {}
    for _, _, f, mdims in props:
        for m in mdims:
            count[f, m] = count.get((f, m), 0) + 1 if votes else 0
    order = {f: k for k, f in enumerate(_factor_order(binding))}
    if notation.merge == "follow":
        merged = _merge_follow(props, specs, mesh)
    else:
        by_factor: dict[str, list[tuple[int, ...]]] = {}
        for _, _, f, mdims in props:
            by_factor.setdefault(f, []).append(mdims)
        merged = {}
        for f, sugg in by_factor.items():
            sugg.sort(key=lambda s: (-len(s), -_shards(s, mesh), s))
            seq: list[int] = []
            for s in sugg:
                seq.extend(m for m in s if m not in seq)
            merged[f] = seq
    for f in list(merged):
        if f in notation.replicate:
            merged[f] = []
        elif f in notation.even:
            seq = merged[f]
            while seq and binding.sizes[f] % _shards(seq, mesh):
                seq.pop()
    # law 3: one factor per mesh dim
    reduced = notation.reduction_ops()
    claim: dict[int, list[str]] = {}
    for f, seq in merged.items():
        for m in seq:
            claim.setdefault(m, []).append(f)
    for m, fs in claim.items():
        if len(fs) < 2:
            continue
        if notation.merge == "follow":
            continue  # resolved while merging
        win = min(fs, key=lambda f: (f in reduced, -count.get((f, m), 0), -binding.sizes[f], order[f]))
        for f in fs:
            if f != win:
                merged[f] = [x for x in merged[f] if x != m]
    return {f: tuple(seq) for f, seq in merged.items() if seq}


def _factor_order(binding: Binding) -> list[str]:
    seen: dict[str, None] = {}
    for facts in binding.inputs + binding.outputs:
        for f in facts:
            seen.setdefault(f, None)
    return list(seen)


def _merge_follow(props, specs, mesh) -> dict[str, list[int]]:
    def rank(i):
        s = specs[i]
        co = sum(1 for d in range(s.ndim) if len(s.shard_mesh_dims(d)) > 1)
        used = {m for d in range(s.ndim) for m in s.shard_mesh_dims(d)}
        return (-co, -_shards(sorted(used), mesh), -s.ndim, i)

    merged: dict[str, list[int]] = {}
    used: set[int] = set()
    for i in sorted(range(len(specs)), key=rank):
        for pi, _, f, mdims in props:
            if pi != i:
                continue
            seq = merged.setdefault(f, [])
            for m in mdims:
                if m not in used:
                    seq.append(m)
                    used.add(m)
    return merged


def layout(binding_facts, shape, merged, broadcast_dims=()) -> list[list[int]]:
    """Per-dim mesh dims of a tensor whose dims carry ``binding_facts``."""
    return [[] if (f == ONE or d in broadcast_dims) else list(merged.get(f, ()))
            for d, f in enumerate(binding_facts)]


def passing_partials(notation: Notation, specs: Sequence[DistSpec], used_mesh_dims,
                     n_outputs: int) -> tuple[list[dict], list[dict]]:
    """Law 6: ``(per input {mesh dim: op}, per output {mesh dim: op})`` of the Partial
    placements the ``partial(...)`` clauses let through on the mesh dims outside ``used_mesh_dims``.

    >>> from paddle_ext.spmd.notation import parse_notation
    >>> n = parse_notation("..., ... -> ... | partial(sum): 0 1")
    >>> passing_partials(n, [DistSpec((4,), (2,), "[P(sum)]"), DistSpec((4,), (2,), "[R]")], set(), 1)
    ([{0: 'sum'}, {0: 'sum'}], [{0: 'sum'}])
    """
    ins: list[dict] = [{} for _ in specs]
    outs: list[dict] = [{} for _ in range(n_outputs)]
    if not notation.partial:
        return ins, outs
    for m in range(len(specs[0].mesh_shape) if specs else 0):
        if m in used_mesh_dims:
            continue
        here = {i: s.placements[m].op for i, s in enumerate(specs) if isinstance(s.placements[m], Partial)}
        if not here or len(set(here.values())) != 1:
            continue
        op = next(iter(here.values()))
        best = None
        for group, to in notation.partial_groups(op):
            kept = set(here) & set(group)
            if op == "sum" and any(not isinstance(specs[i].placements[m], (Partial, Replicate)) for i in group):
                continue
            if kept and (best is None or len(kept) > len(best[0])):
                best = (kept, group if op == "sum" else tuple(sorted(kept)), to)
        if best is None:
            continue
        for i in best[1]:
            ins[i][m] = op
        for k in (best[2] or range(n_outputs)):
            outs[k][m] = op
    return ins, outs


def infer_einsum(notation, specs: Sequence[DistSpec], op: str = "einsum") -> RuleResult:
    """Forward inference for an einsum-like rule (laws 1-6)."""
    n = as_notation(notation)
    mesh = check_same_mesh(op, specs)
    b = n.bind([s.shape for s in specs], op)
    merged = merge(n, b, specs, mesh)
    used = {m for mdims in merged.values() for m in mdims}
    in_partial, out_partial = passing_partials(n, specs, used, len(b.outputs))
    required = []
    for i, (facts, spec) in enumerate(zip(b.inputs, specs)):
        bdims = {d for (j, d) in b.broadcast if j == i}
        required.append(spec_from_mapping(spec.shape, mesh, layout(facts, spec.shape, merged, bdims), in_partial[i]))
    reduced = n.reduction_ops()
    partial = {m: reduced[f] for f, mdims in merged.items() if f in reduced for m in mdims}
    outputs = [spec_from_mapping(shape, mesh, layout(facts, shape, merged), {**partial, **out_partial[k]})
               for k, (facts, shape) in enumerate(zip(b.outputs, b.output_shapes))]
    return make_result(op, specs, required, outputs, str(n))


def infer_einsum_reverse(notation, specs: Sequence[DistSpec], out_specs: Sequence[DistSpec],
                         op: str = "einsum") -> RuleResult:
    """Backward (reverse) inference: input layouts from the output layouts alone.

    Factors take the mesh dims of the outputs (merged as in forward, except that when two factors
    claim one mesh dim the one more outputs ask for wins); reduction factors, being absent from
    the outputs, come back replicated. The outputs are returned as given.
    """
    n = as_notation(notation)
    mesh = check_same_mesh(op, list(specs) + list(out_specs))
    b = n.bind([s.shape for s in specs], op)
    if len(out_specs) != len(b.outputs):
        raise ShardingRuleError(f"{op}: notation {n.text!r} has {len(b.outputs)} outputs but "
                                f"{len(out_specs)} output specs were given; pass one per output")
    out_binding = Binding(b.outputs, (), b.sizes, frozenset())
    merged = merge(n, out_binding, out_specs, mesh, votes=True)
    required = []
    for i, (facts, spec) in enumerate(zip(b.inputs, specs)):
        bdims = {d for (j, d) in b.broadcast if j == i}
        required.append(spec_from_mapping(spec.shape, mesh, layout(facts, spec.shape, merged, bdims)))
    res = make_result(op, specs, required, out_specs, str(n))
    return res


def infer_einsum_grad(notation, specs: Sequence[DistSpec], out_grads: Sequence[DistSpec],
                      op: str = "einsum") -> RuleResult:
    """Gradient inference from the same notation: ``inputs, out_grads -> input grads``.

    One merge runs over the inputs and the output gradients. Each input gradient takes its
    input's layout, and is ``Partial(sum)`` on the mesh dims of factors it lacks (contracted or
    broadcast factors sum in the backward pass). Only sum/avg reductions have such a gradient
    rule; ``max``/``min`` reduction factors are replicated.
    """
    n = as_notation(notation)
    specs, out_grads = list(specs), list(out_grads)
    mesh = check_same_mesh(op, specs + out_grads)
    b = n.bind([s.shape for s in specs], op)
    joint = Binding(b.inputs + b.outputs, (), b.sizes, b.broadcast)
    rep = frozenset(f for f, o in n.reduce if o in ("max", "min")) | n.replicate
    jn = Notation(n.text, n.inputs + n.outputs, (), (), rep, n.even, n.merge)  # no partial clause: grads are R/S
    merged = merge(jn, joint, specs + out_grads, mesh)
    required, grads = [], []
    for i, (facts, spec) in enumerate(zip(joint.inputs, specs + out_grads)):
        bdims = {d for (j, d) in b.broadcast if j == i}
        required.append(spec_from_mapping(spec.shape, mesh, layout(facts, spec.shape, merged, bdims)))
    for i, (facts, spec) in enumerate(zip(b.inputs, specs)):
        bdims = {d for (j, d) in b.broadcast if j == i}
        mine = {f for d, f in enumerate(facts) if d not in bdims}
        partial = {m: "sum" for f, mdims in merged.items() if f not in mine for m in mdims}
        grads.append(spec_from_mapping(spec.shape, mesh, layout(facts, spec.shape, merged, bdims), partial))
    return make_result(op, specs + out_grads, required, grads, str(n))


def explain(result: RuleResult) -> str:
    """Multi-line text: the decision line, then one line per required reshard."""
    lines = [str(result)]
    for r in result.reshards:
        lines.append(f"  reshard {r}")
    if not result.reshards:
        lines.append("  no reshard needed")
    for k, o in enumerate(result.outputs):
        if any(isinstance(p, Partial) for p in o.placements):
            lines.append(f"  out{k} {format_placements(o.placements)} is partial: reduce it "
                         f"(all-reduce or reduce-scatter) before reading values")
    return "\n".join(lines)


__all__ = ["check_same_mesh", "explain", "infer_einsum", "infer_einsum_grad", "infer_einsum_reverse",
           "merge", "passing_partials", "proposals"]
