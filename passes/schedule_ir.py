"""Pipeline schedule IR: actions and schedules as plain data, with text and CSV forms.

A *schedule* is ``dict[rank, list[Action | None]]``: for every pipeline rank, the ordered list of
what that rank does. ``None`` is an idle slot; it exists so that CSV files written by
``torch.distributed.pipelining`` load unchanged. Only the order of a rank's actions matters to
the validator, the lowering and the simulator, never the slot an action sits in.

An :class:`Action` is ``(stage, kind, microbatch)`` and prints as ``2F0``:

* compute kinds: ``F`` forward, ``B`` full backward, ``I`` backward for inputs, ``W`` backward for
  weights (a stage/microbatch has either one ``B`` or one ``I`` and one ``W``);
* communication kinds, added by :func:`paddle_ext.passes.lowering.add_send_recv`:
  ``SEND_F``/``RECV_F`` move an activation from stage ``s`` to ``s + 1``; ``SEND_B``/``RECV_B``
  move an input gradient from stage ``s`` to ``s - 1``. The stage of a communication action is
  the local stage: ``0SEND_F3`` is paired with ``1RECV_F3``, ``2SEND_B3`` with ``1RECV_B3``.

>>> a = Action.from_str("1I3")
>>> a, str(a)
(Action(stage=1, kind='I', microbatch=3), '1I3')
>>> Action.from_str("0SEND_F2").kind is Kind.SEND_F
True
>>> schedule = {0: [Action.from_str(t) for t in "0F0 0F1 0B0 0B1".split()], 1: [None]}
>>> schedule_from_csv(schedule_to_csv(schedule)) == schedule
True
>>> print(format_grid({0: schedule[0], 1: [None, Action(1, Kind.F, 0)]}))
step    0   1   2   3
rank 0  0F0 0F1 0B0 0B1
rank 1  .   1F0
"""
from __future__ import annotations

import csv
import io
import re
from enum import Enum
from typing import Dict, List, Mapping, NamedTuple, Optional, Sequence

from paddle_ext.errors import ScheduleError

__all__ = [
    "Kind", "Action", "Schedule", "COMPUTE_KINDS", "COMM_KINDS", "parse_action",
    "format_grid", "format_schedule", "parse_schedule", "schedule_to_csv", "schedule_from_csv",
    "dump_csv", "load_csv", "compute_only",
]


class Kind(str, Enum):
    """What an action does. The value is its text form (``Kind.SEND_F`` prints ``SEND_F``)."""

    F = "F"
    B = "B"
    I = "I"  # noqa: E741 - the paper's name for backward-for-inputs
    W = "W"
    SEND_F = "SEND_F"
    RECV_F = "RECV_F"
    SEND_B = "SEND_B"
    RECV_B = "RECV_B"

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:
        return repr(self.value)


COMPUTE_KINDS = frozenset({Kind.F, Kind.B, Kind.I, Kind.W})
COMM_KINDS = frozenset({Kind.SEND_F, Kind.RECV_F, Kind.SEND_B, Kind.RECV_B})

# longest kinds first so that "SEND_F" is not read as "S" + ...; digits on both sides
_ACTION_RE = re.compile(r"(\d+)(SEND_F|RECV_F|SEND_B|RECV_B|F|B|I|W)(\d+)")
_ACTION_FORMAT_HINT = ("an action should be formatted as [stage][kind][microbatch], e.g. 2F0 or "
                       "1SEND_F3; kinds are F, B, I, W, SEND_F, RECV_F, SEND_B, RECV_B")


class Action(NamedTuple):
    """One step of one rank: ``kind`` of ``stage`` on ``microbatch``; ``str`` gives ``2F0``.

    Immutable and hashable. It is a ``NamedTuple`` because schedules hold 10^5 actions and a
    tuple is several times cheaper to build and hash than a frozen dataclass; as a tuple it
    also compares equal to ``(stage, kind, microbatch)``.
    """

    stage: int
    kind: Kind
    microbatch: int

    def __str__(self) -> str:
        return f"{self.stage}{self.kind.value}{self.microbatch}"

    @property
    def is_compute(self) -> bool:
        return self.kind in COMPUTE_KINDS

    @staticmethod
    def from_str(text: str) -> "Action":
        """Parse ``2F0``-style text (the inverse of ``str``); raise :class:`ScheduleError` if malformed."""
        match = _ACTION_RE.fullmatch(text.strip()) if isinstance(text, str) else None
        if match is None:
            raise ScheduleError(f"invalid action {text!r}: {_ACTION_FORMAT_HINT}")
        stage, kind, microbatch = match.groups()
        return Action(int(stage), Kind(kind), int(microbatch))


Schedule = Dict[int, List[Optional[Action]]]


def parse_action(text: str) -> Optional[Action]:
    """Like :meth:`Action.from_str`, but an empty or blank cell is an idle slot (``None``)."""
    if isinstance(text, str) and not text.strip():
        return None
    return Action.from_str(text)


def compute_only(schedule: Mapping[int, Sequence[Optional[Action]]]) -> Schedule:
    """The schedule without communication actions and idle slots (undoes a lowering)."""
    return {rank: [a for a in actions if a is not None and a.kind in COMPUTE_KINDS]
            for rank, actions in schedule.items()}


