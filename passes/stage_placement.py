"""Where pipeline stages live: pure functions from (stage, ranks, chunks) to a rank.

Two placements are used by the built-in schedules (``p`` ranks, ``v`` chunks per rank, so
``p * v`` stages in total):

* ``"loop"`` (interleaved / looped): stage ``s`` runs on rank ``s % p``; rank ``r`` holds stages
  ``r, r + p, r + 2p, ...``. With ``v == 1`` this is the plain one-stage-per-rank pipeline.
* ``"v"`` (V shape, exactly 2 chunks per rank): rank ``r`` holds stages ``r`` and ``2p - 1 - r``,
  so the first and last stages share rank 0 and the two middle stages share rank ``p - 1``.

>>> [loop_stage_to_rank(s, 4) for s in range(8)]
[0, 1, 2, 3, 0, 1, 2, 3]
>>> [v_stage_to_rank(s, 4) for s in range(8)]
[0, 1, 2, 3, 3, 2, 1, 0]
>>> stages_on_rank(1, 4, 2, "v")
(1, 6)
"""
from __future__ import annotations

from typing import Dict, Tuple

from paddle_ext.errors import ScheduleError

__all__ = ["PLACEMENTS", "loop_stage_to_rank", "v_stage_to_rank", "stage_to_rank",
           "stages_on_rank", "stage_to_rank_map"]

PLACEMENTS = ("loop", "v")


def _is_int(value) -> bool:
    return not isinstance(value, bool) and hasattr(type(value), "__index__")


def _check_rank(rank, n_ranks) -> None:
    """``0 <= rank < n_ranks`` (as the pipeline runtime checks), or :class:`ScheduleError`."""
    if not _is_int(n_ranks) or n_ranks < 1:
        raise ScheduleError(f"n_ranks must be an int >= 1, got {n_ranks!r}")
    if not _is_int(rank) or not 0 <= rank < n_ranks:
        raise ScheduleError(f"rank {rank!r} is not one of the {n_ranks} pipeline ranks 0..{n_ranks - 1}")


def loop_stage_to_rank(stage: int, n_ranks: int) -> int:
    """Interleaved placement: stage ``s`` on rank ``s % n_ranks``."""
    return stage % n_ranks


def v_stage_to_rank(stage: int, n_ranks: int) -> int:
    """V placement: stages ``0..p-1`` go down the ranks, stages ``p..2p-1`` come back up."""
    if not 0 <= stage < 2 * n_ranks:
        raise ScheduleError(f"stage {stage} does not exist in a V placement over {n_ranks} ranks "
                            f"(stages 0..{2 * n_ranks - 1}); a V shape has exactly 2 stages per rank")
    return stage if stage < n_ranks else 2 * n_ranks - 1 - stage


def stage_to_rank(stage: int, n_ranks: int, placement: str = "loop") -> int:
    """Rank of ``stage`` under ``placement`` (``"loop"`` or ``"v"``)."""
    if placement == "loop":
        return loop_stage_to_rank(stage, n_ranks)
    if placement == "v":
        return v_stage_to_rank(stage, n_ranks)
    raise ScheduleError(f"unknown stage placement {placement!r}; use one of {list(PLACEMENTS)}")


def stages_on_rank(rank: int, n_ranks: int, n_chunks: int, placement: str = "loop") -> Tuple[int, ...]:
    """The stages held by ``rank``, in chunk order (chunk 0 first)."""
    _check_rank(rank, n_ranks)
    if placement == "v":
        if n_chunks != 2:
            raise ScheduleError(f"a V placement has exactly 2 chunks per rank, got {n_chunks}; "
                                "use --chunks 2 (or the loop placement)")
        return (rank, 2 * n_ranks - 1 - rank)
    stage_to_rank(0, n_ranks, placement)  # validates the placement name
    return tuple(rank + chunk * n_ranks for chunk in range(n_chunks))


def stage_to_rank_map(n_ranks: int, n_chunks: int, placement: str = "loop") -> Dict[int, int]:
    """``{stage: rank}`` for all ``n_ranks * n_chunks`` stages."""
    return {stage: rank for rank in range(n_ranks)
            for stage in stages_on_rank(rank, n_ranks, n_chunks, placement)}
