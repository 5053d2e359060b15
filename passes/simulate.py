"""Simulate a pipeline schedule: timing, bubbles, activation memory, deadlocks.

Model (all pure Python, no devices):

* Every rank runs its actions in list order, each as soon as the rank is free and its inputs are
  there (``None`` slots are ignored). Compute costs come from :class:`Costs` (defaults ``F = I = W
  = 1`` and full ``B = I + W = 2``).
* A compute-only schedule: an input made on another rank arrives ``comm_latency`` after the
  producing action ends.
* A lowered schedule (with ``SEND_*``/``RECV_*``): inputs from other ranks only come through the
  rank's own ``RECV``. With ``blocking_sends=True`` (default, like gloo) a send and its receive
  are a rendezvous: both wait until the other is posted; the sender is released at the meeting
  time, the receiver ``comm_latency`` later. With ``blocking_sends=False`` a send never waits.
* Activation memory: an ``F`` adds one activation of its stage on its rank; it stays live until
  the ``W`` (split backward) or the ``B`` (full backward) of that stage and microbatch frees it.
  ``I`` frees nothing in this model (it is conservative: the input-gradient part is not credited).

Figures in :class:`SimulationResult` (``ideal`` = the busiest rank's compute time):

* ``bubble_ratio`` = idle fraction = ``1 - sum(busy) / (n_ranks * makespan)``;
* ``bubble_vs_ideal`` = ``(makespan - ideal) / ideal``: the published "(p-1)/m" bubble of a
  flushed iteration (1F1B: ``(p-1)/m``; interleaved: ``(p-1)/(v m)``; ZB-H1: ``(p-1)/(3m)``);
* ``steady_bubble_vs_ideal`` = ``(max span - ideal) / ideal`` where a rank's span runs from its
  first to its last compute: the bubble when consecutive iterations overlap, as in the
  zero-bubble paper (ZB-H2 and ZB-V reach 0 there).

A deadlock raises :class:`~paddle_ext.errors.ScheduleError` with the rank-by-step grid around
the stuck actions, each marked ``<-- here`` with what it waits for.

>>> from paddle_ext.passes.schedule_ir import parse_schedule
>>> r = simulate_schedule(parse_schedule("rank 0: 0F0 0F1 0B0 0B1\\nrank 1: 1F0 1B0 1F1 1B1"))
>>> r.makespan, r.busy, round(r.bubble_vs_ideal, 3), r.peak_activations
(9.0, (6.0, 6.0), 0.5, (2, 1))
>>> simulate_schedule(parse_schedule("rank 0: 0F0 0B0 0F1 0B1\\nrank 1: 1F1 1B1 1F0 1B0"))
Traceback (most recent call last):
...
paddle_ext.errors.ScheduleError: deadlock: no rank can make progress (2 stuck); reorder the actions marked '<-- here' so that what each waits for comes first
step    0     1     2   3
rank 0  0F0   >0B0< 0F1 0B1   <-- here: 0B0 needs 1B0 or 1I0 (rank 1), which has not run
rank 1  >1F1< 1B1   1F0 1B0   <-- here: 1F1 needs 0F1 (rank 0), which has not run
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

from paddle_ext.errors import ScheduleError
from paddle_ext.passes.schedule_ir import Action, Kind, format_grid
from paddle_ext.passes.validate import ScheduleShape, check_structure

__all__ = ["Costs", "SimulationResult", "simulate_schedule"]

KF, KB, KI, KW = Kind.F, Kind.B, Kind.I, Kind.W
SEND_F, RECV_F, SEND_B, RECV_B = Kind.SEND_F, Kind.RECV_F, Kind.SEND_B, Kind.RECV_B


@dataclass(frozen=True)
class Costs:
    """Time of one action of each compute kind (any unit); ``full_backward`` defaults to I + W."""

    forward: float = 1.0
    backward_input: float = 1.0
    backward_weight: float = 1.0
    full_backward: Optional[float] = None

    def __post_init__(self):
        for name in ("forward", "backward_input", "backward_weight", "full_backward"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and value >= 0):
                raise ScheduleError(f"cost {name}={value!r} must be a number >= 0")

    @property
    def backward(self) -> float:
        return self.backward_input + self.backward_weight if self.full_backward is None else self.full_backward

    def of(self, kind: Kind) -> float:
        return {KF: self.forward, KB: self.backward, KI: self.backward_input, KW: self.backward_weight}.get(kind, 0.0)

    @classmethod
    def parse(cls, text: str) -> "Costs":
        """``"F,B,W"`` as on the command line, B being the input-backward (I) cost; full B = B + W.

        >>> Costs.parse("1,2,1").backward
        3.0
        """
        try:
            values = [float(x) for x in text.split(",")]
        except ValueError:
            values = []
        if len(values) != 3:
            raise ScheduleError(f"costs {text!r} should be three numbers F,B,W (B = backward for inputs), e.g. 1,1,1")
        return cls(*values)


@dataclass(frozen=True)
class SimulationResult:
    """Timing and memory of a simulated schedule. ``actions[i]``/``starts[i]``/``ends[i]`` are
    aligned per rank ``ranks[i]`` (idle slots dropped); times include communication waits."""

    ranks: Tuple[int, ...]
    actions: Tuple[Tuple[Action, ...], ...]
    starts: Tuple[Tuple[float, ...], ...]
    ends: Tuple[Tuple[float, ...], ...]
    makespan: float
    busy: Tuple[float, ...]
    spans: Tuple[float, ...]
    peak_activations: Tuple[int, ...]
    peak_activation_bytes: Tuple[float, ...]

    @property
    def ideal(self) -> float:
        return max(self.busy) if self.busy else 0.0

    @property
    def bubble_ratio(self) -> float:
        total = len(self.ranks) * self.makespan
        return 1.0 - sum(self.busy) / total if total else 0.0

    @property
    def bubble_vs_ideal(self) -> float:
        return (self.makespan - self.ideal) / self.ideal if self.ideal else 0.0

    @property
    def steady_bubble_vs_ideal(self) -> float:
        return (max(self.spans) - self.ideal) / self.ideal if self.ideal else 0.0

    def timed(self, index: int):
        """``(action, start, end)`` of the rank at ``index`` (of ``ranks``), in order."""
        return zip(self.actions[index], self.starts[index], self.ends[index])

    def summary(self) -> dict:
        """The figures as plain JSON-ready values."""
        return {"makespan": self.makespan, "ideal": self.ideal, "bubble_ratio": self.bubble_ratio,
                "bubble_vs_ideal": self.bubble_vs_ideal, "steady_bubble_vs_ideal": self.steady_bubble_vs_ideal,
                "busy": list(self.busy), "peak_activations": list(self.peak_activations),
                "peak_activation_bytes": list(self.peak_activation_bytes)}


def simulate_schedule(schedule: Mapping[int, Sequence[Optional[Action]]], costs: Union[Costs, Mapping, None] = None,
                      comm_latency: float = 0.0, activation_bytes: Union[float, Mapping[int, float]] = 1.0, *,
                      blocking_sends: bool = True, n_stages: Optional[int] = None,
                      n_microbatches: Optional[int] = None) -> SimulationResult:
    """Simulate ``schedule`` (compute-only or lowered) and return its :class:`SimulationResult`.

    ``costs`` is a :class:`Costs` or a dict like ``{"F": 1, "I": 1, "W": 1, "B": 2}``;
    ``activation_bytes`` is the size of one activation, for all stages or per stage.
    The schedule is validated first (:func:`~paddle_ext.passes.validate.check_structure`).
    """
    shape = check_structure(schedule, n_stages, n_microbatches)
    return run_simulation(schedule, shape, _coerce_costs(costs), comm_latency, activation_bytes, blocking_sends)


def _coerce_costs(costs) -> Costs:
    if costs is None:
        return Costs()
    if isinstance(costs, Costs):
        return costs
    if isinstance(costs, Mapping):
        unknown = set(costs) - {"F", "B", "I", "W"}
        if unknown:
            raise ScheduleError(f"unknown cost keys {sorted(unknown)}; use F, I, W and optionally B")
        return Costs(costs.get("F", 1.0), costs.get("I", 1.0), costs.get("W", 1.0), costs.get("B"))
    raise ScheduleError(f"costs must be a Costs or a dict of F/I/W/B, got {costs!r}")


def run_simulation(schedule, shape: ScheduleShape, costs: Costs, comm_latency: float = 0.0,
                   activation_bytes: Union[float, Mapping[int, float]] = 1.0,
                   blocking_sends: bool = True) -> SimulationResult:
    """The simulator proper, for a schedule already checked by ``check_structure``."""
    ranks = tuple(sorted(schedule))
    lists = [[a for a in schedule[r] if a is not None] for r in ranks]
    index_of = {r: i for i, r in enumerate(ranks)}
    n_stages, n_mb, lowered = shape.n_stages, shape.n_microbatches, shape.lowered
    srank = [index_of[shape.stage_to_rank[s]] for s in range(n_stages)]
    cost = {KF: float(costs.forward), KB: float(costs.backward), KI: float(costs.backward_input),
            KW: float(costs.backward_weight)}
    lat = float(comm_latency)
    size = n_stages * n_mb
    f_end: List[Optional[float]] = [None] * size  # F(s, mb) finished (its rank)
    g_end: List[Optional[float]] = [None] * size  # B or I(s, mb) finished: input grad of s exists
    got_f: List[Optional[float]] = [None] * size  # RECV_F(s, mb) finished on the rank of s
    got_b: List[Optional[float]] = [None] * size  # RECV_B(s, mb) finished on the rank of s
    arrived: Dict[Tuple[Kind, int], float] = {}  # non-blocking sends: data in flight
    posted: Dict[Tuple[Kind, int], Tuple[int, float]] = {}  # rendezvous: first side waiting
    waiting: Dict[Tuple[str, int], List[int]] = {}
    blocked: Dict[int, str] = {}
    n_ranks = len(ranks)
    pos = [0] * n_ranks
    clock = [0.0] * n_ranks
    starts = [[0.0] * len(a) for a in lists]
    ends = [[0.0] * len(a) for a in lists]
    work = deque(range(n_ranks))

    def wait(ri: int, key, why: tuple) -> None:
        waiting.setdefault(key, []).append(ri)
        blocked[ri] = why

    def wake(key) -> None:
        for rj in waiting.pop(key, ()):
            work.append(rj)

    def meet(ri: int, t: float, key, mine: Kind, peer_kind: Kind) -> Optional[float]:
        """Rendezvous of a send and a receive; returns this side's completion time or None (posted)."""
        other = posted.pop(key, None)
        if other is None:
            posted[key] = (ri, t)
            blocked[ri] = ("meet", peer_kind)
            return None
        rj, tj = other
        meet_at = max(t, tj)
        done_j = meet_at + lat if peer_kind in (RECV_F, RECV_B) else meet_at
        p = pos[rj]
        starts[rj][p], ends[rj][p] = tj, done_j
        if peer_kind is RECV_F:
            got_f[key[1]] = done_j
        elif peer_kind is RECV_B:
            got_b[key[1]] = done_j
        clock[rj], pos[rj] = done_j, p + 1
        blocked.pop(rj, None)
        work.append(rj)
        return meet_at + lat if mine in (RECV_F, RECV_B) else meet_at

    def input_ready(ri, a, src_stage, src_idx, idx, table, got):
        """When the input made by ``src_stage`` is usable by ``a`` on rank ``ri`` (None: not yet)."""
        forward = table is f_end
        if srank[src_stage] != ri and lowered:
            dep = got[idx]
            if dep is None:
                recv = RECV_F if forward else RECV_B
                wait(ri, (recv, idx), ("recv", a, recv))
            return dep
        dep = table[src_idx]
        if dep is None:
            where = "same rank" if srank[src_stage] == ri else f"rank {ranks[srank[src_stage]]}"
            wait(ri, ("F" if forward else "G", src_idx), ("input", a, _producer(src_stage, a, forward), where))
            return None
        return dep if srank[src_stage] == ri else dep + lat

    while work:
        ri = work.popleft()
        acts, p, t, n = lists[ri], pos[ri], clock[ri], len(lists[ri])
        while p < n:
            a = acts[p]
            k, s = a.kind, a.stage
            idx = s * n_mb + a.microbatch
            start = t
            if k is KF:
                if s > 0:
                    dep = input_ready(ri, a, s - 1, idx - n_mb, idx, f_end, got_f)
                    if dep is None:
                        break
                    start = dep if dep > t else t
                t = start + cost[k]
                f_end[idx] = t
                wake(("F", idx))
            elif k is KB or k is KI:
                if f_end[idx] is None:
                    wait(ri, ("F", idx), ("input", a, f"{s}F{a.microbatch}", "same rank"))
                    break
                if s + 1 < n_stages:
                    dep = input_ready(ri, a, s + 1, idx + n_mb, idx, g_end, got_b)
                    if dep is None:
                        break
                    start = dep if dep > t else t
                t = start + cost[k]
                g_end[idx] = t
                wake(("G", idx))
            elif k is KW:
                if g_end[idx] is None:
                    wait(ri, ("G", idx), ("input", a, f"{s}I{a.microbatch}", "same rank"))
                    break
                t = start + cost[k]
            else:  # communication
                made = f_end if k is SEND_F else g_end if k is SEND_B else None
                if made is not None and made[idx] is None:
                    wait(ri, ("F" if k is SEND_F else "G", idx), ("unsent", a))
                    break
                if k is SEND_F or k is SEND_B:
                    key = (RECV_F, idx + n_mb) if k is SEND_F else (RECV_B, idx - n_mb)
                    if blocking_sends:
                        done = meet(ri, t, key, k, key[0])
                        if done is None:
                            starts[ri][p] = t
                            break
                        t = done
                    else:
                        arrived[key] = t + lat
                        wake(key)
                else:
                    key = (k, idx)
                    if blocking_sends:
                        done = meet(ri, t, key, k, SEND_F if k is RECV_F else SEND_B)
                        if done is None:
                            starts[ri][p] = t
                            break
                    else:
                        if key not in arrived:
                            wait(ri, key, ("send", a))
                            break
                        done = max(t, arrived[key])
                    (got_f if k is RECV_F else got_b)[idx] = done
                    t = done
            starts[ri][p], ends[ri][p] = start, t
            p += 1
        else:
            blocked.pop(ri, None)
        pos[ri], clock[ri] = p, t

    stuck = [i for i in range(n_ranks) if pos[i] < len(lists[i])]
    if stuck:
        _raise_deadlock(schedule, ranks, lists, pos, stuck, blocked)
    return _result(ranks, lists, starts, ends, cost, shape, activation_bytes)


