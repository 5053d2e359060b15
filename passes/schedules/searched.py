"""Generate a schedule by name with the options of the searched ones (ZBAuto's costs, memory
limit and latency; a V-memory schedule's own memory limit), as ``paddle-ext schedule`` does.

>>> s = generate_searched("ZBAuto", 4, 8, costs=(2, 2, 1), memory_limit=6)
>>> from paddle_ext.passes import Costs, simulate_schedule
>>> r = simulate_schedule(s, Costs(2, 2, 1)); r.makespan, max(r.peak_activations)
(47.0, 6)
>>> generate_searched("1F1B", 4, 8, memory_limit=3)
Traceback (most recent call last):
...
paddle_ext.errors.ScheduleError: --memory-limit applies to ZBAuto (microbatches per rank) and to VMin, VHalf, VZB (stage activations per rank); 1F1B has a fixed memory: drop --memory-limit or use ZBAuto
"""
from __future__ import annotations

from typing import Optional, Sequence

from paddle_ext.errors import ScheduleError
from ..schedule_ir import Schedule
from ._registry import lookup as get_schedule_info
from .v_memory import v_half, v_memory_schedule, v_min, v_zb
from .zb_auto import DEFAULT_COSTS, zb_auto

__all__ = ["generate_searched", "SEARCHED", "V_MEMORY"]

SEARCHED = ("ZBAuto",)
V_MEMORY = ("VMin", "VHalf", "VZB")
V_GENERATORS = {"VMin": v_min, "VHalf": v_half, "VZB": v_zb}


def generate_searched(name: str, n_ranks: int, n_microbatches: int, n_chunks: Optional[int] = None, *,
                      costs: Sequence[float] = DEFAULT_COSTS, memory_limit: Optional[int] = None,
                      latency: float = 0.0) -> Schedule:
    """``generate_schedule(name, ...)``, with ``costs``/``memory_limit``/``latency`` steering ZBAuto
    and ``memory_limit`` (stage activations) a V-memory schedule; other schedules refuse a limit."""
    info = get_schedule_info(name)
    chunks = info.default_chunks if n_chunks is None else n_chunks
    if info.name in SEARCHED:
        return zb_auto(n_ranks, n_microbatches, chunks, costs=tuple(costs), memory_limit=memory_limit,
                       latency=latency)
    if info.name in V_MEMORY:   # built for the given costs (the greedy part is timed at them)
        if memory_limit is None:
            return V_GENERATORS[info.name](n_ranks, n_microbatches, chunks, costs=tuple(costs))
        info.sizes.check(info.name, n_ranks, n_microbatches, chunks)
        return v_memory_schedule(n_ranks, n_microbatches, memory_limit, info.name, costs=tuple(costs))
    if memory_limit is None:
        return info.generate(n_ranks, n_microbatches, chunks)
    raise ScheduleError(f"--memory-limit applies to ZBAuto (microbatches per rank) and to {', '.join(V_MEMORY)} "
                        f"(stage activations per rank); {info.name} has a fixed memory: drop --memory-limit or use "
                        "ZBAuto")
