"""Simulate a pipeline schedule: timing, bubbles, activation memory, deadlocks.

Model (all pure Python, no devices):

* Every rank runs its actions in list order, each as soon as the rank is free and its inputs are
  there (``None`` slots are ignored). Compute costs come from :class:`Costs` (defaults ``F = I = W
  = 1`` and full ``B = I + W = 2``), the same for every stage unless ``stage_costs`` gives some
  stages their own (measured stages differ: the first has no input gradient to compute, the last
  runs the loss).
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

from collections import Counter, deque
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

from paddle_ext.errors import ScheduleError
from .schedule_ir import COMPUTE_KINDS, Action, Kind, format_grid
from .structure import ScheduleShape, check_structure

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
                      n_microbatches: Optional[int] = None,
                      stage_costs: Optional[Mapping[int, Union[Costs, Mapping]]] = None) -> SimulationResult:
    """Simulate ``schedule`` (compute-only or lowered) and return its :class:`SimulationResult`.

    ``costs`` is a :class:`Costs` or a dict like ``{"F": 1, "I": 1, "W": 1, "B": 2}``;
    ``stage_costs`` optionally maps stage index -> costs of that stage (the others use ``costs``);
    ``activation_bytes`` is the size of one activation, for all stages or per stage.
    The schedule is validated first (:func:`~paddle_ext.passes.validate.check_structure`).

    >>> from paddle_ext.passes.schedule_ir import parse_schedule
    >>> two = parse_schedule("rank 0: 0F0 0B0\\nrank 1: 1F0 1B0")
    >>> simulate_schedule(two, {"F": 1, "I": 1, "W": 1}, stage_costs={1: {"F": 2, "I": 1, "W": 1}}).makespan
    7.0
    """
    shape = check_structure(schedule, n_stages, n_microbatches)
    per_stage = None
    if stage_costs is not None:
        if not isinstance(stage_costs, Mapping):
            raise ScheduleError(f"stage_costs must map stage index -> costs, got {type(stage_costs).__name__}")
        bad = [s for s in stage_costs if not isinstance(s, int) or not 0 <= s < shape.n_stages]
        if bad:
            raise ScheduleError(f"stage_costs has stages {bad} that the schedule does not have "
                                f"(stages 0..{shape.n_stages - 1})")
        per_stage = {s: _coerce_costs(c) for s, c in stage_costs.items()}
    return run_simulation(schedule, shape, _coerce_costs(costs), comm_latency, activation_bytes, blocking_sends,
                          per_stage)


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


def _check_latency(comm_latency) -> float:
    """``comm_latency`` as a float >= 0, or :class:`ScheduleError` naming it."""
    try:
        lat = float(comm_latency)
    except (TypeError, ValueError):
        lat = float("nan")
    if isinstance(comm_latency, bool) or not lat >= 0 or lat == float("inf"):
        raise ScheduleError(f"comm_latency={comm_latency!r} must be a number >= 0 (the time a message takes "
                            f"from one rank to the next; 0 for free communication)")
    return lat


def run_simulation(schedule, shape: ScheduleShape, costs: Costs, comm_latency: float = 0.0,
                   activation_bytes: Union[float, Mapping[int, float]] = 1.0,
                   blocking_sends: bool = True, stage_costs: Optional[Mapping[int, Costs]] = None) -> SimulationResult:
    """The simulator proper, for a schedule already checked by ``check_structure``.

    Ranks are advanced one at a time, each as far as its inputs allow; a rank that must wait is
    parked on what it waits for and woken when that happens, so every action is handled about
    once. An input is indexed ``stage * n_microbatches + microbatch``.
    """
    ranks = tuple(sorted(schedule))
    lists = [[a for a in schedule[r] if a is not None] for r in ranks]
    index_of = {r: i for i, r in enumerate(ranks)}
    n_stages, n_mb, lowered = shape.n_stages, shape.n_microbatches, shape.lowered
    srank = [index_of[shape.stage_to_rank[s]] for s in range(n_stages)]
    # where a stage's forward input / backward input comes from: same rank, or over the network
    local_prev = [s > 0 and srank[s - 1] == srank[s] for s in range(n_stages)]
    local_next = [s + 1 < n_stages and srank[s + 1] == srank[s] for s in range(n_stages)]
    # read the producer's finish time directly (same rank, or compute-only with latency), or
    # wait for this rank's own receive (lowered schedule)
    direct_prev = [local or not lowered for local in local_prev]
    direct_next = [local or not lowered for local in local_next]
    of_stage = [(stage_costs or {}).get(s, costs) for s in range(n_stages)]
    cost_f = [float(c.forward) for c in of_stage]
    cost_b = [float(c.backward) for c in of_stage]
    cost_i = [float(c.backward_input) for c in of_stage]
    cost_w = [float(c.backward_weight) for c in of_stage]
    lat = _check_latency(comm_latency)
    size = n_stages * n_mb
    f_end: List[Optional[float]] = [None] * size  # F(s, mb) finished (on its rank)
    g_end: List[Optional[float]] = [None] * size  # B or I(s, mb) finished: the input grad of s exists
    got_f: List[Optional[float]] = [None] * size  # RECV_F(s, mb) finished on the rank of s
    got_b: List[Optional[float]] = [None] * size  # RECV_B(s, mb) finished on the rank of s
    arrived: Dict[Tuple[Kind, int], float] = {}  # non-blocking sends: data in flight
    posted: Dict[Tuple[Kind, int], Tuple[int, float]] = {}  # rendezvous: the side that came first
    wait_f: Dict[int, List[int]] = {}  # ranks parked until f_end[idx] is set
    wait_g: Dict[int, List[int]] = {}  # ... until g_end[idx] is set
    waiting: Dict[tuple, List[int]] = {}  # ... until a receive or a buffered send happens
    blocked: Dict[int, tuple] = {}  # why each parked rank waits (for the deadlock report)
    n_ranks = len(ranks)
    pos = [0] * n_ranks
    clock = [0.0] * n_ranks
    starts = [[0.0] * len(a) for a in lists]
    ends = [[0.0] * len(a) for a in lists]
    work = deque(range(n_ranks))

    def park(table: dict, key, ri: int, why: tuple) -> None:
        table.setdefault(key, []).append(ri)
        blocked[ri] = why

    def meet(ri: int, t: float, key, peer_kind: Kind) -> Optional[float]:
        """Rendezvous of a send and a receive: this side's completion time, or None if it came first."""
        other = posted.pop(key, None)
        if other is None:
            posted[key] = (ri, t)
            blocked[ri] = ("meet", peer_kind)
            return None
        rj, tj = other
        meet_at = max(t, tj)
        peer_receives = peer_kind is RECV_F or peer_kind is RECV_B
        done_j = meet_at + lat if peer_receives else meet_at
        p = pos[rj]
        starts[rj][p], ends[rj][p] = tj, done_j
        if peer_receives:
            (got_f if peer_kind is RECV_F else got_b)[key[1]] = done_j
        clock[rj], pos[rj] = done_j, p + 1
        blocked.pop(rj, None)
        work.append(rj)
        return meet_at if peer_receives else meet_at + lat

    kf, kb, ki, kw = KF, KB, KI, KW  # locals: the loop below runs once per action
    send_f, send_b, recv_f = SEND_F, SEND_B, RECV_F
    while work:
        ri = work.popleft()
        acts, t, n = lists[ri], clock[ri], len(lists[ri])
        my_starts, my_ends = starts[ri], ends[ri]
        for p in range(pos[ri], n):  # a break leaves p at the action this rank waits on
            a = acts[p]
            s, k, mb = a
            idx = s * n_mb + mb
            start = t
            if k is kf:
                if s:
                    if direct_prev[s]:
                        dep = f_end[idx - n_mb]
                        if dep is None:
                            park(wait_f, idx - n_mb, ri, ("input", a, f"{s - 1}F{mb}", _where(local_prev[s], ranks,
                                                                                             srank[s - 1])))
                            break
                        if not local_prev[s]:
                            dep += lat
                    else:
                        dep = got_f[idx]
                        if dep is None:
                            park(waiting, (RECV_F, idx), ri, ("recv", a, RECV_F))
                            break
                    if dep > t:
                        start = dep
                t = start + cost_f[s]
                f_end[idx] = t
                if wait_f and idx in wait_f:
                    work.extend(wait_f.pop(idx))
            elif k is kb or k is ki:
                if f_end[idx] is None:
                    park(wait_f, idx, ri, ("input", a, f"{s}F{mb}", "same rank"))
                    break
                if s + 1 < n_stages:
                    if direct_next[s]:
                        dep = g_end[idx + n_mb]
                        if dep is None:
                            park(wait_g, idx + n_mb, ri, ("input", a, f"{s + 1}B{mb} or {s + 1}I{mb}",
                                                          _where(local_next[s], ranks, srank[s + 1])))
                            break
                        if not local_next[s]:
                            dep += lat
                    else:
                        dep = got_b[idx]
                        if dep is None:
                            park(waiting, (RECV_B, idx), ri, ("recv", a, RECV_B))
                            break
                    if dep > t:
                        start = dep
                t = start + (cost_b[s] if k is kb else cost_i[s])
                g_end[idx] = t
                if wait_g and idx in wait_g:
                    work.extend(wait_g.pop(idx))
            elif k is kw:
                if g_end[idx] is None:
                    park(wait_g, idx, ri, ("input", a, f"{s}I{mb}", "same rank"))
                    break
                t = start + cost_w[s]
            elif k is send_f or k is send_b:
                made, table = (f_end, wait_f) if k is send_f else (g_end, wait_g)
                if made[idx] is None:
                    park(table, idx, ri, ("unsent", a))
                    break
                key = (RECV_F, idx + n_mb) if k is send_f else (RECV_B, idx - n_mb)
                if blocking_sends:
                    done = meet(ri, t, key, key[0])
                    if done is None:
                        my_starts[p] = t
                        break
                    t = done
                else:
                    arrived[key] = t + lat
                    if key in waiting:
                        work.extend(waiting.pop(key))
            else:  # RECV_F or RECV_B
                key = (k, idx)
                if blocking_sends:
                    done = meet(ri, t, key, SEND_F if k is recv_f else SEND_B)
                    if done is None:
                        my_starts[p] = t
                        break
                else:
                    if key not in arrived:
                        park(waiting, key, ri, ("send", a))
                        break
                    done = max(t, arrived[key])
                (got_f if k is recv_f else got_b)[idx] = done
                t = done
            my_starts[p] = start
            my_ends[p] = t
        else:
            p = n
            blocked.pop(ri, None)
        pos[ri], clock[ri] = p, t

    stuck = [i for i in range(n_ranks) if pos[i] < len(lists[i])]
    if stuck:
        _raise_deadlock(schedule, ranks, lists, pos, stuck, blocked)
    return _result(ranks, lists, starts, ends, of_stage, shape, activation_bytes)


