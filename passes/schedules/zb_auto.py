"""ZBAuto: the fastest schedule found under a memory limit, for given F/B/W costs and latency.

One stage per rank, backward split in ``I`` and ``W``. Given the costs ``F, B, W`` (``B`` = the
backward for inputs, as on the command line), the message latency ``L`` and the memory limit
``K`` (activations per rank, in microbatches: an ``F`` adds one, its ``W`` (or ``B``) frees it),
:func:`search_zb_auto` returns the schedule with the least simulated makespan (then the least
longest-rank span) among:

* the zero-bubble paper's greedy under ``K``, with several warm-up shapes
  (:mod:`.zb_auto_search`), the best one improved by swapping neighbouring actions;
* the fixed schedules FThenB, 1F1B, ZBH1 and ZBH2, each when its peak fits ``K``, so ZBAuto is
  never slower than any of them that fits.

Everything is deterministic (the local search is bounded by a count of timed actions, not by
the clock), so every rank of a pipeline builds the same schedule. :func:`exact_search`
(:mod:`.zb_auto_exact`) gives the optimum on small sizes to measure the heuristic's gap.

Run by name (``generate_schedule("ZBAuto", p, m)``, the runtime, the static passes) it uses
:data:`DEFAULT_COSTS` and :data:`default_memory_limit` (``ceil(1.5 p)``, between ZBH1's ``p``
and ZBH2's ``2p - 1``).

Lower bound: the last rank starts after ``(p - 1)(F + L)`` and has ``m (F + B + W)`` to run. With
``F = B = W`` and no latency ZBH1 reaches it, so nothing is faster; with ``B > W`` and
``p < K < 2p - 1`` ZBAuto is strictly faster than ZBH1 (tested on a grid).

>>> res = search_zb_auto(4, 8, costs=(2, 2, 1), memory_limit=6)
>>> res.makespan, max(res.peak_activations) <= 6, res.candidates["ZBH1"]
(47.0, True, 49.0)
>>> zb_auto(2, 2, memory_limit=0)
Traceback (most recent call last):
...
paddle_ext.errors.ScheduleError: ZBAuto: memory_limit (--memory-limit) must be an int >= 1 (activations per rank, in microbatches); got 0: the least that works is 1
"""
from __future__ import annotations

import math
from functools import lru_cache
from dataclasses import dataclass, field
from typing import Dict, Optional, Sequence, Tuple

from paddle_ext.errors import ScheduleError
from ..schedule_ir import Schedule
from ._checks import SizeRule
from ._registry import register_schedule
from .fthenb import fthenb
from .one_f_one_b import one_f_one_b
from .zb_auto_model import Problem, from_schedule, peak_memory, to_schedule
from .zb_auto_search import heuristic_orders, improve, score
from .zb_h1 import zb_h1
from .zb_h2 import zb_h2

__all__ = ["NAME", "SIZES", "DEFAULT_COSTS", "default_memory_limit", "ZBAutoResult", "search_zb_auto", "zb_auto",
           "check_costs", "check_memory_limit"]

NAME = "ZBAuto"
SIZES = SizeRule(chunks=1, chunks_why="ZBAuto places one stage per rank (VMin, VHalf and VZB use two)")
DEFAULT_COSTS = (1.0, 1.0, 1.0)
FIXED = (("FThenB", fthenb), ("1F1B", one_f_one_b), ("ZBH1", zb_h1), ("ZBH2", zb_h2))
SEARCH_WORK = 400_000  # timed actions the local search may spend (deterministic budget, ~0.5 s)


def default_memory_limit(n_ranks: int) -> int:
    """``ceil(1.5 p)``: the limit used when ZBAuto runs by name."""
    return math.ceil(1.5 * n_ranks)


def check_costs(name: str, costs) -> Tuple[float, float, float]:
    """``(F, B, W)`` as floats, each a finite number > 0, or :class:`ScheduleError`."""
    try:
        values = tuple(float(c) for c in costs)
    except (TypeError, ValueError):
        values = ()
    if len(values) != 3 or any(isinstance(c, bool) for c in costs):
        raise ScheduleError(f"{name}: costs (--costs) must be three numbers F,B,W, got {costs!r}: e.g. 1,1,1")
    if not all(0 < c < math.inf for c in values):
        raise ScheduleError(f"{name}: costs (--costs) F,B,W must all be > 0 (a split backward needs a W), got "
                            f"{','.join(f'{c:g}' for c in values)}: e.g. 1,1,1")
    return values