def _producer(stage: int, a: Action, forward: bool) -> str:
    mb = a.microbatch
    return f"{stage}F{mb}" if forward else f"{stage}B{mb} or {stage}I{mb}"


def _explain(action: Action, why) -> str:
    if why is None:
        return f"{action} is blocked"
    tag = why[0]
    if tag == "input":
        return f"{action} needs {why[2]} ({why[3]}), which has not run"
    if tag == "recv":
        return f"{action} needs {action.stage}{why[2]}{action.microbatch} earlier on this rank"
    if tag == "meet":
        peer_stage = action.stage + (1 if action.kind in (SEND_F, RECV_B) else -1)
        return f"{action} waits for {peer_stage}{why[1]}{action.microbatch} to be posted (blocking send)"
    if tag == "send":
        return f"{action} waits for its send, which has not run"
    return f"{action} sends a result that has not been computed yet"


def _raise_deadlock(schedule, ranks, lists, pos, stuck, blocked) -> None:
    # map list positions (idle slots dropped) back to steps in the original lists
    marks, notes = {}, {}
    for i in stuck:
        rank = ranks[i]
        steps = [step for step, a in enumerate(schedule[rank]) if a is not None]
        marks[rank] = steps[pos[i]]
        notes[rank] = _explain(lists[i][pos[i]], blocked.get(i))
    grid = format_grid(schedule, marks=marks, notes=notes, window=5)
    raise ScheduleError(f"deadlock: no rank can make progress ({len(stuck)} stuck); reorder the actions "
                        f"marked '<-- here' so that what each waits for comes first\n{grid}")


