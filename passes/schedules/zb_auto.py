"""ZBAuto: the best schedule found under a memory limit, for given F/B/W costs and latency, by
makespan or by longest stage span.

One stage per rank, backward split in ``I`` and ``W``. Given the costs ``F, B, W`` (``B`` = the
backward for inputs, as on the command line), the message latency ``L`` and the memory limit
``K`` (activations per rank, in microbatches: an ``F`` adds one, its ``W`` (or ``B``) frees it),
:func:`search_zb_auto` reports two figures of every schedule it considers:

* the **makespan**, the time from the first action to the last one on any rank;
* the **longest stage span**, over the ranks, the time from a rank's first action to its last:
  the zero-bubble paper's cost (Qi et al., ICLR 2024, Section 5.3), whose bubble rate is
  ``(span - m(F+B+W)) / span`` (:attr:`ZBAutoResult.bubble_rate`). It is the figure that counts
  when iterations overlap (a rank starts the next step as soon as it is done).

``objective`` says which one leads: ``"makespan"`` (the default) ranks by makespan, then span;
``"span"`` by span, then makespan. Both pick among the same kinds of candidate:

* the zero-bubble paper's greedy under ``K``, with several warm-up shapes
  (:mod:`.zb_auto_search`), the best ones improved by swapping neighbouring actions (under the
  leading objective);
* the fixed schedules FThenB, 1F1B, ZBH1 and ZBH2, each when its peak fits ``K``, so ZBAuto is
  never worse than any of them that fits;
* ZB-H2's shape tuned per rank (:mod:`.zb_auto_tune`): more W's deferred where the last
  microbatch's backward waits on its way down. At ``K = 2p`` on the paper's Table 9 costs it
  meets the lower bounds of both figures (:func:`.zb_auto_tune.lower_bounds`), so the default
  (makespan first) returns it too: it has the least makespan and, among those, the least span.

Everything is deterministic (the local search is bounded by a count of timed actions, not by
the clock), so every rank of a pipeline builds the same schedule. :func:`exact_search`
(:mod:`.zb_auto_exact`) gives the least makespan on small sizes to measure the heuristic's gap.

Run by name (``generate_schedule("ZBAuto", p, m)``, the runtime, the static passes) it uses
:data:`DEFAULT_COSTS`, :data:`default_memory_limit` (``ceil(1.5 p)``, between ZBH1's ``p``
and ZBH2's ``2p - 1``) and the makespan first.

Lower bounds (:attr:`ZBAutoResult.lower_bounds`): the last rank starts after ``(p - 1)(F + L)``
and has ``m (F + B + W)`` to run; with ``F = B = W`` and no latency ZBH1 reaches it, so nothing
is faster; with ``B > W`` and ``p < K < 2p - 1`` ZBAuto is strictly faster than ZBH1 (tested on
a grid). The span's bound is in :mod:`.zb_auto_tune`.

>>> res = search_zb_auto(4, 8, costs=(2, 2, 1), memory_limit=6)
>>> res.makespan, res.max_span, max(res.peak_activations) <= 6, res.candidates["ZBH1"]
(47.0, 47.0, True, 49.0)
>>> res.lower_bounds, round(res.bubble_rate, 4), res.objective
((46.0, 47.0), 0.1489, 'makespan')
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
from .zb_auto_model import Problem, Timing, evaluate, from_schedule, peak_memory, to_schedule
from .zb_auto_search import heuristic_orders, improve, score, span_score
from .zb_auto_tune import lower_bounds, tuned_orders
from .zb_h1 import zb_h1
from .zb_h2 import zb_h2

__all__ = ["NAME", "SIZES", "DEFAULT_COSTS", "DEFAULT_OBJECTIVE", "OBJECTIVES", "default_memory_limit",
           "ZBAutoResult", "search_zb_auto", "zb_auto", "zb_auto_result", "check_costs", "check_memory_limit",
           "check_objective"]

NAME = "ZBAuto"
SIZES = SizeRule(chunks=1, chunks_why="ZBAuto places one stage per rank (VMin, VHalf and VZB use two)")
DEFAULT_COSTS = (1.0, 1.0, 1.0)
OBJECTIVES = ("makespan", "span")  # the figure that leads; the other one breaks ties
DEFAULT_OBJECTIVE = "makespan"
FIXED = (("FThenB", fthenb), ("1F1B", one_f_one_b), ("ZBH1", zb_h1), ("ZBH2", zb_h2))
SEARCH_WORK = 400_000  # timed actions the local search may spend (deterministic budget, ~0.5 s)
_DIGITS = 6  # figures equal to 1e-6 time units count as equal when the candidates are ranked


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


def check_objective(name: str, objective) -> str:
    """``objective`` if it is one of :data:`OBJECTIVES`, or :class:`ScheduleError` naming them."""
    if objective not in OBJECTIVES:
        raise ScheduleError(f"{name}: objective (--objective) must be 'makespan' (least makespan, then least "
                            f"longest stage span) or 'span' (the reverse); got {objective!r}")
    return objective


@dataclass(frozen=True)
class ZBAutoResult:
    """The chosen schedule, both of its figures and how it was found: ``source`` is ``"search"``
    (greedy and local search), ``"tuned"`` (:mod:`.zb_auto_tune`) or the fixed schedule it fell
    back to; ``candidates`` and ``candidate_spans`` map each candidate to its makespan and its
    longest stage span (``None``: its peak does not fit the limit; no ``"search"`` when the span
    leads and a candidate already sits on both lower bounds, so the search was skipped);
    ``lower_bounds`` is ``(makespan, longest stage span)`` that no schedule beats."""

    schedule: Schedule
    makespan: float
    max_span: float
    peak_activations: Tuple[int, ...]
    source: str
    memory_limit: int
    costs: Tuple[float, float, float]
    latency: float
    candidates: Dict[str, Optional[float]] = field(default_factory=dict)
    objective: str = DEFAULT_OBJECTIVE
    candidate_spans: Dict[str, Optional[float]] = field(default_factory=dict)
    lower_bounds: Tuple[float, float] = (0.0, 0.0)
    n_microbatches: int = 0

    @property
    def ideal(self) -> float:
        """``m (F + B + W)``: one rank's work."""
        return self.n_microbatches * sum(self.costs)

    @property
    def bubble_rate(self) -> float:
        """The zero-bubble paper's bubble rate, ``(longest stage span - ideal) / longest stage span``."""
        return (self.max_span - self.ideal) / self.max_span if self.max_span else 0.0


