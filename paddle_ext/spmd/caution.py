"""Over-caution: where paddle-ext is more replicated than Paddle while Paddle's answer is right.

The dense ground truth cannot see over-caution -- replicating everything always passes -- so
the differential comparison (:mod:`~paddle_ext.spmd.compare`) measures it on each disagreement:

* **sharded dims**: placements other than ``R`` (``S(d)`` and ``P(op)``); forward over the
  outputs, backward (``infer_backward``) over the inferred inputs and the produced outputs;
* **communicating reshards**: mesh-dim transitions that move data (all-gather, all-to-all,
  all-reduce, reduce-scatter; a slice or a local partial is free); forward from the given
  inputs to the required ones, backward from the produced outputs to the requested ones.

paddle-ext is *more replicated* than Paddle on an instance when it has fewer sharded dims, or
as many and more communicating reshards. Where it is and Paddle's answer passes the dense check
(:func:`~paddle_ext.spmd.validator.check_claim`), the instance is **over-cautious**; the
differential test fails on each one that no entry of :data:`ALLOWED` covers. An entry is data:
the ops, the direction, a predicate on the *instance* (never on the answers) and the reason.

The validator's unneeded reshards (its false negatives: a reshard asked although the given
layout already works) are gated the same way: :data:`UNNEEDED_RESHARDS` allows each rule a
count with its reason, and the total stays within :data:`UNNEEDED_BUDGET` of the cases checked.

>>> from paddle_ext.placements import DistSpec
>>> sharded_dims([DistSpec((4, 6), (2, 2), "[S(0),P(sum)]")]), comm_reshards(
...     [DistSpec((4,), (2,), "[S(0)]")], [DistSpec((4,), (2,), "[R]")])
(2, 1)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from ..errors import ShardingRuleError
from ..placements import DistSpec, Replicate, Shard
from .compare import Disagreement, Instance, _thaw, compare_op
from .result import transition
from .validator import check_claim

#: transitions that move no data between ranks
FREE = ("slice", "local-partial")


def sharded_dims(specs: Sequence[DistSpec]) -> int:
    """Placements other than ``R`` over ``specs`` (one per tensor and mesh dim)."""
    return sum(not isinstance(p, Replicate) for s in specs for p in s.placements)


def comm_reshards(src: Sequence[DistSpec], dst: Sequence[DistSpec]) -> int:
    """Mesh-dim transitions from ``src`` to ``dst`` that move data between ranks."""
    return sum(t is not None and t not in FREE
               for a, b in zip(src, dst) for t in map(transition, a.placements, b.placements))


@dataclass(frozen=True)
class OverCaution:
    """One over-cautious disagreement with its two measures for each side."""

    disagreement: Disagreement
    sharded: tuple[int, int]      # (paddle-ext, Paddle)
    reshards: tuple[int, int]     # (paddle-ext, Paddle)

    @property
    def instance(self) -> Instance:
        return self.disagreement.instance

    def __str__(self) -> str:
        d = self.disagreement
        return (f"{d.instance}: paddle-ext {d.ours} (sharded {self.sharded[0]}, reshards {self.reshards[0]}) vs "
                f"Paddle {d.paddle} (sharded {self.sharded[1]}, reshards {self.reshards[1]}, dense OK)")


def _measures(inst: Instance, answer: tuple) -> tuple[int, int]:
    required, outs = answer
    if inst.outs:
        return sharded_dims(required) + sharded_dims(outs), comm_reshards(outs, inst.outs)
    return sharded_dims(outs), comm_reshards(inst.flat(), required)


def over_caution(d: Disagreement) -> OverCaution | None:
    """``d`` as an :class:`OverCaution` when paddle-ext is more replicated than Paddle there and
    Paddle's answer passes the dense check; None otherwise (or when a side raised)."""
    if not d.answer or not d.paddle_answer:
        return None
    (ours_s, ours_r), (pad_s, pad_r) = _measures(d.instance, d.answer), _measures(d.instance, d.paddle_answer)
    if not (ours_s < pad_s or (ours_s == pad_s and ours_r > pad_r)):
        return None
    inst = d.instance
    if check_claim(inst.op, inst.shapes(), _thaw(inst.attrs), *d.paddle_answer):
        return None   # Paddle's answer is wrong: nothing to learn from it
    return OverCaution(d, (ours_s, pad_s), (ours_r, pad_r))


