"""Interleaved 1F1B (VPP, Megatron's virtual pipeline): 1F1B over ``v`` chunks per rank.

Placement ``loop``: stage ``s`` on rank ``s % p``, so rank ``r`` holds stages ``r, r+p, ...``.
Microbatches go through a rank in groups of ``p``: forwards visit chunk 0 for ``p`` microbatches,
then chunk 1 for the same ones, and so on; backwards visit the chunks in reverse. Rank ``r`` warms
up with ``2 (p - 1 - r) + (v - 1) p`` forwards (``p - 1 - r`` when ``v == 1``), then alternates.

Constraints: ``n_microbatches`` a multiple of ``n_ranks`` (the groups of ``p``, as in Megatron and
Paddle's VPP pass); any ``n_chunks >= 1`` (default 2). Unit costs per chunk (F = 1, B = 2): makespan
``3 (v m + p - 1)``, bubble ``(p - 1) / (v m)`` of ideal, ``v`` times smaller than 1F1B's, for
``v`` times more point-to-point messages.

>>> from paddle_ext.passes import simulate_schedule, format_timeline
>>> print(format_timeline(simulate_schedule(interleaved_1f1b(2, 2, 2))))
rank 0 | 0F0 0F1 2F0 2F1  .   .  2B0 ~~~  .  2B1 ~~~ 0B0 ~~~ 0B1 ~~~
rank 1 |  .  1F0 1F1 3F0 3B0 ~~~ 3F1 3B1 ~~~ 1B0 ~~~ 1B1 ~~~
"""
from __future__ import annotations

from typing import List

from ..schedule_ir import Action, Kind, Schedule
from ._checks import SizeRule

NAME = "VPP"
SIZES = SizeRule(multiple_of_ranks=True, multiple_why="microbatches enter the pipeline in groups of n_ranks")


def interleaved_order(n_ranks: int, n_microbatches: int, n_chunks: int, rank: int,
                      backward: Kind = Kind.B) -> List[Action]:
    """Rank ``rank``'s interleaved order (``backward`` = B, or I for InterleavedZB); needs
    ``n_microbatches % n_ranks == 0``."""
    new_action, kind_f = tuple.__new__, Kind.F  # ~10^5 actions: skip NamedTuple.__new__'s Python frame
    blocks, chunks = range(n_microbatches // n_ranks), range(n_chunks)
    # per block of n_ranks microbatches: chunk 0 for all of them, then chunk 1, ... (reversed backward)
    forwards = [new_action(Action, (c * n_ranks + rank, kind_f, b * n_ranks + j))
                for b in blocks for c in chunks for j in range(n_ranks)]
    backwards = [new_action(Action, (c * n_ranks + rank, backward, b * n_ranks + j))
                 for b in blocks for c in reversed(chunks) for j in range(n_ranks)]
    n_work = len(forwards)
    if n_chunks == 1:
        warmup = n_ranks - 1 - rank
    else:
        warmup = 2 * (n_ranks - 1 - rank) + (n_chunks - 1) * n_ranks
    warmup = min(warmup, n_work)
    steady = [a for pair in zip(forwards[warmup:], backwards) for a in pair]
    return forwards[:warmup] + steady + backwards[n_work - warmup:]


def interleaved_1f1b(n_ranks: int, n_microbatches: int, n_chunks: int = 2) -> Schedule:
    """Interleaved 1F1B on ``n_ranks`` ranks with ``n_chunks`` stages each (``p * v`` stages)."""
    SIZES.check(NAME, n_ranks, n_microbatches, n_chunks)
    return {rank: interleaved_order(n_ranks, n_microbatches, n_chunks, rank) for rank in range(n_ranks)}
