"""DualPipeV (DeepSeek): the V-shaped, one-direction variant of DualPipe.

Placement ``v`` (rank ``r`` holds stages ``r`` and ``2p - 1 - r``). The published phases per rank
``r``: ``2 (p - 1 - r)`` forwards of chunk 0; ``r + 1`` pairs (F chunk 0, F chunk 1); ``p - 1 - r``
rounds (I chunk 1, oldest pending W, F chunk 1); the main part, ``m - 2p + r + 1`` rounds of
(F chunk 0 with B chunk 1, F chunk 1 with B chunk 0); ``p - 1 - r`` rounds (B chunk 1, F chunk 1
with B chunk 0); ``r + 1`` rounds of backwards of both chunks, switching from full B to split I
halfway (parity of ``r`` decides which chunk switches first); ``p - 1 - r`` rounds (W, I chunk 0);
then the last ``r + 1`` W's. DualPipe overlaps each "F with B" pair on the device; the generator
emits the pair as two actions in a row (timed one after the other, DualPipe without its overlap),
and :func:`~paddle_ext.passes.overlap.mark_dualpipe_overlaps` marks the pairs DualPipe overlaps
(``OVERLAP_F_B``), which the simulator then times as one slot (``overlap="max"`` or ``"sum"``).

Constraints: ``n_chunks == 2``; ``n_microbatches >= 2 * n_ranks`` (the number of stages).
Unit costs per chunk (F = I = W = 1, B = 2), measured: bubble ``p - 1`` time units, flushed or
steady, for every ``m >= 2p``; peak ``2p + 1`` chunk activations (DualPipe's "PP + 1").

>>> from paddle_ext.passes import simulate_schedule, format_timeline
>>> print(format_timeline(simulate_schedule(dualpipe_v(2, 4))))
rank 0 | 0F0 0F1 0F2 3F0 3I0 3W0 3F1 0F3 3B1 ~~~ 3F2 0B0 ~~~ 3B2 ~~~ 3F3  .  0B1 ~~~ 3B3 ~~~ 0I2 0W2 0I3 0W3
rank 1 |  .  1F0 2F0 1F1 2F1 1F2 2B0 ~~~ 2F2 1B0 ~~~ 1F3 2B1 ~~~ 2F3 1B1 ~~~ 2B2 ~~~ 1B2 ~~~ 2I3 1I3 2W3 1W3
"""
from __future__ import annotations

from ..schedule_ir import Schedule
from ._checks import SizeRule
from ._registry import register_schedule
from ._phases import expand_phases
from ..stage_placement import stages_on_rank

NAME = "DualPipeV"
SIZES = SizeRule(chunks=2, chunks_why="DualPipeV puts exactly 2 stages on each rank (a V)",
                 min_microbatches_per_rank=2,
                 min_why="DualPipeV needs at least as many microbatches as stages (2 x {n_ranks} ranks)")


def _backward_round(rank: int) -> str:
    """Step 6: ``rank + 1`` rounds of (chunk 1, chunk 0) backwards, full B then split I."""
    half, split, tokens = (rank + 1) // 2, False, []
    for i in range(rank + 1):
        split = split or (i == half and rank % 2 == 1)
        tokens.append("I1" if split else "B1")
        split = split or (i == half and rank % 2 == 0)
        tokens.append("I0" if split else "B0")
    return " ".join(tokens)


@register_schedule(name=NAME, placement="v", default_chunks=2, sizes=SIZES, order=80,
                   aliases=(), summary="DeepSeek's DualPipeV order (F&B pairs run in sequence)")
def dualpipe_v(n_ranks: int, n_microbatches: int, n_chunks: int = 2) -> Schedule:
    """DualPipeV order on ``n_ranks`` ranks (``2 * n_ranks`` stages in a V)."""
    SIZES.check(NAME, n_ranks, n_microbatches, n_chunks)
    p, m = n_ranks, n_microbatches
    schedule = {}
    for r in range(p):
        phases = [(2 * (p - 1 - r), "F0"), (r + 1, "F0 F1"), (p - 1 - r, "I1 W F1"),
                  (m - 2 * p + r + 1, "F0 B1 F1 B0"), (p - 1 - r, "B1 F1 B0"),
                  (1, _backward_round(r)), (p - 1 - r, "W I0"), (r + 1, "W")]
        schedule[r] = expand_phases(phases, stages_on_rank(r, p, 2, "v"), m)
    return schedule
