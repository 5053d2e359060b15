"""Reshard planner: the cheapest sequence of steps between two layouts, as a printable value.

A *state* is one placement per mesh dim on one of the two meshes (source or destination). A step
changes one mesh dim's placement with one collective, moves blocks point-to-point (a whole-state
redistribution, within a mesh or across meshes), or is purely local. :func:`plan_reshard` runs
Dijkstra over these states and minimises, in order: bytes received per rank (the maximum over
ranks, summed over steps), the number of steps, and generic point-to-point steps. Which steps
exist, when each is legal and what it moves is the registry in :mod:`.transitions` (its table
lists them all); this module only searches.

>>> from paddle_ext.placements import DistSpec
>>> plan = plan_reshard(DistSpec((4, 4), (2, 2), "[S(0),R]"), DistSpec((4, 4), (2, 2), "[R,S(0)]"))
>>> format_plan(plan)
'[S(0),R] -> [R,S(0)]'
>>> [(s.collective, s.bytes) for s in plan]
[('p2p', 32)]
>>> format_plan(plan_reshard(DistSpec((4, 6), (2,), "[P(sum)]"), DistSpec((4, 6), (2,), "[S(1)]")))
'[P(sum)] -> [S(1)]'
"""
from __future__ import annotations

import functools
import heapq
from dataclasses import dataclass
from typing import Iterator, Sequence

from ..errors import ReshardPlanError
from ..placements import DistSpec, Partial, Placement, Replicate, Shard, check_mesh_shape, format_placements
from .layout import CROSS, DST, SRC, has_partial
from . import transition_kinds  # noqa: F401 - registers every transition kind
from .transitions import P2P, TRANSFER, Move, for_move


@dataclass(frozen=True)
class ReshardStep:
    """One step of a plan: placements before and after, the collective and its bytes.

    ``mesh_dim`` is the mesh dim the step acts on, or None for whole-state point-to-point moves.
    ``mesh`` says on which mesh the step runs: ``"src"``, ``"dst"`` or ``"src->dst"`` (a step
    that moves data from the source mesh to the destination mesh). ``bytes`` is the maximum over
    ranks of the bytes a rank receives in this step.
    """

    mesh_dim: int | None
    src: tuple[Placement, ...]
    dst: tuple[Placement, ...]
    collective: str
    bytes: int
    mesh: str = SRC

    def __str__(self) -> str:
        where = "" if self.mesh_dim is None else f" on mesh dim {self.mesh_dim}"
        return (f"{format_placements(self.src)} -> {format_placements(self.dst)}: "
                f"{self.collective}{where} ({self.mesh}), {self.bytes} B/rank")


def format_plan(plan: Sequence[ReshardStep]) -> str:
    """``[S(0),R] -> [R,R] -> [R,S(0)]``; a step into the destination mesh prints as ``=>``.

    An empty plan (nothing to do) prints as ``(no-op)``.
    """
    if isinstance(plan, (str, bytes)) or not all(isinstance(step, ReshardStep) for step in plan):
        raise ReshardPlanError(f"format_plan takes the list of ReshardStep that plan_reshard returns, "
                               f"got {plan!r}")
    if not plan:
        return "(no-op)"
    out = format_placements(plan[0].src)
    for step in plan:
        out += (" => " if step.mesh == CROSS else " -> ") + format_placements(step.dst)
    return out


def plan_bytes(plan: Sequence[ReshardStep]) -> int:
    """Bytes a rank receives over the whole plan (sum of the per-step maxima)."""
    return sum(s.bytes for s in plan)


# -- the search ---------------------------------------------------------------------------------
def _is_integer(dtype) -> bool:
    """True for an integer dtype given as a numpy/Paddle dtype, a type or its name."""
    if dtype is None:
        return False
    kind = getattr(dtype, "kind", None)
    if isinstance(kind, str):
        return kind in "iu"
    return "int" in str(dtype).lower()


