"""V-Min, V-Half and V-ZB: V-shaped schedules with controllable activation memory.

Placement ``v`` (rank ``r`` holds stages ``r`` and ``2p - 1 - r``), backward split in ``I`` and
``W``, as in the controllable-memory paper (Qi et al., 2024), at its memory budgets, in
microbatches' worth per rank (one microbatch's worth = both of a rank's stage activations):

=========  ============================  ===============================================
schedule   peak per rank (microbatches)  in stage activations (what the simulator counts)
=========  ============================  ===============================================
VMin       ``min(p, (p + 4) // 3)``      ``2 * min(p, (p + 4) // 3)``, about 1/3 of 1F1B
VHalf      ``min(p, (p + 2) // 2)``      ``2 * min(p, (p + 2) // 2)``, about 1/2 of 1F1B
VZB        ``p``                         ``2p``, 1F1B's (and ZBV's)
=========  ============================  ===============================================

**VMin and VHalf** are the paper's building-block schedules (:mod:`.v_blocks`: one V-shaped
block per microbatch every 6 unit slots, ``W``'s in the free slots, warm-up and cool-down
squeezed); their peak is the budget above for every ``p`` (``2 min(budget, m)`` stage
activations when ``m`` is smaller). Any ``m >= 1`` works. The memory-capped greedy of
:mod:`.zb_auto_search` on the V placement (at the given costs, best of its policies) competes
and is kept only where it is strictly faster at the same budget, per ``(p, m, costs)``: mostly
``m`` near ``p`` and costs other than 1,1,1. It runs up to :data:`GREEDY_MAX_ACTIONS` actions
(about 1 s there); above, the block order is used alone (it is 6m plus a constant that does not
grow with ``m`` at unit costs). **VZB** is the greedy under ``2p`` with ZBV's order competing
(ZBV wherever the greedy finds nothing faster; both reach the ``6m + p - 1`` lower bound for
``m >= 2p - 1``). Any memory budget of at least 2 stage activations works through
:func:`v_memory_schedule` (greedy and ZBV; VMin's and VHalf's block too where its peak fits).

Costs: the generators take ``costs=(F, B, W)`` (``B`` = the input backward ``I``, as on the
command line; default 1,1,1): the block's order is the paper's unit-cost order, timed at those
costs; the greedy is run at them.

Constraints: ``n_chunks == 2``; any ``n_microbatches >= 1``.

>>> from paddle_ext.passes import Costs, simulate_schedule
>>> [max(simulate_schedule(g(4, 8)).peak_activations) for g in (v_min, v_half, v_zb)]
[4, 6, 8]
>>> [simulate_schedule(g(4, 8)).makespan for g in (v_min, v_half, v_zb)]
[59.0, 53.0, 51.0]
>>> simulate_schedule(v_half(4, 32, costs=(1, 2, 1)), Costs(1, 2, 1)).makespan
296.0
>>> v_memory_schedule(4, 8, memory_limit=1)
Traceback (most recent call last):
...
paddle_ext.errors.ScheduleError: V schedule: memory_limit (--memory-limit) must be an int >= 2 (activations per rank, in stage activations (2 per microbatch on a V)); got 1: the least that works is 2
"""
from __future__ import annotations

from functools import lru_cache
from typing import Optional, Sequence, Tuple, Union

from paddle_ext.errors import ScheduleError
from ..schedule_ir import Action, Kind, Schedule
from ..sim_model import Costs
from ..stage_placement import stage_to_rank_map
from ._checks import SizeRule
from ._registry import register_schedule
from .v_blocks import BLOCKS, block_order
from .zb_auto import DEFAULT_COSTS, check_costs, check_memory_limit
from .zb_auto_model import Order, Problem, evaluate, from_schedule, peak_memory
from .zb_auto_search import heuristic_orders, score
from .zb_v import zb_v

__all__ = ["SIZES", "v_min", "v_half", "v_zb", "v_memory_schedule", "memory_budget", "LEAST_LIMIT",
           "GREEDY_MAX_ACTIONS"]

