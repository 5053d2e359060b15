"""1F1B (PipeDream-Flush): a few warm-up forwards, then one forward and one backward in turn.

Rank ``r`` runs ``min(p - 1 - r, m)`` warm-up forwards, alternates ``F`` and ``B`` while
forwards remain, then drains the backwards. Constraints: one stage per rank (``n_chunks == 1``),
any ``n_microbatches >= 1``. Unit costs (F = 1, B = 2): same makespan as FThenB, ``3 (m + p - 1)``,
bubble ``(p - 1) / m`` of ideal, but rank ``r`` holds at most ``min(p - r, m)`` activations.

>>> from paddle_ext.passes import simulate_schedule, format_timeline
>>> print(format_timeline(simulate_schedule(one_f_one_b(3, 4))))
rank 0 | 0F0 0F1 0F2  .   .   .   .  0B0 ~~~ 0F3 0B1 ~~~  .  0B2 ~~~  .  0B3 ~~~
rank 1 |  .  1F0 1F1  .   .  1B0 ~~~ 1F2 1B1 ~~~ 1F3 1B2 ~~~  .  1B3 ~~~
rank 2 |  .   .  2F0 2B0 ~~~ 2F1 2B1 ~~~ 2F2 2B2 ~~~ 2F3 2B3 ~~~
"""
from __future__ import annotations

from ..schedule_ir import Schedule
from ._checks import SizeRule
from ._registry import register_schedule
from ._phases import expand_phases

NAME = "1F1B"
SIZES = SizeRule(chunks=1, chunks_why="each rank holds one stage (VPP is 1F1B with several)")


@register_schedule(name=NAME, placement="loop", default_chunks=1, sizes=SIZES, order=20,
                   aliases=(), summary="warm-up forwards, then one forward one backward")
def one_f_one_b(n_ranks: int, n_microbatches: int, n_chunks: int = 1) -> Schedule:
    """1F1B order on ``n_ranks`` ranks, one stage each."""
    SIZES.check(NAME, n_ranks, n_microbatches, n_chunks)
    schedule = {}
    for rank in range(n_ranks):
        warmup = min(n_ranks - 1 - rank, n_microbatches)
        phases = [(warmup, "F0"), (n_microbatches - warmup, "F0 B0"), (warmup, "B0")]
        schedule[rank] = expand_phases(phases, (rank,), n_microbatches)
    return schedule
