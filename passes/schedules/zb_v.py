"""ZB-V (zero bubble, V shape): two chunks per rank placed as a V, backward split in I and W.

Placement ``v``: rank ``r`` holds stages ``r`` (chunk 0) and ``2p - 1 - r`` (chunk 1), so the
data goes down the ranks and comes back up, and the last stage sits on rank 0 next to the first.
Rank ``r``'s phases: ``2 (p - r) - 1`` forwards of chunk 0; ``r`` pairs (F chunk 1, F chunk 0);
``p - r`` triples (F, I, W of chunk 1); steady triples (F, I, W) of chunk 0 then chunk 1; drain
with ``r`` pairs (I chunk 0, I chunk 1), ``p - r`` pairs (I, W of chunk 0), then the W's left.
In-flight activations stay at most ``2p`` chunks = ``p`` full microbatches, 1F1B's memory.

Constraints: ``n_chunks == 2``; any ``n_microbatches >= 1`` (tables are built for at least
``2p - 1`` microbatches and trimmed). Unit costs per chunk (F = I = W = 1): with ``m >= 2p - 1``
every rank computes without a gap from its first to its last action (``steady_bubble_vs_ideal ==
0``); a flushed iteration has bubble ``(p - 1) / (6m)`` of ideal, from the start-up skew alone.

>>> from paddle_ext.passes import simulate_schedule, format_timeline
>>> print(format_timeline(simulate_schedule(zb_v(2, 3))))
rank 0 | 0F0 0F1 0F2 3F0 3I0 3W0 3F1 3I1 3W1 0I0 0W0 3F2 3I2 3W2 0I1 0W1 0I2 0W2
rank 1 |  .  1F0 2F0 1F1 2F1 2I0 2W0 1F2 1I0 1W0 2F2 2I1 2W1 1I1 2I2 1I2 1W1 2W2 1W2
"""
from __future__ import annotations

from ..schedule_ir import Schedule
from ._checks import SizeRule
from ._registry import register_schedule
from ._phases import expand_phases
from ..stage_placement import stages_on_rank

NAME = "ZBV"
SIZES = SizeRule(chunks=2, chunks_why="a V shape puts exactly 2 stages on each rank")


@register_schedule(name=NAME, placement="v", default_chunks=2, sizes=SIZES, order=70,
                   aliases=("ZBVZeroBubble",), summary="zero bubble on a V placement, 1F1B memory")
def zb_v(n_ranks: int, n_microbatches: int, n_chunks: int = 2) -> Schedule:
    """ZB-V order on ``n_ranks`` ranks (``2 * n_ranks`` stages in a V)."""
    SIZES.check(NAME, n_ranks, n_microbatches, n_chunks)
    p, n_virtual = n_ranks, max(n_microbatches, 2 * n_ranks - 1)
    schedule = {}
    for r in range(p):
        phases = [(2 * (p - r) - 1, "F0"), (r, "F1 F0"), (p - r, "F1 I1 W1"),
                  (n_virtual - p, "F0 I0 W0 F1 I1 W1"),
                  (r, "I0 I1"), (p - r, "I0 W0"), (None, "W1"), (None, "W0")]
        schedule[r] = expand_phases(phases, stages_on_rank(r, p, 2, "v"), n_microbatches, n_virtual)
    return schedule
