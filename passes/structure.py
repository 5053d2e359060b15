"""A pipeline schedule's structure, checked rank by rank without timing it.

:func:`check_structure` checks every rule :func:`paddle_ext.passes.validate.validate_schedule`
lists except progress across ranks (which needs the simulator) and returns the
:class:`ScheduleShape` it found: stages, microbatches, which rank runs each stage.

>>> from paddle_ext.passes.schedule_ir import parse_schedule
>>> check_structure(parse_schedule("rank 0: 0F0 1F0 1B0 0B0")).stage_to_rank
{0: 0, 1: 0}
"""
from __future__ import annotations

from dataclasses import dataclass
from operator import itemgetter
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from paddle_ext.errors import ScheduleError
from .schedule_ir import COMM_KINDS, COMPUTE_KINDS, RUN_KINDS, Action, Kind, format_grid

__all__ = ["ScheduleShape", "check_structure"]

_stage_of, _kind_of, _microbatch_of = itemgetter(0), itemgetter(1), itemgetter(2)

F, B, I, W = Kind.F, Kind.B, Kind.I, Kind.W
SEND_F, RECV_F, SEND_B, RECV_B = Kind.SEND_F, Kind.RECV_F, Kind.SEND_B, Kind.RECV_B


@dataclass(frozen=True)
class ScheduleShape:
    """What validation learned about a schedule."""

    n_ranks: int
    n_stages: int
    n_microbatches: int
    stage_to_rank: Dict[int, int]
    lowered: bool  # has SEND_*/RECV_* actions


def _fail(schedule, message: str, where: Sequence[Tuple[int, int]] = ()) -> None:
    marks = {rank: step for rank, step in where}
    grid = format_grid(schedule, marks=marks, window=4) if marks else ""
    raise ScheduleError(message + ("\n" + grid if grid else ""))


