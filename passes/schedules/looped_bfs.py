"""LoopedBFS (breadth-first pipeline): each rank runs all microbatches through one local
stage before the next, forwards in stage order, then backwards in reverse stage order.

Placement ``loop`` (stage ``s`` on rank ``s % p``). Constraints: any ``n_chunks >= 1`` (default 2)
and ``n_microbatches >= 1``. Unit costs per chunk: with ``m >= p`` (so a loop never waits for the
previous one) the bubble is ``(p - 1) / (v m)`` of ideal like interleaved 1F1B, but all ``v m``
activations are live at the peak, like GPipe.

>>> from paddle_ext.passes import simulate_schedule, format_timeline
>>> print(format_timeline(simulate_schedule(looped_bfs(2, 2, 2))))
rank 0 | 0F0 0F1 2F0 2F1  .   .   .  2B0 ~~~ 2B1 ~~~ 0B0 ~~~ 0B1 ~~~
rank 1 |  .  1F0 1F1 3F0 3F1 3B0 ~~~ 3B1 ~~~ 1B0 ~~~ 1B1 ~~~
"""
from __future__ import annotations

from ..schedule_ir import Action, Kind, Schedule
from ._checks import SizeRule
from ._registry import register_schedule

NAME = "LoopedBFS"
SIZES = SizeRule()  # any n_chunks, any n_microbatches


@register_schedule(name=NAME, placement="loop", default_chunks=2, sizes=SIZES, order=40,
                   aliases=(), summary="breadth-first over v looped chunks")
def looped_bfs(n_ranks: int, n_microbatches: int, n_chunks: int = 2) -> Schedule:
    """Breadth-first order on ``n_ranks`` ranks with ``n_chunks`` stages each."""
    SIZES.check(NAME, n_ranks, n_microbatches, n_chunks)
    schedule = {}
    for rank in range(n_ranks):
        stages = [rank + chunk * n_ranks for chunk in range(n_chunks)]
        forward = [Action(s, Kind.F, mb) for s in stages for mb in range(n_microbatches)]
        backward = [Action(s, Kind.B, mb) for s in reversed(stages) for mb in range(n_microbatches)]
        schedule[rank] = forward + backward
    return schedule
