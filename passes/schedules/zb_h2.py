"""ZB-H2 (zero bubble, twice 1F1B's memory): more warm-up forwards fill the start-up bubble and
deferred W's fill the drain.

Rank ``r`` warms up with ``2 (p - 1 - r)`` forwards, then alternates F and I, and runs ``W`` of
microbatch ``k`` right after ``I`` of microbatch ``k + 2r``. In-flight activations stay at most
``2p - 1`` on every rank.

Constraints: one stage per rank (``n_chunks == 1``); any ``n_microbatches >= 1``. Unit costs
(F = I = W = 1): with ``m >= 2p - 1`` every rank computes without a gap from its first to its
last action (``steady_bubble_vs_ideal == 0``: zero bubble once iterations overlap, as in the
paper); a single flushed iteration still pays the start-up skew, ``(p - 1) / (3m)`` of ideal.

>>> from paddle_ext.passes import simulate_schedule, format_timeline
>>> print(format_timeline(simulate_schedule(zb_h2(3, 5))))
rank 0 | 0F0 0F1 0F2 0F3 0F4 0I0 0W0 0I1 0W1 0I2 0W2 0I3 0W3 0I4 0W4
rank 1 |  .  1F0 1F1 1F2 1I0 1F3 1I1 1F4 1I2 1W0 1I3 1W1 1I4 1W2 1W3 1W4
rank 2 |  .   .  2F0 2I0 2F1 2I1 2F2 2I2 2F3 2I3 2F4 2I4 2W0 2W1 2W2 2W3 2W4
"""
from __future__ import annotations

from ..schedule_ir import Schedule
from ._checks import SizeRule
from ._registry import register_schedule
from ._phases import expand_phases, split_backward_phases

NAME = "ZBH2"
SIZES = SizeRule(chunks=1, chunks_why="ZB-H2 places one stage per rank (ZBV uses two)")


@register_schedule(name=NAME, placement="loop", default_chunks=1, sizes=SIZES, order=60,
                   aliases=(), summary="split backward, more warm-up, 2x 1F1B memory")
def zb_h2(n_ranks: int, n_microbatches: int, n_chunks: int = 1) -> Schedule:
    """ZB-H2 order on ``n_ranks`` ranks, one stage each."""
    SIZES.check(NAME, n_ranks, n_microbatches, n_chunks)
    schedule = {}
    for rank in range(n_ranks):
        phases = split_backward_phases(n_microbatches, warmup=2 * (n_ranks - 1 - rank), defer=2 * rank)
        schedule[rank] = expand_phases(phases, (rank,), n_microbatches)
    return schedule
