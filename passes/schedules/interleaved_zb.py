"""Interleaved zero bubble: interleaved 1F1B (VPP) with the backward split in I and W and the
W's deferred to fill the bubbles, as ZB-H1 does for one chunk.

Rank ``r`` follows VPP's order with each ``B`` replaced by ``I``, and runs the ``W`` of its
``k``-th backward right after its ``(k + r)``-th ``I``; the last ``r`` W's close the list.
Placement ``loop``. Sizes as VPP: any ``n_microbatches >= 1`` (rounds of ``p`` to ``2p - 1``
microbatches when ``m`` is not a multiple of ``p``) and any ``n_chunks >= 1`` (default 2). Unit costs per chunk (F = I = W = 1), measured over the test grid:
bubble ``(p - 1) / (3 v m)`` of ideal, a third of VPP's.

>>> from paddle_ext.passes import simulate_schedule, format_timeline
>>> print(format_timeline(simulate_schedule(interleaved_zb(2, 2, 2))))
rank 0 | 0F0 0F1 2F0 2F1  .  2I0 2W0 2I1 2W1 0I0 0W0 0I1 0W1
rank 1 |  .  1F0 1F1 3F0 3I0 3F1 3I1 3W0 1I0 3W1 1I1 1W0 1W1
"""
from __future__ import annotations

from collections import deque

from ..schedule_ir import Action, Kind, Schedule
from ._checks import SizeRule
from ._registry import register_schedule
from .interleaved_1f1b import interleaved_order

NAME = "InterleavedZB"
SIZES = SizeRule()  # any n_chunks, any n_microbatches, as VPP


@register_schedule(name=NAME, placement="loop", default_chunks=2, sizes=SIZES, order=90,
                   aliases=("InterleavedZeroBubble",), summary="interleaved 1F1B with split backward, W deferred")
def interleaved_zb(n_ranks: int, n_microbatches: int, n_chunks: int = 2) -> Schedule:
    """Interleaved zero-bubble order on ``n_ranks`` ranks with ``n_chunks`` stages each."""
    SIZES.check(NAME, n_ranks, n_microbatches, n_chunks)
    schedule = {}
    for rank in range(n_ranks):
        order, pending = [], deque()
        for action in interleaved_order(n_ranks, n_microbatches, n_chunks, rank, backward=Kind.I):
            order.append(action)
            if action.kind is Kind.I:
                pending.append(action)
                if len(pending) > rank:
                    done = pending.popleft()
                    order.append(Action(done.stage, Kind.W, done.microbatch))
        order += [Action(a.stage, Kind.W, a.microbatch) for a in pending]
        schedule[rank] = order
    return schedule