# -- the documented list --------------------------------------------------------------------------
@dataclass(frozen=True)
class Allowance:
    """Over-caution paddle-ext keeps on purpose (or cannot avoid), with the reason."""

    category: str
    ops: tuple[str, ...]          # () = every op
    direction: str                # "forward" | "backward"
    when: Callable[[Instance], bool]
    reason: str

    def covers(self, inst: Instance) -> bool:
        return ((not self.ops or inst.op in self.ops) and (self.direction == "backward") == bool(inst.outs)
                and self.when(inst))


def requested_coshard(inst: Instance) -> bool:
    """A requested output of a backward instance shards one tensor dim over several mesh dims."""
    return any(len(m) > 1 for o in inst.outs for m in o.dims_mapping())


def descending_shards(inst: Instance) -> bool:
    """An input has mesh dims `a < b` sharding tensor dims `da > db` (a later dim on the outer mesh dim)."""
    for x in inst.flat():
        dims = [(m, p.dim) for m, p in enumerate(x.placements) if isinstance(p, Shard)]
        if any(a < b and da > db for a, da in dims for b, db in dims):
            return True
    return False


def concat_axis_sharded(inst: Instance) -> bool:
    """An input is sharded on the concat axis."""
    axis = dict(inst.attrs).get("axis", 0)
    return any(x.ndim and x.shard_mesh_dims(axis % x.ndim) for x in inst.flat())


ALLOWED: tuple[Allowance, ...] = (
    Allowance("binding-coshard", (), "backward", requested_coshard,
              "Paddle's Python `DistTensorSpec` exposes only `dims_mapping` (one mesh dim per tensor dim): a "
              "co-sharded requested output reaches paddle-ext's Paddle-convention bridge with its first mesh dim "
              "only, while Paddle's C++ rule sees the whole co-shard. The pure API (`infer_backward` on "
              "`DistSpec`s) keeps the co-shard."),
    Allowance("coshard-order", ("flatten", "reshape"), "forward", descending_shards,
              "a flattened dim is sharded by a lower mesh dim than the group's leftmost dim: Paddle co-shards the "
              "leftmost dim with it, making that lower mesh dim the *outer* split. paddle-ext's co-shard splits by "
              "ascending mesh dims, so the existing blocks of the leftmost dim would be re-nested (data moves on "
              "the other mesh dim too, which no per-mesh-dim reshard states); it all-gathers that mesh dim "
              "instead. A later mesh dim joins the leftmost dim as Paddle does."),
    Allowance("concat-axis", ("concat",), "forward", concat_axis_sharded,
              "Paddle's concat alignment moves a mesh dim off the concat axis onto another dim (an all-to-all, "
              "the replicated inputs sliced); paddle-ext all-gathers it, as for split, slice and every "
              "one-mesh-dim rule: its cost model ranks an all-to-all above an all-gather because static graphs "
              "run S(i)->S(j) as an all_gather plus a slice (Paddle has no CPU all_to_all) and in dygraph the "
              "all-to-all only wins on large tensors (docs/reshard.md: 220 us against 84-102 us at 4 KiB, "
              "11 ms against 13-17 ms at 16 MiB on 2 ranks)."),
)


def allowance_for(inst: Instance) -> Allowance | None:
    """The first :data:`ALLOWED` entry covering ``inst``."""
    return next((a for a in ALLOWED if a.covers(inst)), None)


def unexcused(ds: Sequence[Disagreement]) -> list[OverCaution]:
    """The over-cautious disagreements of ``ds`` that no :data:`ALLOWED` entry covers."""
    return [c for c in map(over_caution, ds) if c is not None and allowance_for(c.instance) is None]


def caution_counts(ops: Sequence[str], n_of: Callable[[str], int], seed: int, backward: bool) -> dict:
    """Per op ``(cases, over-cautious, of which allowed)`` on the differential test's instances."""
    out = {}
    for op in ops:
        n = n_of(op)
        count, ds = compare_op(op, n, seed, backward)
        found = [c for c in map(over_caution, ds) if c is not None]
        out[op] = (count, len(found), sum(allowance_for(c.instance) is not None for c in found))
    return out


