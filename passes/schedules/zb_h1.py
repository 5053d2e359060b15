"""ZB-H1 (zero bubble, 1F1B memory): 1F1B with the backward split into I and W, and the W's
moved later to fill the bubbles.

Rank ``r`` runs 1F1B's order with ``B`` replaced by ``I`` (backward for inputs, on the critical
path) and runs ``W`` (backward for weights) of microbatch ``k`` right after ``I`` of microbatch
``k + r``; the last ``r + 1`` W's fill the drain. In-flight activations (from F to W) stay at most
``p`` on every rank, as on 1F1B's first rank.

Constraints: one stage per rank (``n_chunks == 1``); any ``n_microbatches >= 1``. Unit costs
(F = I = W = 1): for ``m >= p`` makespan ``3m + p - 1``, bubble ``(p - 1) / (3m)`` of ideal,
a third of 1F1B's, which is the zero-bubble paper's ``(p-1)(T_F + T_B - T_W)``.

>>> from paddle_ext.passes import simulate_schedule, format_timeline
>>> print(format_timeline(simulate_schedule(zb_h1(3, 3))))
rank 0 | 0F0 0F1 0F2  .   .  0I0 0W0 0I1 0W1 0I2 0W2
rank 1 |  .  1F0 1F1  .  1I0 1F2 1I1 1W0 1I2 1W1 1W2
rank 2 |  .   .  2F0 2I0 2F1 2I1 2F2 2I2 2W0 2W1 2W2
"""
from __future__ import annotations

from ..schedule_ir import Schedule
from ._checks import SizeRule
from ._registry import register_schedule
from ._phases import expand_phases, split_backward_phases

NAME = "ZBH1"
SIZES = SizeRule(chunks=1, chunks_why="ZB-H1 places one stage per rank (InterleavedZB or ZBV use more)")


@register_schedule(name=NAME, placement="loop", default_chunks=1, sizes=SIZES, order=50,
                   aliases=(), summary="split backward, W deferred, 1F1B memory")
def zb_h1(n_ranks: int, n_microbatches: int, n_chunks: int = 1) -> Schedule:
    """ZB-H1 order on ``n_ranks`` ranks, one stage each."""
    SIZES.check(NAME, n_ranks, n_microbatches, n_chunks)
    return {rank: expand_phases(split_backward_phases(n_microbatches, warmup=n_ranks - 1 - rank, defer=rank),
                                (rank,), n_microbatches)
            for rank in range(n_ranks)}