def check_memory_limit(name: str, memory_limit, least: int, unit: str = "microbatches") -> int:
    """``memory_limit`` as an int ``>= least``, or :class:`ScheduleError` stating ``least``."""
    if isinstance(memory_limit, bool) or not isinstance(memory_limit, int) or memory_limit < max(1, least):
        raise ScheduleError(f"{name}: memory_limit (--memory-limit) must be an int >= {max(1, least)} "
                            f"(activations per rank, in {unit}); got {memory_limit!r}: the least that works is "
                            f"{max(1, least)}")
    return memory_limit


@dataclass(frozen=True)
class ZBAutoResult:
    """The chosen schedule and how it was found: ``source`` is ``"search"`` or the fixed schedule
    it fell back to; ``candidates`` maps each candidate to its makespan (``None``: its peak does
    not fit the limit)."""

    schedule: Schedule
    makespan: float
    max_span: float
    peak_activations: Tuple[int, ...]
    source: str
    memory_limit: int
    costs: Tuple[float, float, float]
    latency: float
    candidates: Dict[str, Optional[float]] = field(default_factory=dict)


def search_zb_auto(n_ranks: int, n_microbatches: int, costs: Sequence[float] = DEFAULT_COSTS,
                   memory_limit: Optional[int] = None, latency: float = 0.0, *,
                   search_work: int = SEARCH_WORK) -> ZBAutoResult:
    """Search (module doc); ``memory_limit`` defaults to :func:`default_memory_limit`."""
    SIZES.check(NAME, n_ranks, n_microbatches, 1)
    costs = check_costs(NAME, costs)
    limit = check_memory_limit(NAME, default_memory_limit(n_ranks) if memory_limit is None else memory_limit, 1)
    if isinstance(latency, bool) or not isinstance(latency, (int, float)) or not 0 <= latency < math.inf:
        raise ScheduleError(f"{NAME}: latency (--latency) must be a number >= 0, got {latency!r}")
    pb = Problem.one_stage_per_rank(n_ranks, n_microbatches, costs, latency, limit)
    options = []  # (score, peak, name, schedule)
    candidates: Dict[str, Optional[float]] = {}
    seeds = []
    for name, generate in FIXED:
        fixed = generate(n_ranks, n_microbatches, 1)
        timing, peaks = _time_fixed(fixed, pb)
        fits = max(peaks) <= limit
        candidates[name] = timing[0] if fits else None
        if fits:
            options.append((timing, max(peaks), name, fixed))
            order = from_schedule(fixed, n_ranks)
            if order is not None:
                seeds.append((timing, order))
    found = heuristic_orders(pb)
    seeds = sorted(found[:1] + seeds, key=lambda x: x[0])
    n_actions = 3 * n_ranks * n_microbatches
    for (seed_score, order), share in zip(seeds[:2], (0.7, 0.3)):
        best, improved = improve(pb, order, max_evaluations=max(1, int(search_work * share) // n_actions))
        options.append((best, max(peak_memory(pb, improved)), "search", to_schedule(improved)))
    candidates["search"] = min((o[0][0] for o in options if o[2] == "search"), default=None)
    timing, peak, source, schedule = min(options, key=lambda o: (o[0], o[1], o[2] != "search"))
    peaks = _time_fixed(schedule, pb)[1]
    return ZBAutoResult(schedule, timing[0], timing[1], peaks, source, limit, costs, float(latency), candidates)


def _time_fixed(schedule: Schedule, pb: Problem):
    """(score, peak activations per rank) of a fixed schedule under ``pb``'s costs and latency."""
    from ..simulate import Costs, simulate_schedule

    result = simulate_schedule(schedule, Costs(pb.forward, pb.backward_input, pb.backward_weight), pb.latency)
    return (round(result.makespan, 9), round(max(result.spans), 9)), result.peak_activations


@register_schedule(name=NAME, placement="loop", default_chunks=1, sizes=SIZES, order=100,
                   aliases=("ZB-Auto",),
                   summary="searched under a memory limit (by name: costs 1,1,1, limit ceil(1.5p) microbatches)")
def zb_auto(n_ranks: int, n_microbatches: int, n_chunks: int = 1, *, costs: Sequence[float] = DEFAULT_COSTS,
            memory_limit: Optional[int] = None, latency: float = 0.0) -> Schedule:
    """The schedule :func:`search_zb_auto` chooses (the generator registered as ``ZBAuto``); the
    search runs once per set of arguments, each call gets its own lists."""
    SIZES.check(NAME, n_ranks, n_microbatches, n_chunks)
    costs = check_costs(NAME, costs)
    schedule = _cached_search(n_ranks, n_microbatches, costs, memory_limit, latency).schedule
    return {rank: list(actions) for rank, actions in schedule.items()}


@lru_cache(maxsize=32)
def _cached_search(n_ranks, n_microbatches, costs, memory_limit, latency) -> ZBAutoResult:
    return search_zb_auto(n_ranks, n_microbatches, costs, memory_limit, latency)

