"""FThenB (GPipe): every rank runs all its forwards, then all its backwards.

Constraints: one stage per rank (``n_chunks == 1``); any ``n_microbatches >= 1``.
Unit costs (F = 1, B = 2): makespan ``3 (m + p - 1)``, bubble ``(p - 1) / m`` of the ideal
``3m``; every rank holds all ``m`` activations at its peak.

>>> from paddle_ext.passes import simulate_schedule, format_timeline
>>> print(format_timeline(simulate_schedule(fthenb(3, 3))))
rank 0 | 0F0 0F1 0F2  .   .   .   .   .   .  0B0 ~~~ 0B1 ~~~ 0B2 ~~~
rank 1 |  .  1F0 1F1 1F2  .   .   .  1B0 ~~~ 1B1 ~~~ 1B2 ~~~
rank 2 |  .   .  2F0 2F1 2F2 2B0 ~~~ 2B1 ~~~ 2B2 ~~~
"""
from __future__ import annotations

from ..schedule_ir import Schedule
from ._checks import SizeRule
from ._registry import register_schedule
from ._phases import expand_phases

NAME = "FThenB"
SIZES = SizeRule(chunks=1, chunks_why="each rank holds one stage (LoopedBFS is FThenB with several)")


@register_schedule(name=NAME, placement="loop", default_chunks=1, sizes=SIZES, order=10,
                   aliases=("GPipe",), summary="all forwards, then all backwards")
def fthenb(n_ranks: int, n_microbatches: int, n_chunks: int = 1) -> Schedule:
    """GPipe order on ``n_ranks`` ranks: ``F`` of every microbatch, then ``B`` of every microbatch."""
    SIZES.check(NAME, n_ranks, n_microbatches, n_chunks)
    phases = [(n_microbatches, "F0"), (n_microbatches, "B0")]
    return {rank: expand_phases(phases, (rank,), n_microbatches) for rank in range(n_ranks)}