def check_structure(schedule: Mapping[int, Sequence[Optional[Action]]], n_stages: Optional[int] = None,
                    n_microbatches: Optional[int] = None) -> ScheduleShape:
    """All the static checks of :func:`validate_schedule` (everything but cross-rank progress)."""
    if not isinstance(schedule, Mapping) or not schedule:
        raise ScheduleError(f"a schedule is a non-empty dict {{rank: [Action | None, ...]}}, got {type(schedule).__name__}")
    # C-level passes (map/set/max) first: schedules hold ~10^5 actions
    per_rank = []  # (rank, its actions without idle slots)
    all_kinds = set()  # of every rank's run actions
    annotated = set()  # ranks with no-ops or overlap marks
    stage_rank: Dict[int, int] = {}
    for rank, actions in schedule.items():
        if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
            raise ScheduleError(f"schedule keys are ranks (ints >= 0), got {rank!r}")
        present = [a for a in actions if a is not None]
        if not set(map(type, present)) <= {Action}:
            step = next(step for step, a in enumerate(actions) if a is not None and type(a) is not Action)
            _fail(schedule, f"rank {rank} step {step}: {actions[step]!r} is not an Action; build actions with "
                  "Action(stage, Kind.F, microbatch) or Action.from_str('0F0')")
        rank_kinds = set(map(_kind_of, present))
        if not rank_kinds <= RUN_KINDS:  # no-ops and overlap marks: checked, then set aside
            _check_marks(schedule, rank, actions)
            present = [a for a in present if a[1] in RUN_KINDS]
            rank_kinds &= RUN_KINDS
            annotated.add(rank)
        all_kinds |= rank_kinds
        per_rank.append((rank, present))
        for stage in set(map(_stage_of, present)):
            if stage_rank.setdefault(stage, rank) != rank:
                step = next(step for step, a in enumerate(actions) if a is not None and a.stage == stage)
                _fail(schedule, f"stage {stage} has actions on rank {stage_rank[stage]} and rank {rank} (step {step}: "
                      f"{actions[step]}); a stage runs on exactly one rank: move its actions to one rank",
                      [(rank, step)])
    if not stage_rank:
        raise ScheduleError("the schedule has no actions; generate one with generate_schedule(name, p, m)")
    lowest = min(min(map(_microbatch_of, present), default=0) for _, present in per_rank)
    if min(stage_rank) < 0 or lowest < 0:
        negative = next(a for _, present in per_rank for a in present if a.stage < 0 or a.microbatch < 0)
        _fail(schedule, f"{negative} has a negative stage or microbatch; stages and microbatches count from 0")
    n_found = max(stage_rank) + 1
    n_stages = n_found if n_stages is None else n_stages
    missing = [s for s in range(n_stages) if s not in stage_rank]
    if n_found > n_stages or missing:
        extra = sorted(s for s in stage_rank if s >= n_stages)
        _fail(schedule, f"expected stages 0..{n_stages - 1}; " + (f"stages {missing} have no actions" if missing else
              f"found stages {extra} beyond them") + "; give every stage its actions or fix n_stages")
    top = max(max(map(_microbatch_of, present), default=0) for _, present in per_rank)
    n_microbatches = top + 1 if n_microbatches is None else n_microbatches
    if top >= n_microbatches:
        rank, step = next((r, step) for r in schedule for step, a in enumerate(schedule[r])
                          if a is not None and a.microbatch == top)
        _fail(schedule, f"microbatch {top} (in {schedule[rank][step]}) is out of range 0..{n_microbatches - 1}; "
              "fix n_microbatches or the action", [(rank, step)])

    # the step of every action, per kind, at index stage * n_microbatches + microbatch
    n_mb = n_microbatches
    kinds = all_kinds | {F, B, I, W}
    step_of: Dict[Kind, List[Optional[int]]] = {kind: [None] * (n_stages * n_mb) for kind in kinds}
    for rank, _ in per_rank:
        skip = RUN_KINDS if rank in annotated else None
        for step, a in enumerate(schedule[rank]):
            if a is None or (skip is not None and a[1] not in skip):
                continue
            s, kind, mb = a
            table, x = step_of[kind], s * n_mb + mb
            if table[x] is not None:
                _fail(schedule, f"{a} appears twice (rank {rank} steps {table[x]} and {step}); "
                      "each action runs exactly once: remove one", [(rank, step)])
            table[x] = step

    def at(stage: int, kind: Kind, mb: int):
        """(rank, step) of an action, or None."""
        table = step_of.get(kind)
        step = None if table is None else table[stage * n_mb + mb]
        return None if step is None else (stage_rank[stage], step)

    fs, bs, is_, ws = step_of[F], step_of[B], step_of[I], step_of[W]
    for s in range(n_stages):  # this loop runs n_stages * n_microbatches times: keep it lean
        same_prev = s > 0 and stage_rank[s - 1] == stage_rank[s]
        same_next = s + 1 < n_stages and stage_rank[s + 1] == stage_rank[s]
        for x in range(s * n_mb, (s + 1) * n_mb):
            f, b, i, w = fs[x], bs[x], is_[x], ws[x]
            if f is None or (b is None) == (i is None) or (i is None) != (w is None):
                _fail_counts(schedule, s, x - s * n_mb, at)
            back = i if b is None else b
            after = None
            if same_next:  # the backward of stage s + 1 (its counts are checked at s + 1)
                after = bs[x + n_mb] if bs[x + n_mb] is not None else is_[x + n_mb]
            if (back < f or (w is not None and w < i) or (same_prev and fs[x - n_mb] > f)
                    or (after is not None and after > back)):
                _fail_order(schedule, s, x - s * n_mb, at, same_prev)
    comms = kinds & COMM_KINDS
    if comms:
        _check_comms(schedule, step_of, at, stage_rank, n_stages, n_mb)
    return ScheduleShape(len(schedule), n_stages, n_microbatches, stage_rank, bool(comms))


def _check_marks(schedule, rank: int, actions) -> None:
    """A no-op or mark names a stage >= 0; an overlap mark is followed by the pair it overlaps:
    a forward and a backward (B or I) of two different stages."""
    for step, a in enumerate(actions):
        if a is None or a[1] in RUN_KINDS:
            continue
        if not isinstance(a.stage, int) or a.stage < 0:
            _fail(schedule, f"rank {rank} step {step}: {a} needs a stage >= 0", [(rank, step)])
        if a[1] is not Kind.OVERLAP_F_B:
            continue
        pair = actions[step + 1:step + 3]
        kinds = sorted(b.kind.value for b in pair if b is not None and b.kind in COMPUTE_KINDS)
        if len(pair) < 2 or kinds not in (["B", "F"], ["F", "I"]) or pair[0].stage == pair[1].stage:
            _fail(schedule, f"rank {rank} step {step}: the overlap mark {a} must be followed by the pair it overlaps, "
                  "a forward and a backward (B or I) of two different stages; put the pair right after the mark "
                  "or remove the mark", [(rank, step)])


