"""Overlapped F&B pairs: mark them in a schedule, or drop the marks.

DualPipe runs the forward of one chunk and the full backward of the other chunk of its rank at
the same time (one kernel stream hides the other's communication). torch.distributed.pipelining
writes such a pair as one ``(0F7;7B3)OVERLAP_F_B`` cell; in this IR the pair is an
``OVERLAP_F_B`` mark followed by its two actions (:mod:`~paddle_ext.passes.schedule_ir`), which
the simulator times as one slot (``overlap="max"`` or ``"sum"``).

:func:`mark_dualpipe_overlaps` adds the marks to a DualPipeV order as DualPipe pairs its chunks:
every forward immediately followed by a full backward of the rank's other stage, except on the
last rank the first such pair (there the backward needs the loss of the forward just before it,
so DualPipe runs the two one after the other). For ``dualpipe_v(4, 10)`` this gives, cell for
cell, torch's DualPipeV CSV layout.

>>> from paddle_ext.passes.schedules import dualpipe_v
>>> from paddle_ext.passes.schedule_ir import format_schedule
>>> print(format_schedule(mark_dualpipe_overlaps(dualpipe_v(2, 4))))  # doctest: +NORMALIZE_WHITESPACE
rank 0: 0F0 0F1 0F2 3F0 3I0 3W0 3F1 (0F3;3B1)OVERLAP_F_B (3F2;0B0)OVERLAP_F_B 3B2 (3F3;0B1)OVERLAP_F_B 3B3 0I2 0W2 0I3 0W3
rank 1: 1F0 2F0 1F1 2F1 1F2 2B0 (2F2;1B0)OVERLAP_F_B (1F3;2B1)OVERLAP_F_B (2F3;1B1)OVERLAP_F_B 2B2 1B2 2I3 1I3 2W3 1W3
"""
from __future__ import annotations

from typing import List, Mapping, Optional, Sequence

from .schedule_ir import Action, Kind, Schedule, overlap_mark

__all__ = ["mark_dualpipe_overlaps", "strip_overlaps"]


def mark_dualpipe_overlaps(schedule: Mapping[int, Sequence[Optional[Action]]]) -> Schedule:
    """A copy of a DualPipeV-style schedule with its F&B pairs marked (module docstring)."""
    last_rank = max(schedule)
    marked: Schedule = {}
    for rank, actions in schedule.items():
        present = [a for a in strip_overlaps({rank: actions})[rank] if a is not None]
        out: List[Optional[Action]] = []
        skip_first = rank == last_rank
        i = 0
        while i < len(present):
            a = present[i]
            b = present[i + 1] if i + 1 < len(present) else None
            if (b is not None and a.kind is Kind.F and b.kind is Kind.B and a.stage != b.stage):
                if skip_first:
                    skip_first = False
                else:
                    out += [overlap_mark(a), a, b]
                    i += 2
                    continue
            out.append(a)
            i += 1
        marked[rank] = out
    return marked


def strip_overlaps(schedule: Mapping[int, Sequence[Optional[Action]]]) -> Schedule:
    """A copy without overlap marks (the pairs become two actions in a row)."""
    return {rank: [a for a in actions if a is None or a.kind is not Kind.OVERLAP_F_B]
            for rank, actions in schedule.items()}