def _where(local: bool, ranks, producer_index: int) -> str:
    return "same rank" if local else f"rank {ranks[producer_index]}"


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


def _result(ranks, lists, starts, ends, of_stage: Sequence[Costs], shape, activation_bytes) -> SimulationResult:
    if isinstance(activation_bytes, Mapping):
        size_of = [float(activation_bytes.get(s, 0.0)) for s in range(shape.n_stages)]
    else:
        size_of = [float(activation_bytes)] * shape.n_stages
    busy, spans, peaks, peak_bytes = [], [], [], []
    for acts, st, en in zip(lists, starts, ends):
        counts = Counter([(a[0], a[1]) for a in acts])
        busy.append(sum(of_stage[s].of(kind) * count for (s, kind), count in counts.items()))
        first = next((i for i, a in enumerate(acts) if a[1] in COMPUTE_KINDS), None)
        last = next((i for i in range(len(acts) - 1, -1, -1) if acts[i][1] in COMPUTE_KINDS), None)
        spans.append(en[last] - st[first] if first is not None else 0.0)
        live = peak = 0
        live_b = peak_b = 0.0
        kf, kb, kw = KF, KB, KW
        for s, k, _ in acts:  # an activation lives from its F to its W (split) or B (full)
            if k is kf:
                live += 1
                live_b += size_of[s]
                if live > peak:
                    peak = live
                if live_b > peak_b:
                    peak_b = live_b
            elif k is kw or k is kb:
                live -= 1
                live_b -= size_of[s]
        peaks.append(peak)
        peak_bytes.append(peak_b)
    makespan = max((max(en) for en in ends if en), default=0.0)
    return SimulationResult(ranks=ranks, actions=tuple(tuple(a) for a in lists),
                            starts=tuple(tuple(x) for x in starts), ends=tuple(tuple(x) for x in ends),
                            makespan=makespan, busy=tuple(busy), spans=tuple(spans),
                            peak_activations=tuple(peaks), peak_activation_bytes=tuple(peak_bytes))
