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

from typing import List, Tuple

from paddle_ext.passes.schedule_ir import Action, Kind, Schedule
from paddle_ext.passes.schedules._checks import check_sizes, require_divisible

NAME = "VPP"


def interleaved_order(n_ranks: int, n_microbatches: int, n_chunks: int, rank: int) -> List[Action]:
    """Rank ``rank``'s interleaved order with full backwards (shared with InterleavedZB)."""
    group = n_ranks * n_chunks
    n_work = n_microbatches * n_chunks

    def stage_and_mb(k: int, backward: bool) -> Tuple[int, int]:
        block, within = divmod(k, group)
        chunk = within // n_ranks
        if backward:
            chunk = n_chunks - 1 - chunk
        return chunk * n_ranks + rank, block * n_ranks + within % n_ranks

    if n_chunks == 1:
        warmup = n_ranks - 1 - rank
    else:
        warmup = 2 * (n_ranks - 1 - rank) + (n_chunks - 1) * n_ranks
    warmup = min(warmup, n_work)

    def action(k: int, kind: Kind) -> Action:
        stage, mb = stage_and_mb(k, kind is not Kind.F)
        return Action(stage, kind, mb)

    order = [action(k, Kind.F) for k in range(warmup)]
    for k in range(n_work - warmup):
        order += [action(warmup + k, Kind.F), action(k, Kind.B)]
    order += [action(k, Kind.B) for k in range(n_work - warmup, n_work)]
    return order


def interleaved_1f1b(n_ranks: int, n_microbatches: int, n_chunks: int = 2) -> Schedule:
    """Interleaved 1F1B on ``n_ranks`` ranks with ``n_chunks`` stages each (``p * v`` stages)."""
    check_sizes(NAME, n_ranks, n_microbatches, n_chunks)
    require_divisible(NAME, n_microbatches, n_ranks, "microbatches enter the pipeline in groups of n_ranks")
    return {rank: interleaved_order(n_ranks, n_microbatches, n_chunks, rank) for rank in range(n_ranks)}