def search_zb_auto(n_ranks: int, n_microbatches: int, costs: Sequence[float] = DEFAULT_COSTS,
                   memory_limit: Optional[int] = None, latency: float = 0.0, *,
                   search_work: int = SEARCH_WORK, objective: str = DEFAULT_OBJECTIVE) -> ZBAutoResult:
    """Search (module doc); ``memory_limit`` defaults to :func:`default_memory_limit`, ``objective``
    (``"makespan"`` or ``"span"``) says which figure leads."""
    SIZES.check(NAME, n_ranks, n_microbatches, 1)
    costs = check_costs(NAME, costs)
    limit = check_memory_limit(NAME, default_memory_limit(n_ranks) if memory_limit is None else memory_limit, 1)
    if isinstance(latency, bool) or not isinstance(latency, (int, float)) or not 0 <= latency < math.inf:
        raise ScheduleError(f"{NAME}: latency (--latency) must be a number >= 0, got {latency!r}")
    check_objective(NAME, objective)
    pb = Problem.one_stage_per_rank(n_ranks, n_microbatches, costs, latency, limit)
    key = score if objective == "makespan" else span_score
    bounds = lower_bounds(pb)
    options = []  # ((makespan, span), peak, source, schedule)
    seeds = []  # (key, order) to improve
    for name, generate in FIXED:
        fixed = generate(n_ranks, n_microbatches, 1)
        figures, peaks = _time_fixed(fixed, pb)
        if max(peaks) <= limit:
            options.append((figures, max(peaks), name, fixed))
            order = from_schedule(fixed, n_ranks)
            if order is not None:
                seeds.append((key(Timing(*figures, ())), order))
    tuned = tuned_orders(pb)
    for lead in (score, span_score):  # the tuned shape best in each order, both offered
        if tuned:
            _, t, order = min(tuned, key=lambda x: lead(x[1]))
            options.append(((t.makespan, t.max_span), max(peak_memory(pb, order)), "tuned", to_schedule(order)))
            if lead is key and objective == "span":  # makespan first improves today's seeds only
                seeds.append((key(t), order))
    # span first and a candidate on both bounds: nothing can beat it, skip the greedy and the
    # local search (makespan first runs them anyway, so its choice among equals stays today's)
    if not (objective == "span" and any(_meets(o[0], bounds) for o in options)):
        found = sorted(((key(Timing(*s, ())), order) for s, order in heuristic_orders(pb)), key=lambda x: x[0])
        seeds = sorted(found[:1] + seeds, key=lambda x: x[0])
        n_actions = 3 * n_ranks * n_microbatches
        for (_, order), share in zip(seeds[:2], (0.7, 0.3)):
            improved = improve(pb, order, max(1, int(search_work * share) // n_actions), key)[1]
            t = evaluate(pb, improved)
            options.append(((t.makespan, t.max_span), max(peak_memory(pb, improved)), "search", to_schedule(improved)))
    candidates: Dict[str, Optional[float]] = {name: None for name, _ in FIXED}
    spans: Dict[str, Optional[float]] = dict(candidates)
    for figures, _, source, _ in sorted(options, key=lambda o: _rank_key(o[0], objective), reverse=True):
        candidates[source], spans[source] = figures  # the best of each source is written last
    _, _, source, schedule = min(options, key=lambda o: (_rank_key(o[0], objective), o[1], o[2] != "search"))
    figures, peaks = _time_fixed(schedule, pb)
    return ZBAutoResult(schedule, figures[0], figures[1], peaks, source, limit, costs, float(latency), candidates,
                        objective, spans, bounds, n_microbatches)


def _rank_key(figures: Tuple[float, float], objective: str) -> Tuple[float, float]:
    """``(makespan, span)`` in the objective's order, rounded to :data:`_DIGITS`."""
    ms, span = round(figures[0], _DIGITS), round(figures[1], _DIGITS)
    return (ms, span) if objective == "makespan" else (span, ms)


def _meets(figures: Tuple[float, float], bounds: Tuple[float, float]) -> bool:
    """Whether ``(makespan, span)`` sits on both lower bounds (to :data:`_DIGITS`)."""
    return all(round(f - b, _DIGITS) <= 0 for f, b in zip(figures, bounds))


def _time_fixed(schedule: Schedule, pb: Problem):
    """((makespan, longest span), peak activations per rank) of a schedule under ``pb``'s costs
    and latency, as the simulator times it."""
    from ..simulate import Costs, simulate_schedule

    result = simulate_schedule(schedule, Costs(pb.forward, pb.backward_input, pb.backward_weight), pb.latency)
    return (result.makespan, max(result.spans)), result.peak_activations


@register_schedule(name=NAME, placement="loop", default_chunks=1, sizes=SIZES, order=100,
                   aliases=("ZB-Auto",),
                   summary="searched under a memory limit (by name: costs 1,1,1, limit ceil(1.5p) microbatches)")
def zb_auto(n_ranks: int, n_microbatches: int, n_chunks: int = 1, *, costs: Sequence[float] = DEFAULT_COSTS,
            memory_limit: Optional[int] = None, latency: float = 0.0,
            objective: str = DEFAULT_OBJECTIVE) -> Schedule:
    """The schedule :func:`search_zb_auto` chooses (the generator registered as ``ZBAuto``): one
    stage per rank, ``F``/``I``/``W`` per microbatch, peak ``<= memory_limit`` on every rank. The
    search runs once per set of arguments, each call gets its own lists."""
    SIZES.check(NAME, n_ranks, n_microbatches, n_chunks)
    schedule = zb_auto_result(n_ranks, n_microbatches, costs=costs, memory_limit=memory_limit, latency=latency,
                              objective=objective).schedule
    return {rank: list(actions) for rank, actions in schedule.items()}


def zb_auto_result(n_ranks: int, n_microbatches: int, *, costs: Sequence[float] = DEFAULT_COSTS,
                   memory_limit: Optional[int] = None, latency: float = 0.0,
                   objective: str = DEFAULT_OBJECTIVE) -> ZBAutoResult:
    """:func:`search_zb_auto`'s result, computed once per set of arguments (shared: do not modify
    its schedule's lists; :func:`zb_auto` hands out copies)."""
    costs = check_costs(NAME, costs)
    check_objective(NAME, objective)
    return _cached_search(n_ranks, n_microbatches, costs, memory_limit, latency, objective)


@lru_cache(maxsize=32)
def _cached_search(n_ranks, n_microbatches, costs, memory_limit, latency, objective) -> ZBAutoResult:
    return search_zb_auto(n_ranks, n_microbatches, costs, memory_limit, latency, objective=objective)
