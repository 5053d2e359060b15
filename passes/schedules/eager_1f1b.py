"""Eager 1F1B (Paddle's ``Eager1F1B``): 1F1B with about twice the warm-up forwards.

Rank ``r`` runs ``min(2 (p - r) - 1, m)`` warm-up forwards, then one backward and one forward in
turn while forwards remain, then drains the backwards. The extra forwards are sent before the
first backward needs the link, so a rank's sends overlap its compute on a real network; the price
is activation memory: rank ``r`` holds up to ``min(2 (p - r) - 1, m)`` microbatches (1F1B:
``min(p - r, m)``). The last rank's order is 1F1B's. Paddle asserts ``m >= 2 (p - r) - 1``; here
the warm-up is capped at ``m`` as 1F1B's is, so any ``n_microbatches >= 1`` works. Constraints:
one stage per rank (``n_chunks == 1``). Unit costs (F = 1, B = 2): makespan ``3 (m + p - 1)``,
as 1F1B and FThenB.

>>> from paddle_ext.passes import simulate_schedule, format_timeline
>>> print(format_timeline(simulate_schedule(eager_1f1b(2, 4))))
rank 0 | 0F0 0F1 0F2  .  0B0 ~~~ 0F3 0B1 ~~~  .  0B2 ~~~  .  0B3 ~~~
rank 1 |  .  1F0 1B0 ~~~ 1F1 1B1 ~~~ 1F2 1B2 ~~~ 1F3 1B3 ~~~
"""
from __future__ import annotations

from ..schedule_ir import Schedule
from ._checks import SizeRule
from ._phases import expand_phases
from ._registry import register_schedule

NAME = "Eager1F1B"
SIZES = SizeRule(chunks=1, chunks_why="each rank holds one stage (VPP is 1F1B with several)")


@register_schedule(name=NAME, placement="loop", default_chunks=1, sizes=SIZES, order=140,
                   summary="1F1B with 2(p-r)-1 warm-up forwards: sends ahead, twice the memory")
def eager_1f1b(n_ranks: int, n_microbatches: int, n_chunks: int = 1) -> Schedule:
    """Eager 1F1B order on ``n_ranks`` ranks, one stage each."""
    SIZES.check(NAME, n_ranks, n_microbatches, n_chunks)
    schedule = {}
    for rank in range(n_ranks):
        warmup = min(2 * (n_ranks - rank) - 1, n_microbatches)
        phases = [(warmup, "F0"), (n_microbatches - warmup, "B0 F0"), (warmup, "B0")]
        schedule[rank] = expand_phases(phases, (rank,), n_microbatches)
    return schedule