class _Search:
    def __init__(self, src: DistSpec, dst: DistSpec, src_ranks: tuple, dst_ranks: tuple,
                 itemsize: int, integer: bool = False):
        self.shape = src.shape
        self.integer = integer
        self.meshes = {SRC: src.mesh_shape, DST: dst.mesh_shape}
        self.ranks = {SRC: src_ranks, DST: dst_ranks}
        self.same_mesh = src.mesh_shape == dst.mesh_shape and src_ranks == dst_ranks
        self.itemsize = itemsize
        self.ops = sorted({p.op for p in src.placements + dst.placements if isinstance(p, Partial)})
        self.target = (SRC if self.same_mesh else DST, dst.placements)

    @functools.lru_cache(maxsize=None)
    def spec(self, side: str, placements: tuple) -> DistSpec:
        return DistSpec(self.shape, self.meshes[side], placements)

    def _options(self, p: Placement) -> list[Placement]:
        opts: list[Placement] = [Replicate()] + [Shard(d) for d in range(len(self.shape))]
        return [q for q in opts + [Partial(op) for op in self.ops] if q != p]

    def edges(self, state) -> Iterator[tuple[tuple, ReshardStep, int]]:
        side, pl = state
        mesh, ranks = self.meshes[side], self.ranks[side]
        for m, p in enumerate(pl):
            n = mesh[m]
            for q in self._options(p):
                new = pl[:m] + (q,) + pl[m + 1:]
                t = for_move(p, q)
                if t is None or not t.legal(pl, new, m, n):
                    continue
                if self.integer and t.wraps_integers is not None and t.wraps_integers(new, m, p, q):
                    continue
                elems = t.elements(Move(self.spec(side, pl), self.spec(side, new), m, ranks, ranks)) \
                    if t.communicates else 0
                yield (side, new), ReshardStep(m, pl, new, t.name, elems * self.itemsize, side), int(t.generic)
        if not has_partial(pl):
            for side2, target in self._move_targets(side, pl):
                if (side2, target) == state or not P2P.legal(pl, target):
                    continue
                move = Move(self.spec(side, pl), self.spec(side2, target), None, ranks, self.ranks[side2])
                where = side if side2 == side else CROSS
                yield ((side2, target), ReshardStep(None, pl, target, P2P.name, P2P.elements(move) * self.itemsize,
                                                    where), int(P2P.generic))
        elif side == SRC and not self.same_mesh and self.meshes[SRC] == self.meshes[DST]:
            move = Move(self.spec(SRC, pl), self.spec(DST, pl), None, self.ranks[SRC], self.ranks[DST])
            yield ((DST, pl), ReshardStep(None, pl, pl, TRANSFER.name, TRANSFER.elements(move) * self.itemsize,
                                          CROSS), int(TRANSFER.generic))

    def _move_targets(self, side: str, pl: tuple) -> list[tuple[str, tuple]]:
        tside, tpl = self.target
        out = []
        if tside == side and not has_partial(tpl):
            out.append((side, tpl))
        if side == SRC and not self.same_mesh:
            ndim = len(self.meshes[DST])
            cands = [tpl, tuple(Replicate() if isinstance(p, Partial) else p for p in tpl),
                     (Replicate(),) * ndim]
            if len(pl) == ndim:
                cands.append(pl)
            for c in cands:
                if not has_partial(c) and (DST, c) not in out:
                    out.append((DST, c))
        return out

    def run(self, start: tuple) -> tuple[ReshardStep, ...]:
        best = {start: (0, 0, 0)}
        heap = [((0, 0, 0), 0, start, ())]
        counter = 1
        while heap:
            cost, _, state, plan = heapq.heappop(heap)
            if state == self.target:
                return plan
            if best.get(state, cost) < cost:
                continue
            for nxt, step, generic in self.edges(state):
                new_cost = (cost[0] + step.bytes, cost[1] + 1, cost[2] + generic)
                if nxt not in best or new_cost < best[nxt]:
                    best[nxt] = new_cost
                    heapq.heappush(heap, (new_cost, counter, nxt, plan + (step,)))
                    counter += 1
        raise ReshardPlanError(  # unreachable with the edges above; kept as a named failure
            f"no reshard path from {format_placements(start[1])} to {format_placements(self.target[1])}")


def _ranks(ranks, mesh_shape, what: str) -> tuple:
    if ranks is None:
        size = 1
        for s in mesh_shape:
            size *= s
        return tuple(range(size))
    flat = tuple(int(r) for r in ranks)
    size = 1
    for s in mesh_shape:
        size *= s
    if len(flat) != size or len(set(flat)) != len(flat):
        raise ReshardPlanError(
            f"{what} ranks {list(flat)} do not fit mesh {list(mesh_shape)}: give {size} distinct "
            f"global ranks in row-major mesh order (ProcessMesh.process_ids)")
    return flat


@functools.lru_cache(maxsize=2048)
def _plan_cached(src: DistSpec, dst: DistSpec, src_ranks: tuple, dst_ranks: tuple,
                 itemsize: int, integer: bool = False) -> tuple[ReshardStep, ...]:
    search = _Search(src, dst, src_ranks, dst_ranks, itemsize, integer)
    return search.run((SRC, src.placements))


def plan_reshard(src: DistSpec, dst: DistSpec, *, src_ranks: Sequence[int] | None = None,
                 dst_ranks: Sequence[int] | None = None, itemsize: int = 4,
                 dtype=None) -> tuple[ReshardStep, ...]:
    """The minimal-bytes plan from ``src`` to ``dst`` (see the module docstring for the costs).

    ``src_ranks``/``dst_ranks`` are the meshes' global ranks in row-major order (default
    ``0..size-1``); when they differ or the mesh shapes differ, the plan crosses meshes.
    ``itemsize`` is the element size in bytes used for the byte counts. ``dtype`` (a numpy or
    Paddle dtype or its name) matters when P(max|min) meets P(sum|avg) on another mesh dim: for
    integers (and when ``dtype`` is None, i.e. unknown) the plan never lets the P(max|min) neutral
    element (iinfo.min/max) meet sum/avg arithmetic, which would wrap around; a float dtype allows
    the cheaper plans that do (its neutral element is +-inf).

    Raises :class:`ReshardPlanError` when the global shapes differ or the ranks do not fit.
    """
    for name, spec in (("source", src), ("destination", dst)):
        if not isinstance(spec, DistSpec):
            raise ReshardPlanError(
                f"{name} must be a DistSpec(shape, mesh_shape, placements), got {spec!r}")
    if src.shape != dst.shape:
        raise ReshardPlanError(
            f"reshard cannot change the global shape: source {src} vs destination {dst}; "
            f"reshape the tensor before or after the reshard")
    if isinstance(itemsize, bool) or not isinstance(itemsize, int) or itemsize <= 0:
        raise ReshardPlanError(f"itemsize must be a positive int (bytes per element), got {itemsize!r}")
    s_ranks = _ranks(src_ranks, check_mesh_shape(src.mesh_shape), "source")
    d_ranks = _ranks(dst_ranks if dst_ranks is not None else
                     (s_ranks if src.mesh_shape == dst.mesh_shape else None), dst.mesh_shape, "destination")
    return _plan_cached(src, dst, s_ranks, d_ranks, itemsize, dtype is None or _is_integer(dtype))


__all__ = ["CROSS", "DST", "SRC", "ReshardStep", "format_plan", "plan_bytes", "plan_reshard"]