SIZES = SizeRule(chunks=2, chunks_why="a V shape puts exactly 2 stages on each rank")
LEAST_LIMIT = 2  # stage activations: rank p-1 holds the two middle stages of one microbatch at once
GREEDY_MAX_ACTIONS = 6144  # 6 p m: the greedy's 13 policies take up to about 1 s here (p = 16, m = 64)
_BUDGETS = {"VMin": lambda p: (p + 4) // 3, "VHalf": lambda p: (p + 2) // 2, "VZB": lambda p: p}
CostsLike = Union[Costs, Sequence[float], None]


def memory_budget(name: str, n_ranks: int) -> int:
    """Peak stage activations per rank of ``VMin``, ``VHalf`` or ``VZB`` on ``n_ranks`` ranks."""
    return 2 * min(n_ranks, _BUDGETS[name](n_ranks))


def _costs(name: str, costs: CostsLike) -> Tuple[float, float, float]:
    if costs is None:
        return DEFAULT_COSTS
    if isinstance(costs, Costs):
        costs = (costs.forward, costs.backward_input, costs.backward_weight)
    return check_costs(name, costs)


@lru_cache(maxsize=64)
def _order(n_ranks: int, n_microbatches: int, memory_limit: int, costs: Tuple[float, float, float],
           block: Optional[str]) -> Tuple[Tuple[Tuple[str, int, int], ...], ...]:
    """The fastest candidate at ``costs`` within ``memory_limit``: ``block``'s order (first, so it
    wins ties), the greedy's (up to GREEDY_MAX_ACTIONS, or always without a block), ZBV's."""
    p, m = n_ranks, n_microbatches
    ranks = stage_to_rank_map(p, 2, "v")
    pb = Problem(p, m, tuple(ranks[s] for s in range(2 * p)), *costs, 0.0, memory_limit)
    candidates = []
    if block is not None:
        order = block_order(block, p, m)
        if max(peak_memory(pb, order)) <= memory_limit:
            candidates.append(order)
    if not candidates or 6 * p * m <= GREEDY_MAX_ACTIONS:
        candidates.extend(order for _, order in heuristic_orders(pb))
        if costs != DEFAULT_COSTS:  # the unit-cost greedy's orders can be faster at other costs too
            unit = Problem(p, m, pb.stage_ranks, *DEFAULT_COSTS, 0.0, memory_limit)
            candidates.extend(order for _, order in heuristic_orders(unit))
        zbv = from_schedule(zb_v(p, m), p)  # the fixed V order competes where it fits
        if max(peak_memory(pb, zbv)) <= memory_limit:
            candidates.append(zbv)
    if len(candidates) > 1:
        timed = [(score(t), i) for i, t in enumerate(evaluate(pb, o) for o in candidates) if t is not None]
        candidates = [candidates[min(timed)[1]]] if timed else []
    if not candidates:  # pragma: no cover - the reserving policies cannot deadlock from 2 activations up
        raise ScheduleError(f"internal: no V schedule found for p={p}, m={m}, memory_limit={memory_limit}; "
                            "please report this")
    return tuple(tuple(acts) for acts in candidates[0])


def _schedule(order: Order) -> Schedule:
    kinds = {k.value: k for k in (Kind.F, Kind.I, Kind.W)}
    return {r: [Action(s, kinds[k], j) for k, s, j in acts] for r, acts in enumerate(order)}


def v_memory_schedule(n_ranks: int, n_microbatches: int, memory_limit: int, name: str = "V schedule", *,
                      costs: CostsLike = None) -> Schedule:
    """A V schedule whose peak is at most ``memory_limit`` stage activations on every rank, the
    fastest found at ``costs`` (F, B, W); ``name`` VMin or VHalf adds its building block."""
    SIZES.check(name, n_ranks, n_microbatches, 2)
    limit = check_memory_limit(name, memory_limit, LEAST_LIMIT, "stage activations (2 per microbatch on a V)")
    block = name if name in BLOCKS else None
    return _schedule(_order(n_ranks, n_microbatches, min(limit, 2 * n_ranks * n_microbatches),
                            _costs(name, costs), block))


def _named(name: str, n_ranks: int, n_microbatches: int, n_chunks: int, costs: CostsLike) -> Schedule:
    SIZES.check(name, n_ranks, n_microbatches, n_chunks)
    return v_memory_schedule(n_ranks, n_microbatches, memory_budget(name, n_ranks), name, costs=costs)


@register_schedule(name="VMin", placement="v", default_chunks=2, sizes=SIZES, order=110,
                   aliases=("V-Min",), summary="V shape, peak min(p, (p+4)//3) microbatches (about 1/3 of 1F1B)")
def v_min(n_ranks: int, n_microbatches: int, n_chunks: int = 2, *, costs: CostsLike = None) -> Schedule:
    """V-Min: the paper's V-Min building block repeated (rank ``r``: F chunk 0 at slot ``r``, F chunk 1
    at ``2p-1-r``, I chunk 1 at ``2p+g+r``, I chunk 0 at ``4p+g-1-r``, every 6 slots), about 1/3
    of 1F1B's activation memory; the greedy where strictly faster."""
    return _named("VMin", n_ranks, n_microbatches, n_chunks, costs)


@register_schedule(name="VHalf", placement="v", default_chunks=2, sizes=SIZES, order=120,
                   aliases=("V-Half",), summary="V shape, peak min(p, (p+2)//2) microbatches (about 1/2 of 1F1B)")
def v_half(n_ranks: int, n_microbatches: int, n_chunks: int = 2, *, costs: CostsLike = None) -> Schedule:
    """V-Half: the paper's V-Half building block repeated (rank ``r``: F chunk 0 at slot ``2r``, F
    chunk 1 at ``3p-2-r``, I chunk 1 at ``3p+g-1+2r``, I chunk 0 at ``6p+g-2-r``, every 6 slots),
    about 1/2 of 1F1B's activation memory; the greedy where strictly faster."""
    return _named("VHalf", n_ranks, n_microbatches, n_chunks, costs)


@register_schedule(name="VZB", placement="v", default_chunks=2, sizes=SIZES, order=130,
                   aliases=("V-ZB",), summary="V shape, zero bubble, peak p microbatches (1F1B's)")
def v_zb(n_ranks: int, n_microbatches: int, n_chunks: int = 2, *, costs: CostsLike = None) -> Schedule:
    """V-ZB: 1F1B's activation memory, zero bubble once ``m >= 2p - 1`` (as ZBV)."""
    return _named("VZB", n_ranks, n_microbatches, n_chunks, costs)
