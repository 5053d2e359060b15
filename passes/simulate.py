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
* Two runtime models for a receive (``recv``): ``"blocking"`` (default, and what torch's step
  simulator does) runs it where it sits, the rank waiting until the data is there; ``"early"``
  posts it where it sits without waiting (as torch's runtime posts an ``irecv``) and the compute
  that needs the data waits for it. With blocking sends an early-posted receive still meets its
  send: the sender is released when both are posted, the data lands ``comm_latency`` later.
* Overlapped F&B pairs (an ``OVERLAP_F_B`` mark before two actions, as in DualPipe; see
  :mod:`~paddle_ext.passes.schedule_ir`) with ``overlap="max"`` (default) or ``"sum"`` start
  together once both inputs are there and both end one slot later, the slot lasting ``max(F, B)``
  or ``F + B``; ``"off"`` runs them one after the other. ``busy`` counts the slot, so ``idle``
  is DualPipe's bubble. No-ops (``UNSHARD``, ``RESHARD``, ``REDUCE_GRAD``) take no time.
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
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

from paddle_ext.errors import ScheduleError
from .schedule_ir import Action, Kind, format_grid
from .sim_model import (OVERLAP_MODELS, RECV_MODELS, Costs, SimulationResult, build_result, check_latency,
                        coerce_costs)
from .structure import ScheduleShape, check_structure

__all__ = ["Costs", "SimulationResult", "simulate_schedule", "RECV_MODELS", "OVERLAP_MODELS"]

# the old private names, used by the lowering
_coerce_costs, _check_latency = coerce_costs, check_latency

KF, KB, KI, KW = Kind.F, Kind.B, Kind.I, Kind.W
SEND_F, RECV_F, SEND_B, RECV_B = Kind.SEND_F, Kind.RECV_F, Kind.SEND_B, Kind.RECV_B
MARK = Kind.OVERLAP_F_B


def simulate_schedule(schedule: Mapping[int, Sequence[Optional[Action]]], costs: Union[Costs, Mapping, None] = None,
                      comm_latency: float = 0.0, activation_bytes: Union[float, Mapping[int, float]] = 1.0, *,
                      blocking_sends: bool = True, n_stages: Optional[int] = None,
                      n_microbatches: Optional[int] = None,
                      stage_costs: Optional[Mapping[int, Union[Costs, Mapping]]] = None,
                      recv: str = "blocking", overlap: str = "max") -> SimulationResult:
    """Simulate ``schedule`` (compute-only or lowered) and return its :class:`SimulationResult`.

    ``recv`` (``"blocking"`` or ``"early"``) and ``overlap`` (``"max"``, ``"sum"`` or ``"off"``)
    choose the runtime model (module docstring); ``recv`` only matters for a lowered schedule.

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
        per_stage = {s: coerce_costs(c) for s, c in stage_costs.items()}
    return run_simulation(schedule, shape, coerce_costs(costs), comm_latency, activation_bytes, blocking_sends,
                          per_stage, recv=recv, overlap=overlap)


def run_simulation(schedule, shape: ScheduleShape, costs: Costs, comm_latency: float = 0.0,
                   activation_bytes: Union[float, Mapping[int, float]] = 1.0,
                   blocking_sends: bool = True, stage_costs: Optional[Mapping[int, Costs]] = None, *,
                   recv: str = "blocking", overlap: str = "max") -> SimulationResult:
    """The simulator proper, for a schedule already checked by ``check_structure``.

    Ranks are advanced one at a time, each as far as its inputs allow; a rank that must wait is
    parked on what it waits for and woken when that happens, so every action is handled about
    once. An input is indexed ``stage * n_microbatches + microbatch``.
    """
    if recv not in RECV_MODELS:
        raise ScheduleError(f"recv={recv!r}: the receive model is one of {', '.join(RECV_MODELS)}")
    if overlap not in OVERLAP_MODELS:
        raise ScheduleError(f"overlap={overlap!r}: overlapped F&B pairs are timed as one of "
                            f"{', '.join(OVERLAP_MODELS)}")
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
    lat = check_latency(comm_latency)
    early, pair_slot = recv == "early", (None if overlap == "off" else (max if overlap == "max" else _add))
    size = n_stages * n_mb
    f_end: List[Optional[float]] = [None] * size  # F(s, mb) finished (on its rank)
    g_end: List[Optional[float]] = [None] * size  # B or I(s, mb) finished: the input grad of s exists
    got_f: List[Optional[float]] = [None] * size  # RECV_F(s, mb)'s data is there on the rank of s
    got_b: List[Optional[float]] = [None] * size  # RECV_B(s, mb)'s data is there on the rank of s
    arrived: Dict[Tuple[Kind, int], float] = {}  # non-blocking sends: data in flight
    posted: Dict[Tuple[Kind, int], tuple] = {}  # rendezvous: (rank, time, early receive?) of the side first there
    wait_f: Dict[int, List[int]] = {}  # ranks parked until f_end[idx] is set
    wait_g: Dict[int, List[int]] = {}  # ... until g_end[idx] is set
    waiting: Dict[tuple, List[int]] = {}  # ... until a receive's data or a buffered send is there
    blocked: Dict[int, tuple] = {}  # why each parked rank waits (for the deadlock report)
    n_ranks = len(ranks)
    pos = [0] * n_ranks
    clock = [0.0] * n_ranks
    saved = [0.0] * n_ranks  # compute time saved by overlapped pairs
    pairs = [0] * n_ranks
    starts = [[0.0] * len(a) for a in lists]
    ends = [[0.0] * len(a) for a in lists]
    work = deque(range(n_ranks))

    def park(table: dict, key, ri: int, why: tuple) -> None:
        table.setdefault(key, []).append(ri)
        blocked[ri] = why

    def data_there(key, when: float) -> None:
        """A receive's data is on its rank at ``when``: record it, wake who waits for it."""
        (got_f if key[0] is RECV_F else got_b)[key[1]] = when
        if key in waiting:
            work.extend(waiting.pop(key))

    def meet(ri: int, t: float, key, peer_kind: Kind, early_recv: bool = False) -> Optional[float]:
        """Rendezvous of a send and a receive: this side's completion time, or None if it came
        first (an early-posted receive never waits: its rank goes on)."""
        other = posted.pop(key, None)
        if other is None:
            posted[key] = (ri, t, early_recv)
            if not early_recv:
                blocked[ri] = ("meet", peer_kind)
            return None
        rj, tj, other_early = other
        meet_at = max(t, tj)
        this_receives = peer_kind is SEND_F or peer_kind is SEND_B
        data_there(key, meet_at + lat)  # whoever receives, the data lands then
        if not other_early:  # the peer is parked on its send or blocking receive: release it
            done_j = meet_at if this_receives else meet_at + lat
            p = pos[rj]
            starts[rj][p], ends[rj][p] = tj, done_j
            clock[rj], pos[rj] = done_j, p + 1
            blocked.pop(rj, None)
            work.append(rj)
        return meet_at + lat if this_receives else meet_at

    def inputs_at(ri: int, a: Action) -> Optional[float]:
        """When the inputs of compute action ``a`` are there, or None after parking the rank."""
        s, k, mb = a
        idx = s * n_mb + mb
        if k is KF:
            if not s:
                return 0.0
            if direct_prev[s]:
                dep = f_end[idx - n_mb]
                if dep is None:
                    park(wait_f, idx - n_mb, ri, ("input", a, f"{s - 1}F{mb}", _where(local_prev[s], ranks,
                                                                                     srank[s - 1])))
                    return None
                return dep if local_prev[s] else dep + lat
            if got_f[idx] is None:
                park(waiting, (RECV_F, idx), ri, ("data" if early else "recv", a, RECV_F))
            return got_f[idx]
        if f_end[idx] is None:
            park(wait_f, idx, ri, ("input", a, f"{s}F{mb}", "same rank"))
            return None
        if s + 1 == n_stages:
            return 0.0
        if direct_next[s]:
            dep = g_end[idx + n_mb]
            if dep is None:
                park(wait_g, idx + n_mb, ri, ("input", a, f"{s + 1}B{mb} or {s + 1}I{mb}",
                                              _where(local_next[s], ranks, srank[s + 1])))
                return None
            return dep if local_next[s] else dep + lat
        if got_b[idx] is None:
            park(waiting, (RECV_B, idx), ri, ("data" if early else "recv", a, RECV_B))
        return got_b[idx]

    def done(idx: int, k: Kind, t: float) -> None:
        """Compute ``k`` of input ``idx`` finished at ``t``: record it and wake who needs it."""
        if k is KF:
            f_end[idx] = t
            if wait_f and idx in wait_f:
                work.extend(wait_f.pop(idx))
        elif k is not KW:
            g_end[idx] = t
            if wait_g and idx in wait_g:
                work.extend(wait_g.pop(idx))

    def compute_cost(a: Action) -> float:
        s, k = a[0], a[1]
        return cost_f[s] if k is KF else cost_b[s] if k is KB else cost_i[s] if k is KI else cost_w[s]

    kf, kb, ki, kw = KF, KB, KI, KW  # locals: the loop below runs once per action
    send_f, send_b, recv_f, recv_b = SEND_F, SEND_B, RECV_F, RECV_B
    while work:
        ri = work.popleft()
        acts, t, n = lists[ri], clock[ri], len(lists[ri])
        my_starts, my_ends = starts[ri], ends[ri]
        stopped = False  # a break leaves p at the action this rank waits on
        pair_end = 0  # the two actions of an overlapped pair were timed with their mark
        p = pos[ri]
        for p in range(p, n):
            if p < pair_end:
                continue
            a = acts[p]
            s, k, mb = a
            start = t
            if k is kf or k is kb or k is ki:
                idx = s * n_mb + mb
                if k is kf:
                    if s:
                        if direct_prev[s]:
                            dep = f_end[idx - n_mb]
                            if dep is None:
                                inputs_at(ri, a)  # parks with the reason
                                stopped = True
                                break
                            if not local_prev[s]:
                                dep += lat
                        else:
                            dep = got_f[idx]
                            if dep is None:
                                inputs_at(ri, a)
                                stopped = True
                                break
                        if dep > t:
                            start = dep
                    t = start + cost_f[s]
                    f_end[idx] = t
                    if wait_f and idx in wait_f:
                        work.extend(wait_f.pop(idx))
                else:
                    if f_end[idx] is None:
                        inputs_at(ri, a)  # parks with the reason
                        stopped = True
                        break
                    if s + 1 < n_stages:
                        if direct_next[s]:
                            dep = g_end[idx + n_mb]
                            if dep is None:
                                inputs_at(ri, a)
                                stopped = True
                                break
                            if not local_next[s]:
                                dep += lat
                        else:
                            dep = got_b[idx]
                            if dep is None:
                                inputs_at(ri, a)
                                stopped = True
                                break
                        if dep > t:
                            start = dep
                    t = start + (cost_b[s] if k is kb else cost_i[s])
                    g_end[idx] = t
                    if wait_g and idx in wait_g:
                        work.extend(wait_g.pop(idx))
            elif k is kw:
                idx = s * n_mb + mb
                if g_end[idx] is None:
                    park(wait_g, idx, ri, ("input", a, f"{s}I{mb}", "same rank"))
                    stopped = True
                    break
                t = start + cost_w[s]
            elif k is send_f or k is send_b:
                idx = s * n_mb + mb
                made, table = (f_end, wait_f) if k is send_f else (g_end, wait_g)
                if made[idx] is None:
                    park(table, idx, ri, ("unsent", a))
                    stopped = True
                    break
                key = (RECV_F, idx + n_mb) if k is send_f else (RECV_B, idx - n_mb)
                if blocking_sends:
                    finished = meet(ri, t, key, key[0])
                    if finished is None:
                        my_starts[p] = t
                        stopped = True
                        break
                    t = finished
                else:
                    arrived[key] = t + lat
                    if early:
                        data_there(key, t + lat)
                    elif key in waiting:
                        work.extend(waiting.pop(key))
            elif k is recv_f or k is recv_b:
                key = (k, s * n_mb + mb)
                if early:  # post it and go on; the compute that needs the data waits for it
                    if blocking_sends:
                        meet(ri, t, key, SEND_F if k is recv_f else SEND_B, early_recv=True)
                elif blocking_sends:
                    finished = meet(ri, t, key, SEND_F if k is recv_f else SEND_B)
                    if finished is None:
                        my_starts[p] = t
                        stopped = True
                        break
                    data_there(key, finished)
                    t = finished
                else:
                    if key not in arrived:
                        park(waiting, key, ri, ("send", a))
                        stopped = True
                        break
                    t = max(t, arrived[key])
                    data_there(key, t)
            elif k is MARK and pair_slot is not None:  # an overlapped pair: one slot
                first, second = acts[p + 1], acts[p + 2]
                dep_first = inputs_at(ri, first)
                dep_second = None if dep_first is None else inputs_at(ri, second)
                if dep_second is None:
                    stopped = True
                    break
                start = max(t, dep_first, dep_second)
                c1, c2 = compute_cost(first), compute_cost(second)
                t = start + pair_slot(c1, c2)
                saved[ri] += c1 + c2 - (t - start)
                pairs[ri] += 1
                my_starts[p] = my_ends[p] = start
                for q, b in ((p + 1, first), (p + 2, second)):
                    my_starts[q], my_ends[q] = start, t
                    done(b[0] * n_mb + b[2], b[1], t)
                pair_end = p + 3
                continue
            # else: a no-op (UNSHARD, RESHARD, REDUCE_GRAD) or an ignored mark takes no time
            my_starts[p] = start
            my_ends[p] = t
        if not stopped:
            p = n
            blocked.pop(ri, None)
        pos[ri], clock[ri] = p, t

    stuck = [i for i in range(n_ranks) if pos[i] < len(lists[i])]
    if stuck:
        _raise_deadlock(schedule, ranks, lists, pos, stuck, blocked)
    return build_result(ranks, lists, starts, ends, of_stage, shape, activation_bytes, saved=saved, pairs=pairs,
                        recv=recv, overlap=overlap)


def _add(x: float, y: float) -> float:
    return x + y


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
    if tag == "data":
        return f"{action} waits for the data of {action.stage}{why[2]}{action.microbatch}, whose send has not run"
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