# -- the validator's unneeded reshards ------------------------------------------------------------
#: at most this share of the validator's cases may be an unneeded reshard (all rules together)
UNNEEDED_BUDGET = 0.01

#: rule -> (unneeded reshards allowed, why each is not fixed); any other rule is allowed none
UNNEEDED_RESHARDS: dict[str, tuple[int, str]] = {
    "divide": (6, "`x / y` with `y` replicated is non-decreasing in `x` only where `y > 0`; the sign is data, so a "
                  "`P(max)`/`P(min)` numerator is reduced (the validator's denominators are positive)"),
    "subtract": (6, "`x - P(max)` is `P(min)` (and the reverse); a `partial(...)` clause keeps an input's reduce op, "
                    "so a `P(max|min)` subtrahend is reduced"),
    "index_add": (3, "`P(max|min)` values: `out = x + (values summed per index)`, and a maximum of sums is no sum of "
                     "maxima once an index repeats (the validator's indices are unique); and an index sharded with "
                     "its values over a `P(sum)` x adds a partial sum the notation cannot tie to x's partial"),
    "scatter": (4, "`overwrite=False` sums the updates of a repeated index, so `P(max|min)` updates are reduced "
                   "(the validator's indices are unique)"),
    "isfinite": (4, "the validator's partial parts of a non-finite value are all non-finite, so a replicated "
                    "answer rebuilds; real parts need not be (a finite `P(max)` may have a `-inf` part): the "
                    "all-reduce is needed"),
    "isinf": (4, "as isfinite"),
    "isnan": (4, "as isfinite"),
}


def unneeded_problems(reports) -> list[str]:
    """Why the validator ``reports`` (one per rule) break the unneeded-reshard gate ([] when they pass)."""
    cases = sum(r.cases for r in reports)
    total = sum(len(r.false_negatives) for r in reports)
    out = []
    for r in reports:
        allowed = UNNEEDED_RESHARDS.get(r.op, (0, ""))[0]
        if len(r.false_negatives) > allowed:
            out.append(f"{r.op}: {len(r.false_negatives)} unneeded reshards of {r.cases} cases, {allowed} allowed "
                       f"(paddle_ext.spmd.caution.UNNEEDED_RESHARDS); first: {r.false_negatives[0]}")
    if total > UNNEEDED_BUDGET * cases:
        out.append(f"{total} unneeded reshards in {cases} cases: more than {UNNEEDED_BUDGET:.0%}")
    return out


def caution_markdown() -> str:
    """The documented list (docs/spmd_rules.md mirrors this text verbatim)."""
    lines = ["| category | ops | direction | applies when | reason |", "|---|---|---|---|---|"]
    for a in ALLOWED:
        doc = (a.when.__doc__ or a.when.__name__).strip()
        lines.append(f"| **{a.category}** | {', '.join(a.ops) or 'every op'} | {a.direction} | {doc} | {a.reason} |")
    lines += ["", "| rule | unneeded reshards allowed | reason |", "|---|---:|---|"]
    lines += [f"| {op} | {n} | {why} |" for op, (n, why) in UNNEEDED_RESHARDS.items()]
    return "\n".join(lines)


def check_allowances() -> None:
    """Raise :class:`ShardingRuleError` on a malformed entry (unknown direction, empty reason)."""
    for a in ALLOWED:
        if a.direction not in ("forward", "backward") or not a.reason or not a.category:
            raise ShardingRuleError(f"over-caution allowance {a.category!r}: give a category, a reason and the "
                                    f"direction 'forward' or 'backward' (got {a.direction!r})")


check_allowances()

__all__ = ["ALLOWED", "Allowance", "OverCaution", "UNNEEDED_BUDGET", "UNNEEDED_RESHARDS", "allowance_for",
           "caution_counts", "caution_markdown", "comm_reshards", "over_caution", "sharded_dims",
           "unexcused", "unneeded_problems"]