# ----------------------------------------------------------------------------------- text grid
def format_grid(schedule: Mapping[int, Sequence[Optional[Action]]],
                marks: Optional[Mapping[int, int]] = None, notes: Optional[Mapping[int, str]] = None,
                window: Optional[int] = None) -> str:
    """Rank-by-step table of a schedule (step = position in the rank's list; ``.`` = idle).

    ``marks`` maps rank -> step to highlight as ``>cell<``; ``notes`` maps rank -> text printed
    after that rank's row as ``<-- here: text``. With ``window`` only the steps within ``window``
    of a marked step are shown (``...`` stands for the rest), so errors stay short.
    """
    marks, notes = dict(marks or {}), dict(notes or {})
    ranks = sorted(schedule)
    n_steps = max((len(schedule[r]) for r in ranks), default=0)
    steps = _visible_steps(n_steps, marks, window)
    rows = [["step"] + ["..." if s is None else str(s) for s in steps]]
    for r in ranks:
        actions = schedule[r]
        row = [f"rank {r}"]
        for s in steps:
            if s is None:
                cell = "..."
            elif s >= len(actions):
                cell = ""
            else:
                cell = "." if actions[s] is None else str(actions[s])
            row.append(f">{cell}<" if s is not None and marks.get(r) == s else cell)
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row, r in zip(rows, [None] + ranks):
        line = row[0].ljust(widths[0]) + "  " + " ".join(c.ljust(w) for c, w in zip(row[1:], widths[1:]))
        line = line.rstrip()
        if r in notes:
            line += f"   <-- here: {notes[r]}"
        lines.append(line)
    return "\n".join(lines)


def _visible_steps(n_steps: int, marks: Mapping[int, int], window: Optional[int]) -> List[Optional[int]]:
    """Step numbers to show, ``None`` where a run of hidden steps is elided."""
    if window is None or not marks:
        return list(range(n_steps))
    keep = sorted({s for m in marks.values() for s in range(max(0, m - window), min(n_steps, m + window + 1))})
    shown: List[Optional[int]] = []
    previous = -1
    for s in keep:
        if s != previous + 1:
            shown.append(None)
        shown.append(s)
        previous = s
    if previous != n_steps - 1:
        shown.append(None)
    return shown


def format_schedule(schedule: Mapping[int, Sequence[Optional[Action]]]) -> str:
    """One line per rank, ``rank 0: 0F0 0F1 - 0B0`` (``-`` = idle); :func:`parse_schedule` inverts it.

    >>> s = {0: [Action(0, Kind.F, 0), None], 1: []}
    >>> format_schedule(s)
    'rank 0: 0F0 -\\nrank 1:'
    >>> parse_schedule(format_schedule(s)) == s
    True
    """
    lines = []
    for rank in sorted(schedule):
        cells = " ".join("-" if a is None else str(a) for a in schedule[rank])
        lines.append(f"rank {rank}: {cells}".rstrip())
    return "\n".join(lines)


def parse_schedule(text: str) -> Schedule:
    """Inverse of :func:`format_schedule`; blank lines and ``#`` comments are skipped."""
    schedule: Schedule = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        head, sep, body = line.partition(":")
        match = re.fullmatch(r"rank\s+(\d+)", head.strip())
        if not sep or match is None:
            raise ScheduleError(f"line {lineno} {line!r}: expected 'rank N: action action ...' "
                                "(as written by format_schedule)")
        rank = int(match.group(1))
        if rank in schedule:
            raise ScheduleError(f"line {lineno}: rank {rank} appears twice; give each rank one line")
        try:
            schedule[rank] = [None if tok == "-" else Action.from_str(tok) for tok in body.split()]
        except ScheduleError as exc:
            raise ScheduleError(f"line {lineno} (rank {rank}): {exc}") from None
    return schedule


# ------------------------------------------------------------------------------------------ CSV
def schedule_to_csv(schedule: Mapping[int, Sequence[Optional[Action]]]) -> str:
    """CSV text in torch.distributed.pipelining's layout: row i = rank i, one action per cell,
    empty cell = idle. Ranks must be 0..n-1 (a missing rank is written as an empty row)."""
    ranks = sorted(schedule)
    if ranks and (ranks[0] < 0 or not all(isinstance(r, int) for r in ranks)):
        raise ScheduleError(f"CSV rows are ranks 0..n-1, got ranks {ranks}; renumber the ranks from 0")
    out = io.StringIO()
    writer = csv.writer(out)
    for rank in range(ranks[-1] + 1 if ranks else 0):
        writer.writerow(["" if a is None else str(a) for a in schedule.get(rank, [])])
    return out.getvalue()


def schedule_from_csv(text: str) -> Schedule:
    """Parse CSV written by :func:`schedule_to_csv` or torch's ``_dump_csv`` (row = rank)."""
    schedule: Schedule = {}
    for rank, row in enumerate(csv.reader(io.StringIO(text))):
        actions: List[Optional[Action]] = []
        for step, cell in enumerate(row):
            try:
                actions.append(parse_action(cell))
            except ScheduleError as exc:
                raise ScheduleError(f"CSV row {rank} (rank {rank}), column {step}: {exc}") from None
        schedule[rank] = actions
    return schedule


def dump_csv(schedule: Mapping[int, Sequence[Optional[Action]]], path: str) -> None:
    """Write :func:`schedule_to_csv` to ``path``."""
    with open(path, "w", newline="", encoding="utf-8") as stream:
        stream.write(schedule_to_csv(schedule))


def load_csv(path: str) -> Schedule:
    """Read a schedule CSV (ours or torch's ``_dump_csv``) from ``path``."""
    with open(path, newline="", encoding="utf-8") as stream:
        return schedule_from_csv(stream.read())

