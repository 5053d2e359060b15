"""Interleaved 1F1B (VPP, Megatron's virtual pipeline): 1F1B over ``v`` chunks per rank.

Placement ``loop``: stage ``s`` on rank ``s % p``, so rank ``r`` holds stages ``r, r+p, ...``.
Microbatches go through a rank in *rounds*: forwards visit chunk 0 for the microbatches of a round,
then chunk 1 for the same ones, and so on; backwards visit the chunks in reverse. Rank ``r`` warms
up with ``2 (p - 1 - r) + (v - 1) g`` forwards (``p - 1 - r`` when ``v == 1``), ``g`` being the
size of the largest round, then alternates one forward, one backward.

Rounds (:func:`rounds`): ``max(1, m // p)`` of them, sizes as equal as possible, the larger ones
first, so every round has ``p <= g < 2p`` microbatches when ``m >= p`` (one round of ``m`` when
``m < p``). When ``m`` is a multiple of ``p`` every round has ``p`` (Megatron's and Paddle's
VPP); when ``m`` is a multiple of the number of rounds it is torch's Interleaved1F1B order. Any
``m >= 1`` and ``n_chunks >= 1`` (default 2) are accepted.

Unit costs per chunk (F = 1, B = 2), ``m`` a multiple of ``p``: makespan ``3 (v m + p - 1)``, bubble
``(p - 1) / (v m)`` of ideal, ``v`` times smaller than 1F1B's, for ``v`` times more point-to-point
messages. Peak activations on rank ``r``: at most its warm-up plus one, ``(v - 1) g + 2 (p - 1 - r)
+ 1`` stage activations, and never more than ``v m`` (tested over a grid of ``p``, ``m``, ``v``).

>>> from paddle_ext.passes import simulate_schedule, format_timeline
>>> print(format_timeline(simulate_schedule(interleaved_1f1b(2, 2, 2))))
rank 0 | 0F0 0F1 2F0 2F1  .   .  2B0 ~~~  .  2B1 ~~~ 0B0 ~~~ 0B1 ~~~
rank 1 |  .  1F0 1F1 3F0 3B0 ~~~ 3F1 3B1 ~~~ 1B0 ~~~ 1B1 ~~~
"""
from __future__ import annotations

from typing import List

from ..schedule_ir import Action, Kind, Schedule
from ._checks import SizeRule
from ._registry import register_schedule

NAME = "VPP"
SIZES = SizeRule()  # any n_chunks, any n_microbatches: rounds absorb m % p


def rounds(n_ranks: int, n_microbatches: int) -> List[range]:
    """The microbatches of each round: ``max(1, m // p)`` consecutive ranges, the larger first.

    >>> [list(r) for r in rounds(4, 10)], [len(r) for r in rounds(4, 8)], [len(r) for r in rounds(4, 3)]
    ([[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]], [4, 4], [3])
    """
    n_rounds = max(1, n_microbatches // n_ranks)
    size, extra = divmod(n_microbatches, n_rounds)
    out, first = [], 0
    for i in range(n_rounds):
        last = first + size + (1 if i < extra else 0)
        out.append(range(first, last))
        first = last
    return out


def warmup_forwards(n_ranks: int, n_microbatches: int, n_chunks: int, rank: int) -> int:
    """Forwards rank ``rank`` runs before its first backward (module docstring)."""
    if n_chunks == 1:
        warmup = n_ranks - 1 - rank
    else:
        largest = max(len(r) for r in rounds(n_ranks, n_microbatches))
        warmup = 2 * (n_ranks - 1 - rank) + (n_chunks - 1) * largest
    return min(warmup, n_chunks * n_microbatches)


def interleaved_order(n_ranks: int, n_microbatches: int, n_chunks: int, rank: int,
                      backward: Kind = Kind.B) -> List[Action]:
    """Rank ``rank``'s interleaved order (``backward`` = B, or I for InterleavedZB)."""
    new_action, kind_f = tuple.__new__, Kind.F  # ~10^5 actions: skip NamedTuple.__new__'s Python frame
    groups, chunks = rounds(n_ranks, n_microbatches), range(n_chunks)
    # per round: chunk 0 for all its microbatches, then chunk 1, ... (chunks reversed for backward)
    forwards = [new_action(Action, (c * n_ranks + rank, kind_f, mb)) for g in groups for c in chunks for mb in g]
    backwards = [new_action(Action, (c * n_ranks + rank, backward, mb))
                 for g in groups for c in reversed(chunks) for mb in g]
    n_work = len(forwards)
    warmup = warmup_forwards(n_ranks, n_microbatches, n_chunks, rank)
    steady = [a for pair in zip(forwards[warmup:], backwards) for a in pair]
    return forwards[:warmup] + steady + backwards[n_work - warmup:]


@register_schedule(name=NAME, placement="loop", default_chunks=2, sizes=SIZES, order=30,
                   aliases=("Interleaved1F1B",), summary="1F1B over v interleaved chunks")
def interleaved_1f1b(n_ranks: int, n_microbatches: int, n_chunks: int = 2) -> Schedule:
    """Interleaved 1F1B on ``n_ranks`` ranks with ``n_chunks`` stages each (``p * v`` stages)."""
    SIZES.check(NAME, n_ranks, n_microbatches, n_chunks)
    return {rank: interleaved_order(n_ranks, n_microbatches, n_chunks, rank) for rank in range(n_ranks)}
