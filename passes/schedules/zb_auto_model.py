"""The scheduling problem ZBAuto and the V-memory schedules solve, and a fast timer for it.

A :class:`Problem` is a pipeline of ``n_stages`` stages placed on ranks (``stage_ranks[s]``),
``n_microbatches`` microbatches and split backward: every (stage, microbatch) runs ``F``, then
``I`` (backward for inputs), then ``W`` (backward for weights), costing ``forward``,
``backward_input`` and ``backward_weight``. ``F`` of stage ``s`` needs ``F`` of ``s - 1``;
``I`` of ``s`` needs ``I`` of ``s + 1`` (the last stage: its own ``F``); a message between two
ranks takes ``latency``. Activation memory on a rank: an ``F`` adds one, its ``W`` frees it; the
peak must stay ``<= memory_limit``. This is the simulator's model
(:func:`paddle_ext.passes.simulate_schedule` on a compute-only schedule), so the times
:func:`evaluate` computes are the simulator's; it only skips building the result object, which
makes it cheap enough for a search that times thousands of candidate orders.

An *order* is one list per rank of ``(kind, stage, microbatch)`` with ``kind`` in ``"FIW"``.

>>> pb = Problem.one_stage_per_rank(2, 2, (1, 1, 1), latency=0, memory_limit=2)
>>> order = [[("F", 0, 0), ("F", 0, 1), ("I", 0, 0), ("W", 0, 0), ("I", 0, 1), ("W", 0, 1)],
...          [("F", 1, 0), ("I", 1, 0), ("F", 1, 1), ("I", 1, 1), ("W", 1, 0), ("W", 1, 1)]]
>>> evaluate(pb, order).makespan, peak_memory(pb, order)
(7.0, (2, 2))
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, NamedTuple, Optional, Sequence, Tuple

from ..schedule_ir import Action, Kind, Schedule

__all__ = ["Problem", "Timing", "Order", "evaluate", "peak_memory", "to_schedule", "from_schedule"]

Order = List[List[Tuple[str, int, int]]]


@dataclass(frozen=True)
class Problem:
    """Sizes, costs, message latency and memory limit (activations per rank) of one search."""

    n_ranks: int
    n_microbatches: int
    stage_ranks: Tuple[int, ...]  # rank of each stage
    forward: float
    backward_input: float
    backward_weight: float
    latency: float
    memory_limit: int

    @classmethod
    def one_stage_per_rank(cls, n_ranks: int, n_microbatches: int, costs: Sequence[float], latency: float,
                           memory_limit: int) -> "Problem":
        """Stage ``r`` on rank ``r`` (ZBAuto's placement); ``costs`` is ``(F, I, W)``."""
        return cls(n_ranks, n_microbatches, tuple(range(n_ranks)), *map(float, costs), float(latency),
                   int(memory_limit))

    @property
    def n_stages(self) -> int:
        return len(self.stage_ranks)

    def cost(self, kind: str) -> float:
        return self.forward if kind == "F" else self.backward_input if kind == "I" else self.backward_weight

    def local_stages(self, rank: int) -> Tuple[int, ...]:
        """The stages on ``rank``, lowest first."""
        return tuple(s for s, r in enumerate(self.stage_ranks) if r == rank)


class Timing(NamedTuple):
    """What :func:`evaluate` found: the makespan, the longest first-to-last span of a rank, and
    every rank's ``(first start, last end)``."""

    makespan: float
    max_span: float
    spans: Tuple[Tuple[float, float], ...]


def evaluate(pb: Problem, order: Order, record: Optional[dict] = None) -> Optional[Timing]:
    """Time ``order`` as the simulator does (every action as early as its rank and inputs allow);
    ``None`` if it deadlocks or leaves an action before the one it needs on the same rank.
    ``record``, if given, receives ``(stage, microbatch) -> (start, ready)`` of every ``I``: it
    started later than ``ready`` (its inputs' arrival) when its rank was busy."""
    last, m, lat, ranks = pb.n_stages - 1, pb.n_microbatches, pb.latency, pb.stage_ranks
    dur = {"F": pb.forward, "I": pb.backward_input, "W": pb.backward_weight}
    end_f = [[None] * m for _ in range(pb.n_stages)]
    end_i = [[None] * m for _ in range(pb.n_stages)]
    pos, free = [0] * pb.n_ranks, [0.0] * pb.n_ranks
    first: List[Optional[float]] = [None] * pb.n_ranks
    remaining = sum(len(o) for o in order)
    while remaining:
        progressed = False
        for r in range(pb.n_ranks):
            acts, i, t = order[r], pos[r], free[r]
            while i < len(acts):
                kind, s, j = acts[i]
                if kind == "F":
                    ready = 0.0
                    if s:
                        e = end_f[s - 1][j]
                        if e is None:
                            break
                        ready = e + lat if ranks[s - 1] != r else e
                elif kind == "I":
                    own = end_f[s][j]
                    if own is None:
                        break
                    if s == last:
                        ready = own
                    else:
                        e = end_i[s + 1][j]
                        if e is None:
                            break
                        ready = max(own, e + lat if ranks[s + 1] != r else e)
                else:
                    ready = end_i[s][j]
                    if ready is None:
                        break
                start = t if t >= ready else ready
                if record is not None and kind == "I":
                    record[(s, j)] = (start, ready)
                t = start + dur[kind]
                if first[r] is None:
                    first[r] = start
                if kind == "F":
                    end_f[s][j] = t
                elif kind == "I":
                    end_i[s][j] = t
                i += 1
            if i != pos[r]:
                remaining -= i - pos[r]
                pos[r], free[r] = i, t
                progressed = True
        if not progressed:
            return None
    spans = tuple((first[r] or 0.0, free[r]) for r in range(pb.n_ranks))
    return Timing(max(free), max(b - a for a, b in spans), spans)


def peak_memory(pb: Problem, order: Order) -> Tuple[int, ...]:
    """Peak live activations per rank (an ``F`` adds one, its ``W`` frees it)."""
    peaks = []
    for acts in order:
        live = peak = 0
        for kind, _, _ in acts:
            if kind == "F":
                live += 1
                peak = max(peak, live)
            elif kind == "W":
                live -= 1
        peaks.append(peak)
    return tuple(peaks)


def to_schedule(order: Order) -> Schedule:
    """The IR schedule ``{rank: [Action, ...]}`` of an order."""
    return {r: [Action(s, Kind(kind), j) for kind, s, j in acts] for r, acts in enumerate(order)}


def from_schedule(schedule: Schedule, n_ranks: int) -> Optional[Order]:
    """The order of a compute-only IR schedule with split backward; ``None`` if it has a full ``B``."""
    order: Order = []
    for r in range(n_ranks):
        acts = [a for a in schedule.get(r, []) if a is not None]
        if any(a.kind is Kind.B for a in acts):
            return None
        order.append([(a.kind.value, a.stage, a.microbatch) for a in acts])
    return order