def _fail_counts(schedule, s, mb, at) -> None:
    f, b, i, w = at(s, F, mb), at(s, B, mb), at(s, I, mb), at(s, W, mb)
    name = f"stage {s} microbatch {mb}"
    if f is None:
        _fail(schedule, f"{name}: no forward {Action(s, F, mb)}; every stage runs F once per microbatch",
              [p for p in (b, i, w) if p])
    if b is not None:
        _fail(schedule, f"{name}: has both a full backward {Action(s, B, mb)} and a split one (I/W); "
              "keep either B or I and W", [b])
    lacking = "a backward (B, or I and W)" if i is None and w is None else ("I" if i is None else "W")
    _fail(schedule, f"{name}: missing {lacking}; every stage and microbatch needs one B, or one I and one W",
          [p for p in (f, i, w) if p])


def _fail_order(schedule, s, mb, at, same_prev) -> None:
    f, b, i, w = at(s, F, mb), at(s, B, mb), at(s, I, mb), at(s, W, mb)
    name, back = f"stage {s} microbatch {mb}", b or i
    if back[1] < f[1]:
        _fail(schedule, f"{name}: {Action(s, B if b else I, mb)} (rank {back[0]} step {back[1]}) runs before "
              f"{Action(s, F, mb)} (step {f[1]}); put F before the backward", [back])
    if w is not None and w[1] < i[1]:
        _fail(schedule, f"{name}: {Action(s, W, mb)} (rank {w[0]} step {w[1]}) runs before {Action(s, I, mb)} "
              f"(step {i[1]}); put I before W of the same stage and microbatch", [w])
    if same_prev and at(s - 1, F, mb)[1] > f[1]:
        _fail(schedule, f"{name}: {Action(s, F, mb)} runs before {Action(s - 1, F, mb)} on rank {f[0]}; "
              f"the forward of stage {s} needs the output of stage {s - 1}", [f])
    _fail(schedule, f"{name}: the backward of stage {s} runs before the backward of stage {s + 1} on rank "
          f"{back[0]}; it needs the input gradient of stage {s + 1}", [back])


def _check_comms(schedule, step_of, at, stage_rank, n_stages, n_mb) -> None:
    """Exactly one send and one receive per edge between stages on different ranks, the send
    after the compute that makes the data and the receive before the compute that uses it."""
    absent = [None] * (n_stages * n_mb)
    for kind, offset in ((SEND_F, 1), (RECV_F, -1), (SEND_B, -1), (RECV_B, 1)):
        table = step_of.get(kind, absent)
        for s in range(n_stages):
            peer = s + offset
            if 0 <= peer < n_stages and stage_rank[peer] != stage_rank[s]:
                continue
            mb = next((mb for mb in range(n_mb) if table[s * n_mb + mb] is not None), None)
            if mb is not None:
                why = "does not exist" if not 0 <= peer < n_stages else "is on the same rank"
                _fail(schedule, f"{Action(s, kind, mb)} has no peer on another rank (stage {peer} {why}); remove it",
                      [at(s, kind, mb)])
    fs, bs, is_ = step_of[F], step_of[B], step_of[I]
    for src in range(n_stages):
        for send, recv, offset in ((SEND_F, RECV_F, 1), (SEND_B, RECV_B, -1)):
            dst = src + offset
            if not 0 <= dst < n_stages or stage_rank[src] == stage_rank[dst]:
                continue
            sends, receives = step_of.get(send, absent), step_of.get(recv, absent)
            for mb in range(n_mb):
                x, y = src * n_mb + mb, dst * n_mb + mb
                tx, rx = sends[x], receives[y]
                if tx is None or rx is None:
                    missing = Action(src, send, mb) if tx is None else Action(dst, recv, mb)
                    _fail(schedule, f"{missing} is missing: stage {src} (rank {stage_rank[src]}) feeds stage {dst} "
                          f"(rank {stage_rank[dst]}) for microbatch {mb}; lower the compute-only schedule with "
                          "add_send_recv", [p for p in (at(src, send, mb), at(dst, recv, mb)) if p])
                if send is SEND_F:
                    made, used = fs[x], fs[y]
                else:
                    made = bs[x] if bs[x] is not None else is_[x]
                    used = bs[y] if bs[y] is not None else is_[y]
                if tx < made:
                    _fail(schedule, f"{Action(src, send, mb)} (rank {stage_rank[src]} step {tx}) runs before the "
                          "compute that produces what it sends; move the send after it", [at(src, send, mb)])
                if rx > used:
                    _fail(schedule, f"{Action(dst, recv, mb)} (rank {stage_rank[dst]} step {rx}) runs after the "
                          "compute that needs it; move the receive before it", [at(dst, recv, mb)])