def _result(ranks, lists, starts, ends, cost, shape, activation_bytes) -> SimulationResult:
    if isinstance(activation_bytes, Mapping):
        size_of = [float(activation_bytes.get(s, 0.0)) for s in range(shape.n_stages)]
    else:
        size_of = [float(activation_bytes)] * shape.n_stages
    busy, spans, peaks, peak_bytes = [], [], [], []
    makespan = 0.0
    for acts, st, en in zip(lists, starts, ends):
        total, first, last = 0.0, None, 0.0
        live = peak = 0
        live_b = peak_b = 0.0
        for a, s0, e0 in zip(acts, st, en):
            k = a.kind
            c = cost.get(k)
            if c is None:
                continue
            total += c
            if first is None:
                first = s0
            last = e0
            if k is KF:
                live += 1
                live_b += size_of[a.stage]
                peak = max(peak, live)
                peak_b = max(peak_b, live_b)
            elif k is KW or k is KB:
                live -= 1
                live_b -= size_of[a.stage]
        busy.append(total)
        spans.append(last - first if first is not None else 0.0)
        peaks.append(peak)
        peak_bytes.append(peak_b)
        if en:
            makespan = max(makespan, max(en))
    return SimulationResult(ranks=ranks, actions=tuple(tuple(a) for a in lists),
                            starts=tuple(tuple(x) for x in starts), ends=tuple(tuple(x) for x in ends),
                            makespan=makespan, busy=tuple(busy), spans=tuple(spans),
                            peak_activations=tuple(peaks), peak_activation_bytes=tuple(peak_bytes))
