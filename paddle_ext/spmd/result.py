"""What a rule returns: required input specs, output specs and the reshards between them.

A rule never rewrites an input placement silently: when the op needs an input laid out
differently from how it arrives, :class:`RuleResult` lists a :class:`Reshard` (input index,
from, to), and :meth:`Reshard.collectives` names the communication each mesh dim needs.

>>> from paddle_ext.placements import DistSpec
>>> r = Reshard(1, DistSpec((8, 6), (2,), "[R]"), DistSpec((8, 6), (2,), "[S(0)]"))
>>> str(r), r.collectives()
('in1: [R] -> [S(0)]', ('slice@0',))
>>> str(Reshard(0, DistSpec((4, 8), (2, 2), "[P(sum),S(1)]"), DistSpec((4, 8), (2, 2), "[R,S(1)]")))
'in0: [P(sum),S(1)] -> [R,S(1)] (all-reduce(sum)@0)'
"""
from __future__ import annotations

from dataclasses import dataclass

from ..placements import DistSpec, Partial, Placement, Replicate, Shard, format_placements


def transition(src: Placement, dst: Placement) -> str | None:
    """The collective that turns ``src`` into ``dst`` on one mesh dim (None when equal)."""
    if src == dst:
        return None
    if isinstance(src, Replicate):
        return "slice" if isinstance(dst, Shard) else "local-partial"
    if isinstance(src, Shard):
        if isinstance(dst, Replicate):
            return "all-gather"
        if isinstance(dst, Shard):
            return "all-to-all"
        return "all-gather+local-partial"
    if isinstance(dst, Replicate):
        return f"all-reduce({src.op})"
    if isinstance(dst, Shard):
        return f"reduce-scatter({src.op})"
    return f"all-reduce({src.op})+local-partial"


_COST = {None: 0.0, "slice": 0.1, "local-partial": 0.1, "all-gather": 2.0, "all-to-all": 2.5,
         "all-gather+local-partial": 2.1}


def transition_cost(src: Placement, dst: Placement) -> float:
    """A coarse relative cost of :func:`transition` (slices are nearly free, all-reduce dearest)."""
    t = transition(src, dst)
    if t in _COST:
        return _COST[t]
    return 3.5 if t.startswith("reduce-scatter") else 3.0


@dataclass(frozen=True)
class Reshard:
    """Input ``index`` must go from ``src`` to ``dst`` before the op runs."""

    index: int
    src: DistSpec
    dst: DistSpec

    def collectives(self) -> tuple[str, ...]:
        out = []
        for m, (a, b) in enumerate(zip(self.src.placements, self.dst.placements)):
            t = transition(a, b)
            if t:
                out.append(f"{t}@{m}")
        return tuple(out)

    def __str__(self) -> str:
        text = f"in{self.index}: {format_placements(self.src.placements)} -> {format_placements(self.dst.placements)}"
        comm = [c for c in self.collectives() if not c.startswith(("slice", "local"))]
        return text + (f" ({', '.join(comm)})" if comm else "")


@dataclass(frozen=True)
class RuleResult:
    """A rule's decision: inputs as required, outputs, and the reshards from given to required.

    ``str`` gives the one-line log form ``op: given -> required = outputs``.
    """

    op: str
    inputs: tuple[DistSpec, ...]
    outputs: tuple[DistSpec, ...]
    reshards: tuple[Reshard, ...] = ()
    given: tuple[DistSpec, ...] = ()
    rule: str = ""

    def __str__(self) -> str:
        req = ",".join(format_placements(s.placements) for s in self.inputs)
        outs = ",".join(format_placements(s.placements) for s in self.outputs)
        if self.reshards:
            giv = ",".join(format_placements(s.placements) for s in self.given)
            return f"{self.op}: {giv} -> {req} = {outs}"
        return f"{self.op}: {req} = {outs}"

    @property
    def needs_reshard(self) -> bool:
        return bool(self.reshards)


def make_result(op: str, given, required, outputs, rule: str = "") -> RuleResult:
    """Build a :class:`RuleResult`, listing a :class:`Reshard` wherever given != required."""
    given, required = tuple(given), tuple(required)
    reshards = tuple(Reshard(i, g, r) for i, (g, r) in enumerate(zip(given, required))
                     if g.placements != r.placements)
    return RuleResult(op, required, tuple(outputs), reshards, given, rule)


def spec_from_mapping(shape, mesh_shape, mapping, partial: dict | None = None) -> DistSpec:
    """A :class:`DistSpec` from per-dim mesh-dim lists plus ``{mesh_dim: reduce_op}`` partials."""
    pls: list[Placement] = [Replicate()] * len(mesh_shape)
    for d, mdims in enumerate(mapping):
        for m in mdims:
            pls[m] = Shard(d)
    for m, op in (partial or {}).items():
        pls[m] = Partial(op)
    return DistSpec(shape, mesh_shape, pls)


def with_shapes(res: RuleResult, out_shapes) -> RuleResult:
    """``res`` with its output specs given real shapes (Paddle's rules answer outputs without one)."""
    outs = tuple(DistSpec(tuple(sh), o.mesh_shape, o.placements) for o, sh in zip(res.outputs, out_shapes))
    return make_result(res.op, res.given, res.inputs, outs, res.rule)


__all__ = ["Reshard", "RuleResult", "make_result", "spec_from_mapping", "transition", "transition_cost",
           "with_shapes"]
