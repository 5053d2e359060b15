"""Every reshard transition in one registry: when it is legal, what it costs, who runs it.

A :class:`Transition` is one kind of plan step. The planner (:mod:`.planner`) asks the registry
which transitions leave a state and what each moves; the per-rank runner (:mod:`.per_rank`) asks
it for the step's executor. A transition is either one entry in :data:`TRANSITIONS` below (its
executor in :mod:`.step_executors`) or one module of :mod:`.transition_kinds` that calls
:func:`register_transition` with its legality, bytes and executor side by side (``rescale`` is
written that way; a new transition is such a module and its test).

Transitions on one mesh dim of size ``n`` (``L`` = elements of the local block with that mesh
dim replicated; ``c_k`` = a rank's chunk):

=============  ================  ================================================
from -> to     collective        elements received by a rank
=============  ================  ================================================
S(d) -> R      all_gather        L - c_k
R -> S(d)      slice             0
P -> R         all_reduce        (n-1)*c_k + (L - c_k)   (= 2(n-1)/n*L when even)
P -> S(d)      reduce_scatter    (n-1)*c_k
S(d) -> P      to_partial        0 (own shard in place, neutral elsewhere)
R -> P         to_partial        0 (sum: mesh-local index 0 keeps it; avg/max/min: all keep it)
P(sum)<->P(avg) rescale          0 (x n or / n, only when n is a power of two: exact)
S(i) -> S(j)   all_to_all        only the blocks a rank lacks
any -> any     p2p               only the blocks a rank lacks (non-partial layouts)
mesh A -> B    p2p / transfer    only the blocks a rank lacks / the local block
=============  ================  ================================================

>>> TRANSITIONS["all_gather"].moves
(('S', 'R'),)
>>> for_move(Partial("sum"), Shard(0)).name
'reduce_scatter'
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence

from ..placements import DistSpec, Partial, Placement, Replicate, Shard
from . import step_executors as run
from .layout import box_numel, chunk_sizes, group_pieces, has_partial, is_pow2, pieces, received_elements


class Move(NamedTuple):
    """A candidate step, as the bytes functions see it: layouts before and after, the mesh dim
    it changes (None for a whole-layout move) and both sides' global ranks (row-major)."""

    before: DistSpec
    after: DistSpec
    mesh_dim: int | None
    before_ranks: tuple
    after_ranks: tuple


#: ``legal(before_placements, after_placements, mesh_dim, mesh_dim_size) -> bool``
Legality = Callable[[tuple, tuple, "int | None", "int | None"], bool]


@dataclass(frozen=True)
class Transition:
    """One kind of reshard step.

    ``name`` is the step's ``collective`` in a plan. ``moves`` are the placement changes on one
    mesh dim it serves, as kind pairs (``("S", "R")``: Shard to Replicate); a whole-layout move
    (point-to-point redistribution, a copy to another mesh) has none. ``legal`` says whether the
    step may be taken; ``elements(move)`` is the maximum over ranks of the elements a rank
    receives. ``executor`` runs it on one rank (:mod:`.step_executors`). ``communicates`` is False
    for a local step (no rank receives anything). ``wraps_integers(after, mesh_dim, p, q)``, when
    given, is True if on an integer tensor the step would make P(max|min)'s neutral element meet
    sum/avg arithmetic; the planner then drops it. ``generic`` marks generic point-to-point:
    between plans of equal bytes and steps, the one with fewer generic steps wins.
    """

    name: str
    moves: tuple[tuple[str, str], ...]
    legal: Legality
    elements: Callable[[Move], int]
    executor: Callable
    communicates: bool = True
    wraps_integers: Callable[[tuple, int, Placement, Placement], bool] | None = None
    generic: bool = False


def kind(p: Placement) -> str:
    """``"S"``, ``"R"`` or ``"P"``: the placement kind that :attr:`Transition.moves` names."""
    return "S" if isinstance(p, Shard) else ("P" if isinstance(p, Partial) else "R")


# -- legality -----------------------------------------------------------------------------------
def _commute(a: str, b: str) -> bool:
    return a == b or {a, b} <= {"sum", "avg"}


def reducible(placements: Sequence[Placement], m: int) -> bool:
    """A Partial on mesh dim ``m`` may be reduced now: the logical value reduces the higher
    (inner) mesh dims first, so every Partial above ``m`` must commute with this one."""
    op = placements[m].op
    return all(_commute(op, p.op) for p in placements[m + 1:] if isinstance(p, Partial))


def _innermost(placements: Sequence[Placement], m: int, d: int) -> bool:
    """True if no mesh dim above ``m`` shards tensor dim ``d`` (``m`` is the inner split)."""
    return all(not (isinstance(p, Shard) and p.dim == d) for p in placements[m + 1:])


def _gather_legal(pl, new, m, n) -> bool:
    return _innermost(pl, m, pl[m].dim)


def _slice_legal(pl, new, m, n) -> bool:
    return _innermost(new, m, new[m].dim)


def _all_to_all_legal(pl, new, m, n) -> bool:
    return _innermost(pl, m, pl[m].dim) and _innermost(new, m, new[m].dim)


def _to_partial_legal(pl, new, m, n) -> bool:
    if isinstance(pl[m], Replicate):
        return True
    return _innermost(pl, m, pl[m].dim) and (new[m].op != "avg" or is_pow2(n))


def _all_reduce_legal(pl, new, m, n) -> bool:
    return reducible(pl, m)


def _reduce_scatter_legal(pl, new, m, n) -> bool:
    return reducible(pl, m) and _innermost(new, m, new[m].dim)


