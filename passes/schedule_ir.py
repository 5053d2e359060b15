"""Pipeline schedule IR: actions and schedules as plain data, with text and CSV forms.

A *schedule* is ``dict[rank, list[Action | None]]``: for every pipeline rank, the ordered list of
what that rank does. ``None`` is an idle slot; it exists so that CSV files written by
``torch.distributed.pipelining`` keep their layout. Only the order of a rank's actions matters to
the validator, the lowering and the simulator, never the slot an action sits in.

An :class:`Action` is ``(stage, kind, microbatch)`` and prints as ``2F0``:

* compute kinds: ``F`` forward, ``B`` full backward, ``I`` backward for inputs, ``W`` backward for
  weights (a stage/microbatch has either one ``B`` or one ``I`` and one ``W``);
* communication kinds, added by :func:`paddle_ext.passes.lowering.add_send_recv`:
  ``SEND_F``/``RECV_F`` move an activation from stage ``s`` to ``s + 1``; ``SEND_B``/``RECV_B``
  move an input gradient from stage ``s`` to ``s - 1``. The stage of a communication action is
  the local stage: ``0SEND_F3`` is paired with ``1RECV_F3``, ``2SEND_B3`` with ``1RECV_B3``;
* named no-ops (:data:`NOOP_KINDS`), torch's FSDP actions that paddle-ext reads, keeps and
  writes back but does not run: ``UNSHARD``, ``RESHARD``, ``REDUCE_GRAD``, printed without a
  microbatch (``1UNSHARD``) as torch prints them;
* the overlap mark ``OVERLAP_F_B`` (DualPipe): torch writes an overlapped forward/backward pair
  as one cell ``(0F7;7B3)OVERLAP_F_B``. Reading expands the cell into the mark
  ``Action(0, Kind.OVERLAP_F_B, None)`` (stage of the first action, no microbatch) followed by
  the pair's two actions; writing folds a mark and the two actions after it back into one cell.
  The simulator times a marked pair as one slot (see ``overlap`` in
  :func:`paddle_ext.passes.simulate.simulate_schedule`); everything else sees two actions.

>>> a = Action.from_str("1I3")
>>> a, str(a)
(Action(stage=1, kind='I', microbatch=3), '1I3')
>>> Action.from_str("0SEND_F2").kind is Kind.SEND_F
True
>>> schedule = {0: [Action.from_str(t) for t in "0F0 0F1 0B0 0B1".split()], 1: [None]}
>>> schedule_from_csv(schedule_to_csv(schedule)) == schedule
True
>>> parse_cell("(0F7;7B3)OVERLAP_F_B")
[Action(stage=0, kind='OVERLAP_F_B', microbatch=None), Action(stage=0, kind='F', microbatch=7), Action(stage=7, kind='B', microbatch=3)]
>>> schedule_to_csv({0: parse_cell("(0F7;7B3)OVERLAP_F_B") + [Action.from_str("0UNSHARD")]})
'(0F7;7B3)OVERLAP_F_B,0UNSHARD\\r\\n'
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
    "Kind", "Action", "Schedule", "COMPUTE_KINDS", "COMM_KINDS", "NOOP_KINDS", "RUN_KINDS", "parse_action",
    "parse_cell", "overlap_mark",
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
    UNSHARD = "UNSHARD"
    RESHARD = "RESHARD"
    REDUCE_GRAD = "REDUCE_GRAD"
    OVERLAP_F_B = "OVERLAP_F_B"

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:
        return repr(self.value)


COMPUTE_KINDS = frozenset({Kind.F, Kind.B, Kind.I, Kind.W})
COMM_KINDS = frozenset({Kind.SEND_F, Kind.RECV_F, Kind.SEND_B, Kind.RECV_B})
#: torch's FSDP actions: read, kept in place and written back, never run (zero time, no data)
NOOP_KINDS = frozenset({Kind.UNSHARD, Kind.RESHARD, Kind.REDUCE_GRAD})
#: what validation, lowering and timing see; the rest (no-ops, overlap marks) only annotate
RUN_KINDS = COMPUTE_KINDS | COMM_KINDS

# longest kinds first so that "SEND_F" is not read as "S" + ...; the microbatch is optional in
# the text (torch prints "1UNSHARD") and required by the kinds that work on one microbatch
_ACTION_RE = re.compile(r"(\d+)(SEND_F|RECV_F|SEND_B|RECV_B|UNSHARD|RESHARD|REDUCE_GRAD|OVERLAP_F_B|F|B|I|W)(\d*)")
_OVERLAP_RE = re.compile(r"\((.*)\)OVERLAP_F_B")
_ACTION_FORMAT_HINT = ("an action should be formatted as [stage][kind][microbatch], e.g. 2F0 or "
                       "1SEND_F3; kinds are F, B, I, W, SEND_F, RECV_F, SEND_B, RECV_B (with a microbatch), "
                       "UNSHARD, RESHARD, REDUCE_GRAD (without one, e.g. 1UNSHARD), and a CSV cell may hold "
                       "an overlapped pair (0F7;7B3)OVERLAP_F_B")


class Action(NamedTuple):
    """One step of one rank: ``kind`` of ``stage`` on ``microbatch``; ``str`` gives ``2F0``.

    Immutable and hashable. It is a ``NamedTuple`` because schedules hold 10^5 actions and a
    tuple is several times cheaper to build and hash than a frozen dataclass; as a tuple it
    also compares equal to ``(stage, kind, microbatch)``.
    """

    stage: int
    kind: Kind
    microbatch: Optional[int]  # None only for no-ops and overlap marks

    def __str__(self) -> str:
        return f"{self.stage}{self.kind.value}{'' if self.microbatch is None else self.microbatch}"

    @property
    def is_compute(self) -> bool:
        return self.kind in COMPUTE_KINDS

    @staticmethod
    def from_str(text: str) -> "Action":
        """Parse ``2F0``-style text (the inverse of ``str``); raise :class:`ScheduleError` if malformed.
        An overlapped pair is a cell of several actions: read it with :func:`parse_cell`."""
        match = _ACTION_RE.fullmatch(text.strip()) if isinstance(text, str) else None
        if match is None:
            pair = isinstance(text, str) and _OVERLAP_RE.fullmatch(text.strip())
            hint = " (this cell holds two actions: read it with parse_cell)" if pair else ""
            raise ScheduleError(f"invalid action {text!r}{hint}: {_ACTION_FORMAT_HINT}")
        stage, kind, microbatch = match.groups()
        kind = Kind(kind)
        if not microbatch and kind in RUN_KINDS:
            raise ScheduleError(f"invalid action {text!r}: {_ACTION_FORMAT_HINT}; {kind.value} needs a microbatch")
        return Action(int(stage), kind, int(microbatch) if microbatch else None)


Schedule = Dict[int, List[Optional[Action]]]


def parse_action(text: str) -> Optional[Action]:
    """Like :meth:`Action.from_str`, but an empty or blank cell is an idle slot (``None``)."""
    if isinstance(text, str) and not text.strip():
        return None
    return Action.from_str(text)


def overlap_mark(first: Action) -> Action:
    """The mark that makes ``first`` and the action after it one overlapped F&B slot."""
    return Action(first.stage, Kind.OVERLAP_F_B, None)


def parse_cell(text: str) -> List[Optional[Action]]:
    """The actions of one CSV cell or text token: ``[None]`` for a blank cell, ``[action]``, or for
    torch's ``(0F7;7B3)OVERLAP_F_B`` the mark and the pair (two compute actions, an ``F`` and a
    backward of another stage), as :func:`overlap_mark` makes them."""
    match = _OVERLAP_RE.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        return [parse_action(text)]
    pair = [Action.from_str(part) for part in match.group(1).split(";")]
    kinds = sorted(a.kind.value for a in pair)
    if len(pair) != 2 or kinds not in (["B", "F"], ["F", "I"]) or pair[0].stage == pair[1].stage:
        raise ScheduleError(f"invalid overlapped pair {text!r}: OVERLAP_F_B holds two actions, a forward and a "
                            f"backward (B or I) of two different stages, e.g. (0F7;7B3)OVERLAP_F_B")
    return [overlap_mark(pair[0])] + pair


def _is_pair(actions: Sequence[Optional[Action]], i: int) -> bool:
    """True if ``actions[i]`` is a mark that :func:`parse_cell` would make for the two after it."""
    if i + 2 >= len(actions):
        return False
    mark, first, second = actions[i], actions[i + 1], actions[i + 2]
    return (first is not None and second is not None and mark == overlap_mark(first)
            and first.kind in COMPUTE_KINDS and second.kind in COMPUTE_KINDS)


def _cells(actions: Sequence[Optional[Action]], idle: str) -> List[str]:
    """Text cells of one rank: a mark and its pair fold into ``(a;b)OVERLAP_F_B``."""
    cells, i, n = [], 0, len(actions)
    while i < n:
        a = actions[i]
        if a is not None and a.kind is Kind.OVERLAP_F_B and _is_pair(actions, i):
            cells.append(f"({actions[i + 1]};{actions[i + 2]})OVERLAP_F_B")
            i += 3
            continue
        cells.append(idle if a is None else str(a))
        i += 1
    return cells


def compute_only(schedule: Mapping[int, Sequence[Optional[Action]]]) -> Schedule:
    """The schedule without communication actions, no-ops and idle slots (undoes a lowering);
    overlap marks stay, they belong to the compute order."""
    return {rank: [a for a in actions if a is not None and (a.kind in COMPUTE_KINDS or a.kind is Kind.OVERLAP_F_B)]
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
        cells = " ".join(_cells(schedule[rank], "-"))
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
            schedule[rank] = [a for tok in body.split() for a in ([None] if tok == "-" else parse_cell(tok))]
        except ScheduleError as exc:
            raise ScheduleError(f"line {lineno} (rank {rank}): {exc}") from None
    return schedule


# ------------------------------------------------------------------------------------------ CSV
def schedule_to_csv(schedule: Mapping[int, Sequence[Optional[Action]]], line_terminator: str = "\r\n") -> str:
    """CSV text in torch.distributed.pipelining's layout: row i = rank i, one action per cell,
    empty cell = idle, a marked overlapped pair in one ``(a;b)OVERLAP_F_B`` cell. Ranks must be
    0..n-1 (a missing rank is written as an empty row). Lines end as torch's ``csv.writer`` ends
    them (``\\r\\n``) unless ``line_terminator`` says otherwise (``"\\n"`` for a file saved that way)."""
    ranks = sorted(schedule)
    if ranks and (ranks[0] < 0 or not all(isinstance(r, int) for r in ranks)):
        raise ScheduleError(f"CSV rows are ranks 0..n-1, got ranks {ranks}; renumber the ranks from 0")
    out = io.StringIO()
    writer = csv.writer(out, lineterminator=line_terminator)
    for rank in range(ranks[-1] + 1 if ranks else 0):
        writer.writerow(_cells(schedule.get(rank, []), ""))
    return out.getvalue()


def schedule_from_csv(text: str) -> Schedule:
    """Parse CSV written by :func:`schedule_to_csv` or torch's ``_dump_csv`` (row = rank), every
    token torch writes included; :func:`schedule_to_csv` gives the same text back."""
    schedule: Schedule = {}
    for rank, row in enumerate(csv.reader(io.StringIO(text))):
        actions: List[Optional[Action]] = []
        for step, cell in enumerate(row):
            try:
                actions.extend(parse_cell(cell))
            except ScheduleError as exc:
                raise ScheduleError(f"CSV row {rank} (rank {rank}), column {step}: {exc}") from None
        schedule[rank] = actions
    return schedule


def dump_csv(schedule: Mapping[int, Sequence[Optional[Action]]], path: str, line_terminator: str = "\r\n") -> None:
    """Write :func:`schedule_to_csv` to ``path``."""
    with open(path, "w", newline="", encoding="utf-8") as stream:
        stream.write(schedule_to_csv(schedule, line_terminator))


def load_csv(path: str) -> Schedule:
    """Read a schedule CSV (ours or torch's ``_dump_csv``) from ``path``."""
    with open(path, newline="", encoding="utf-8") as stream:
        return schedule_from_csv(stream.read())

