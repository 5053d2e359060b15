"""V-Min, V-Half and V-ZB: V-shaped schedules with controllable activation memory.

Placement ``v`` (rank ``r`` holds stages ``r`` and ``2p - 1 - r``), backward split in ``I`` and
``W``, as in the controllable-memory paper (Qi et al., 2024), which builds the three schedules by
repeating one V-shaped building block whose lifespan sets the memory. Here each one is built by
the memory-capped greedy of :mod:`.zb_auto_search` on the V placement (unit costs, best of its
policies, deadlock-free by construction or discarded; ZBV's order competes where its peak fits,
so VZB is ZBV wherever the greedy finds nothing faster) under the paper's memory budget, in
microbatches' worth per rank (one microbatch's worth = both of a rank's stage activations):

=========  ============================  ===============================================
schedule   peak per rank (microbatches)  in stage activations (what the simulator counts)
=========  ============================  ===============================================
VMin       ``min(p, (p + 4) // 3)``      ``2 * min(p, (p + 4) // 3)``, about 1/3 of 1F1B
VHalf      ``min(p, (p + 2) // 2)``      ``2 * min(p, (p + 2) // 2)``, about 1/2 of 1F1B
VZB        ``p``                         ``2p``, 1F1B's (and ZBV's)
=========  ============================  ===============================================

The orders are not the paper's building blocks, so the bubbles differ from the paper's (measured
in ``docs/schedules.md``; VZB reaches the ``6m + p - 1`` lower bound as ZBV does). Any memory
budget of at least 2 stage activations works through :func:`v_memory_schedule`.

Constraints: ``n_chunks == 2``; any ``n_microbatches >= 1``.

>>> from paddle_ext.passes import simulate_schedule
>>> [max(simulate_schedule(g(4, 8)).peak_activations) for g in (v_min, v_half, v_zb)]
[4, 6, 8]
>>> v_memory_schedule(4, 8, memory_limit=1)
Traceback (most recent call last):
...
paddle_ext.errors.ScheduleError: V schedule: memory_limit (--memory-limit) must be an int >= 2 (activations per rank, in stage activations (2 per microbatch on a V)); got 1: the least that works is 2
"""
from __future__ import annotations

from functools import lru_cache
from typing import Tuple

from paddle_ext.errors import ScheduleError
from ..schedule_ir import Action, Kind, Schedule
from ..stage_placement import stage_to_rank_map
from ._checks import SizeRule
from ._registry import register_schedule
from .zb_auto import check_memory_limit
from .zb_auto_model import Problem, evaluate, from_schedule, peak_memory
from .zb_auto_search import heuristic_orders, score
from .zb_v import zb_v

__all__ = ["SIZES", "v_min", "v_half", "v_zb", "v_memory_schedule", "memory_budget", "LEAST_LIMIT"]

SIZES = SizeRule(chunks=2, chunks_why="a V shape puts exactly 2 stages on each rank")
LEAST_LIMIT = 2  # stage activations: rank p-1 holds the two middle stages of one microbatch at once
_BUDGETS = {"VMin": lambda p: (p + 4) // 3, "VHalf": lambda p: (p + 2) // 2, "VZB": lambda p: p}


def memory_budget(name: str, n_ranks: int) -> int:
    """Peak stage activations per rank of ``VMin``, ``VHalf`` or ``VZB`` on ``n_ranks`` ranks."""
    return 2 * min(n_ranks, _BUDGETS[name](n_ranks))


@lru_cache(maxsize=64)
def _order(n_ranks: int, n_microbatches: int, memory_limit: int) -> Tuple[Tuple[Tuple[str, int, int], ...], ...]:
    ranks = stage_to_rank_map(n_ranks, 2, "v")
    pb = Problem(n_ranks, n_microbatches, tuple(ranks[s] for s in range(2 * n_ranks)), 1.0, 1.0, 1.0, 0.0,
                 memory_limit)
    found = heuristic_orders(pb)
    zbv = from_schedule(zb_v(n_ranks, n_microbatches), n_ranks)  # the fixed V order competes where it fits
    timing = evaluate(pb, zbv)
    if max(peak_memory(pb, zbv)) <= memory_limit and timing is not None:
        found = sorted(found + [(score(timing), zbv)], key=lambda x: x[0])
    if not found:  # pragma: no cover - the reserving policies cannot deadlock from 2 activations up
        raise ScheduleError(f"internal: no V schedule found for p={n_ranks}, m={n_microbatches}, "
                            f"memory_limit={memory_limit}; please report this")
    return tuple(tuple(acts) for acts in found[0][1])


def v_memory_schedule(n_ranks: int, n_microbatches: int, memory_limit: int, name: str = "V schedule") -> Schedule:
    """A V schedule whose peak is at most ``memory_limit`` stage activations on every rank."""
    SIZES.check(name, n_ranks, n_microbatches, 2)
    check_memory_limit(name, memory_limit, LEAST_LIMIT, "stage activations (2 per microbatch on a V)")
    order = _order(n_ranks, n_microbatches, min(memory_limit, 2 * n_ranks * n_microbatches))
    return {r: [Action(s, Kind(k), j) for k, s, j in acts] for r, acts in enumerate(order)}


def _named(name: str, n_ranks: int, n_microbatches: int, n_chunks: int) -> Schedule:
    SIZES.check(name, n_ranks, n_microbatches, n_chunks)
    return v_memory_schedule(n_ranks, n_microbatches, memory_budget(name, n_ranks), name)


@register_schedule(name="VMin", placement="v", default_chunks=2, sizes=SIZES, order=110,
                   aliases=("V-Min",), summary="V shape, peak min(p, (p+4)//3) microbatches (about 1/3 of 1F1B)")
def v_min(n_ranks: int, n_microbatches: int, n_chunks: int = 2) -> Schedule:
    """V-Min: about 1/3 of 1F1B's activation memory."""
    return _named("VMin", n_ranks, n_microbatches, n_chunks)


@register_schedule(name="VHalf", placement="v", default_chunks=2, sizes=SIZES, order=120,
                   aliases=("V-Half",), summary="V shape, peak min(p, (p+2)//2) microbatches (about 1/2 of 1F1B)")
def v_half(n_ranks: int, n_microbatches: int, n_chunks: int = 2) -> Schedule:
    """V-Half: about 1/2 of 1F1B's activation memory."""
    return _named("VHalf", n_ranks, n_microbatches, n_chunks)


@register_schedule(name="VZB", placement="v", default_chunks=2, sizes=SIZES, order=130,
                   aliases=("V-ZB",), summary="V shape, zero bubble, peak p microbatches (1F1B's)")
def v_zb(n_ranks: int, n_microbatches: int, n_chunks: int = 2) -> Schedule:
    """V-ZB: 1F1B's activation memory, zero bubble once ``m >= 2p - 1`` (as ZBV)."""
    return _named("VZB", n_ranks, n_microbatches, n_chunks)