def _p2p_legal(pl, new, m=None, n=None) -> bool:
    return not has_partial(pl) and not has_partial(new)


def _transfer_legal(pl, new, m=None, n=None) -> bool:
    return tuple(pl) == tuple(new)


def other_partial_ops(new: tuple, m: int) -> set:
    return {x.op for i, x in enumerate(new) if i != m and isinstance(x, Partial)}


def _to_partial_wraps(new, m, p, q) -> bool:
    """S -> P(max|min) fills the non-owners with iinfo.min/max, which a P(sum|avg) on another mesh
    dim would sum, and any -> P(avg) scales or copies values that a P(max|min) neutral may hold.
    Every such state is reachable another way (through R, which keeps the value on every rank)."""
    others = other_partial_ops(new, m)
    if isinstance(p, Shard) and q.op in ("max", "min"):
        return bool(others & {"sum", "avg"})
    return q.op == "avg" and bool(others & {"max", "min"})


# -- elements a rank receives (the maximum over ranks) --------------------------------------------
def _max(values) -> int:
    return max(values, default=0)


def no_elements(move: Move) -> int:
    return 0


def _all_gather_elements(move: Move) -> int:
    a, b = move.before, move.after
    return _max(b.local_numel(c) - a.local_numel(c) for c in a.coords())


def _all_reduce_elements(move: Move) -> int:
    spec, m = move.before, move.mesh_dim
    n = spec.mesh_shape[m]
    out = 0
    for c in spec.coords():
        total = spec.local_numel(c)
        mine = chunk_sizes(total, n)[c[m]]
        out = max(out, (n - 1) * mine + (total - mine))
    return out


def _reduce_scatter_elements(move: Move) -> int:
    after, m = move.after, move.mesh_dim
    n = after.mesh_shape[m]
    return _max((n - 1) * after.local_numel(c) for c in after.coords())


def _all_to_all_elements(move: Move) -> int:
    a, b, m = move.before, move.after, move.mesh_dim
    out = 0
    for c in a.coords():
        if c[m] != 0:
            continue  # one coordinate per group
        got: dict[int, int] = {}
        for j, k, box in group_pieces(a, b, m, c):
            if j != k:
                got[k] = got.get(k, 0) + box_numel(box)
        out = max(out, _max(got.values()))
    return out


def _p2p_elements(move: Move) -> int:
    return _max(received_elements(pieces(move.before, move.before_ranks, move.after, move.after_ranks)).values())


def _transfer_elements(move: Move) -> int:
    b, a_ranks, b_ranks = move.after, move.before_ranks, move.after_ranks
    return _max(b.local_numel(c) for i, c in enumerate(b.coords()) if a_ranks[i] != b_ranks[i])


# -- the registry ---------------------------------------------------------------------------------
def _registry(*entries: Transition) -> dict[str, Transition]:
    out: dict[str, Transition] = {}
    claimed: dict[tuple, str] = {}
    for t in entries:
        if t.name in out:
            raise ValueError(f"two reshard transitions are named {t.name!r}")
        for mv in t.moves:
            if mv in claimed:
                raise ValueError(f"{t.name} and {claimed[mv]} both claim {mv[0]} -> {mv[1]}")
            claimed[mv] = t.name
        out[t.name] = t
    return out


#: step name (a plan step's ``collective``) -> its transition
TRANSITIONS: dict[str, Transition] = _registry(
    Transition("all_gather", (("S", "R"),), _gather_legal, _all_gather_elements, run.run_all_gather),
    Transition("all_reduce", (("P", "R"),), _all_reduce_legal, _all_reduce_elements, run.run_all_reduce),
    Transition("reduce_scatter", (("P", "S"),), _reduce_scatter_legal, _reduce_scatter_elements,
               run.run_reduce_scatter),
    Transition("all_to_all", (("S", "S"),), _all_to_all_legal, _all_to_all_elements, run.run_all_to_all),
    Transition("slice", (("R", "S"),), _slice_legal, no_elements, run.run_slice, communicates=False),
    Transition("to_partial", (("S", "P"), ("R", "P")), _to_partial_legal, no_elements, run.run_to_partial,
               communicates=False, wraps_integers=_to_partial_wraps),
    Transition("p2p", (), _p2p_legal, _p2p_elements, run.run_p2p, generic=True),
    Transition("transfer", (), _transfer_legal, _transfer_elements, run.run_transfer),
)

_BY_MOVE = {mv: t for t in TRANSITIONS.values() for mv in t.moves}
P2P, TRANSFER = TRANSITIONS["p2p"], TRANSITIONS["transfer"]


def register_transition(transition: Transition) -> Transition:
    """Add ``transition`` to :data:`TRANSITIONS` from any module (a name or a move claimed twice
    raises ``ValueError``); the modules of :mod:`.transition_kinds` call it, each with its
    legality, bytes and executor in the one file."""
    merged = _registry(*TRANSITIONS.values(), transition)
    TRANSITIONS[transition.name] = merged[transition.name]
    _BY_MOVE.update({mv: transition for mv in transition.moves})
    return transition


def for_move(p: Placement, q: Placement) -> Transition | None:
    """The transition that changes one mesh dim's placement from ``p`` to ``q`` (None: none does)."""
    return _BY_MOVE.get((kind(p), kind(q)))


__all__ = ["Move", "P2P", "TRANSFER", "TRANSITIONS", "Transition", "for_move", "kind", "no_elements",
           "other_partial_ops", "reducible", "register_transition"]
