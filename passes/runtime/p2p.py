"""Point-to-point groups for pipeline messages on gloo.

Paddle's gloo process group tags every operation with the group's own running count, so a
``send`` and a ``recv`` only match when both ranks have issued the same number of operations on
that group. In a 3+ rank group that breaks plain pipelines: rank 1 receives from rank 0 (count
1) and then sends to rank 2, whose first receive waits at count 0 -- a TIMEOUT (measured on
3.3.1 with 3 ranks: ``0 -> 1 -> 2`` hangs on the default group). Giving every pair of pipeline
ranks its own two-member group makes the count per pair, and the lowering already fixes one
order of the messages of each pair on both sides, so the counts always agree.

Paddle's ``new_group`` must be called by every rank of the world in the same order (group ids
are a running counter), so :func:`ensure_pair_groups` takes every pipeline of the world (all
ranks gathered them) and creates the missing pairs in sorted order. Creating gloo groups of
different members back to back fails on 3.3.1 (``connect ...: Connection refused`` in
``connectFullMesh`` when rank 1 starts pair (1, 2) while ranks 0 and 2 still build (0, 2)), so
every creation is followed by a world barrier. Only neighbours on the pipeline ring need a group
(stage ``s`` talks to ``s +- 1``; looped schedules wrap from the last rank to the first), and
groups are cached for the process, so schedules built later reuse them.
"""
from __future__ import annotations

from typing import Dict, Iterable, Sequence, Tuple

import paddle.distributed as dist

from paddle_ext.errors import ScheduleError

__all__ = ["ensure_pair_groups", "pair_group"]

_PAIR_GROUPS: Dict[Tuple[int, int], object] = {}


def _pairs(pipelines: Iterable[Sequence[int]]) -> list:
    """Neighbour pairs on each pipeline's ring of global ranks (pipeline rank order).

    >>> _pairs([(0, 2), (1, 3)])
    [(0, 2), (1, 3)]
    >>> _pairs([(0, 1, 2, 3)])
    [(0, 1), (0, 3), (1, 2), (2, 3)]
    """
    pairs = set()
    for ranks in pipelines:
        ranks = list(ranks)
        for i, a in enumerate(ranks):
            b = ranks[(i + 1) % len(ranks)]
            if a != b:
                pairs.add((min(a, b), max(a, b)))
    return sorted(pairs)


def ensure_pair_groups(pipelines: Iterable[Sequence[int]]) -> None:
    """Create (on every rank, same order) a two-rank group for each neighbour pair of each pipeline."""

    if dist.get_world_size() <= 1:
        return
    for pair in _pairs(pipelines):
        if pair not in _PAIR_GROUPS:
            _PAIR_GROUPS[pair] = dist.new_group(list(pair))
            dist.barrier()


def pair_group(a: int, b: int):
    """The group of global ranks ``a`` and ``b`` (created by :func:`ensure_pair_groups`)."""
    key = (a, b) if a < b else (b, a)
    try:
        return _PAIR_GROUPS[key]
    except KeyError:
        raise ScheduleError(f"no point-to-point group for ranks {key}; the schedule creates them at construction "
                            "(every rank must construct the same schedules in the same order)") from None
