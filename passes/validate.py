"""Validate a pipeline schedule: counts, local order, one rank per stage, matched communication.

:func:`validate_schedule` checks, for ``n_stages`` stages and ``n_microbatches`` microbatches:

* every action is an :class:`~paddle_ext.passes.schedule_ir.Action` and appears once;
* every stage runs on exactly one rank (communication actions name their local stage);
* every (stage, microbatch) has exactly one ``F`` and either one ``B`` or one ``I`` and one ``W``;
* on a rank, ``F`` comes before ``B``/``I`` of the same (stage, microbatch), ``I`` before ``W``,
  ``F`` of stage ``s`` before ``F`` of stage ``s + 1`` and the backward of ``s + 1`` before the
  backward of ``s`` whenever both stages share the rank;
* a lowered schedule (one with ``SEND_*``/``RECV_*``) has exactly one send and one receive for
  every dependency that crosses ranks, the send after the producing compute and the receive
  before the consuming compute, and no other communication;
* across ranks, the order makes progress: the schedule is simulated with unit costs and
  rendezvous sends, and a deadlock raises with the stuck actions marked ``<-- here``.

Each failure raises :class:`~paddle_ext.errors.ScheduleError` naming the (stage, microbatch),
the ranks and steps involved, and the fix, followed by the rank-by-step grid around the problem.

>>> from paddle_ext.passes.schedule_ir import parse_schedule
>>> validate_schedule(parse_schedule("rank 0: 0F0 1F0 1B0 0B0")).n_stages
2
>>> validate_schedule(parse_schedule("rank 0: 0F0 0W0 0I0"))
Traceback (most recent call last):
...
paddle_ext.errors.ScheduleError: stage 0 microbatch 0: 0W0 (rank 0 step 1) runs before 0I0 (step 2); put I before W of the same stage and microbatch
step    0   1     2
rank 0  0F0 >0W0< 0I0
"""
from __future__ import annotations

from typing import Mapping, Optional, Sequence

from paddle_ext.errors import ScheduleError
from .schedule_ir import Action
from .simulate import Costs, run_simulation
from .structure import ScheduleShape, check_structure

__all__ = ["ScheduleShape", "check_structure", "validate_schedule"]


def validate_schedule(schedule: Mapping[int, Sequence[Optional[Action]]], n_stages: Optional[int] = None,
                      n_microbatches: Optional[int] = None, *, stage_to_rank: Optional[Mapping[int, int]] = None,
                      check_progress: bool = True) -> ScheduleShape:
    """Raise :class:`ScheduleError` unless ``schedule`` is a correct pipeline schedule.

    ``n_stages``/``n_microbatches`` default to what the schedule uses. ``stage_to_rank``, if
    given, is the placement the schedule must follow. With ``check_progress`` (default) the
    schedule is also simulated with unit costs to prove it cannot deadlock, sends being
    blocking rendezvous. Returns the :class:`ScheduleShape` it found.
    """
    shape = check_structure(schedule, n_stages, n_microbatches)
    if stage_to_rank is not None:
        for stage, rank in sorted(shape.stage_to_rank.items()):
            if stage_to_rank.get(stage) != rank:
                raise ScheduleError(f"stage {stage} runs on rank {rank} but the placement puts it on rank "
                                    f"{stage_to_rank.get(stage)}; regenerate the schedule for this placement")
    if check_progress:
        run_simulation(schedule, shape, Costs())
    return shape
