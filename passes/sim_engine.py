"""The event loop behind :func:`paddle_ext.passes.simulate.run_simulation` (model: that module's doc).

One :class:`Simulation` runs one schedule, in named steps:

* ``__init__`` sets up the per-stage tables (rank of each stage, where each input comes from,
  costs) and the per-input tables (when each F / input gradient finished, when each received
  data is there), indexed ``stage * n_microbatches + microbatch``;
* :meth:`Simulation.run` advances ranks one at a time (a work queue), each as far as its inputs
  allow; the compute step is inline there (it runs once per action, so it stays one loop);
* :meth:`Simulation.send`, :meth:`Simulation.receive` and :meth:`Simulation.overlapped_pair`
  are the other steps; :meth:`Simulation.meet` is the rendezvous of a blocking send and its
  receive;
* a rank that must wait is parked (:meth:`Simulation.park`) on what it waits for and woken
  when that happens, so every action is handled about once;
* :meth:`Simulation.result` checks for a deadlock (:func:`raise_deadlock`) and builds the
  :class:`~paddle_ext.passes.sim_model.SimulationResult`.
"""
from __future__ import annotations

from collections import deque
from typing import Dict, List, Mapping, Optional, Tuple, Union

from paddle_ext.errors import ScheduleError
from .schedule_ir import Action, Kind, format_grid
from .sim_model import Costs, SimulationResult, build_result, check_latency
from .structure import ScheduleShape

__all__ = ["Simulation", "raise_deadlock"]

KF, KB, KI, KW = Kind.F, Kind.B, Kind.I, Kind.W
SEND_F, RECV_F, SEND_B, RECV_B = Kind.SEND_F, Kind.RECV_F, Kind.SEND_B, Kind.RECV_B
MARK = Kind.OVERLAP_F_B


class Simulation:
    """The state of one simulation run: set up once, then :meth:`run`, then :meth:`result`."""

    def __init__(self, schedule, shape: ScheduleShape, costs: Costs, comm_latency: float,
                 activation_bytes: Union[float, Mapping[int, float]], blocking_sends: bool,
                 stage_costs: Optional[Mapping[int, Costs]], recv: str, overlap: str,
                 extra: Optional[Mapping[int, List[float]]] = None) -> None:
        self.schedule, self.shape, self.activation_bytes = schedule, shape, activation_bytes
        self.blocking_sends, self.recv, self.overlap = blocking_sends, recv, overlap
        self.ranks = ranks = tuple(sorted(schedule))
        self.lists = lists = [[a for a in schedule[r] if a is not None] for r in ranks]
        # per rank, the time each action spends before it starts (a runtime's per-job cost), or None
        self.extra = None if extra is None else [_extra_of(extra, r, len(lists[i])) for i, r in enumerate(ranks)]
        self._stage_tables(costs, stage_costs)
        self.lat = check_latency(comm_latency)
        self.early = recv == "early"
        # a rendezvous transport: a non-blocking send's data leaves once its receive is posted
        self.rendezvous = recv == "rendezvous"
        self.pair_slot = None if overlap == "off" else (max if overlap == "max" else _add)
        size = self.n_stages * self.n_mb
        self.f_end: List[Optional[float]] = [None] * size  # F(s, mb) finished (on its rank)
        self.g_end: List[Optional[float]] = [None] * size  # B or I(s, mb) finished: the input grad of s exists
        self.got_f: List[Optional[float]] = [None] * size  # RECV_F(s, mb)'s data is there on the rank of s
        self.got_b: List[Optional[float]] = [None] * size  # RECV_B(s, mb)'s data is there on the rank of s
        self.arrived: Dict[Tuple[Kind, int], float] = {}  # non-blocking sends: data in flight
        # rendezvous: (rank, time, early receive?) of the side that came first
        self.posted: Dict[Tuple[Kind, int], tuple] = {}
        self.wait_f: Dict[int, List[int]] = {}  # ranks parked until f_end[idx] is set
        self.wait_g: Dict[int, List[int]] = {}  # ... until g_end[idx] is set
        self.waiting: Dict[tuple, List[int]] = {}  # ... until a receive's data or a buffered send is there
        self.blocked: Dict[int, tuple] = {}  # why each parked rank waits (for the deadlock report)
        self.n_ranks = n_ranks = len(ranks)
        self.pos = [0] * n_ranks
        self.clock = [0.0] * n_ranks
        self.saved = [0.0] * n_ranks  # compute time saved by overlapped pairs
        self.pairs = [0] * n_ranks
        self.starts = [[0.0] * len(a) for a in lists]
        self.ends = [[0.0] * len(a) for a in lists]
        self.work = deque(range(n_ranks))

    def _stage_tables(self, costs: Costs, stage_costs: Optional[Mapping[int, Costs]]) -> None:
        """Per stage: its rank's index, where its inputs come from, and its compute costs."""
        shape = self.shape
        index_of = {r: i for i, r in enumerate(self.ranks)}
        n_stages, lowered = shape.n_stages, shape.lowered
        self.n_stages, self.n_mb = n_stages, shape.n_microbatches
        self.srank = srank = [index_of[shape.stage_to_rank[s]] for s in range(n_stages)]
        # where a stage's forward input / backward input comes from: same rank, or over the network
        self.local_prev = [s > 0 and srank[s - 1] == srank[s] for s in range(n_stages)]
        self.local_next = [s + 1 < n_stages and srank[s + 1] == srank[s] for s in range(n_stages)]
        # read the producer's finish time directly (same rank, or compute-only with latency), or
        # wait for this rank's own receive (lowered schedule)
        self.direct_prev = [local or not lowered for local in self.local_prev]
        self.direct_next = [local or not lowered for local in self.local_next]
        self.of_stage = of_stage = [(stage_costs or {}).get(s, costs) for s in range(n_stages)]
        self.cost_f = [float(c.forward) for c in of_stage]
        self.cost_b = [float(c.backward) for c in of_stage]
        self.cost_i = [float(c.backward_input) for c in of_stage]
        self.cost_w = [float(c.backward_weight) for c in of_stage]

    # -- parking and waking ------------------------------------------------------------------

    def park(self, table: dict, key, ri: int, why: tuple) -> None:
        table.setdefault(key, []).append(ri)
        self.blocked[ri] = why

    def data_there(self, key, when: float) -> None:
        """A receive's data is on its rank at ``when``: record it, wake who waits for it."""
        (self.got_f if key[0] is RECV_F else self.got_b)[key[1]] = when
        if key in self.waiting:
            self.work.extend(self.waiting.pop(key))

    def done(self, idx: int, k: Kind, t: float) -> None:
        """Compute ``k`` of input ``idx`` finished at ``t``: record it and wake who needs it."""
        if k is KF:
            self.f_end[idx] = t
            if self.wait_f and idx in self.wait_f:
                self.work.extend(self.wait_f.pop(idx))
        elif k is not KW:
            self.g_end[idx] = t
            if self.wait_g and idx in self.wait_g:
                self.work.extend(self.wait_g.pop(idx))

    # -- the steps ---------------------------------------------------------------------------

    def inputs_at(self, ri: int, a: Action) -> Optional[float]:
        """When the inputs of compute action ``a`` are there, or None after parking the rank."""
        s, k, mb = a
        n_mb = self.n_mb
        idx = s * n_mb + mb
        if k is KF:
            if not s:
                return 0.0
            if self.direct_prev[s]:
                dep = self.f_end[idx - n_mb]
                if dep is None:
                    self.park(self.wait_f, idx - n_mb, ri,
                              ("input", a, f"{s - 1}F{mb}", _where(self.local_prev[s], self.ranks, self.srank[s - 1])))
                    return None
                return dep if self.local_prev[s] else dep + self.lat
            if self.got_f[idx] is None:
                self.park(self.waiting, (RECV_F, idx), ri, ("data" if self.early else "recv", a, RECV_F))
            return self.got_f[idx]
        if self.f_end[idx] is None:
            self.park(self.wait_f, idx, ri, ("input", a, f"{s}F{mb}", "same rank"))
            return None
        if s + 1 == self.n_stages:
            return 0.0
        if self.direct_next[s]:
            dep = self.g_end[idx + n_mb]
            if dep is None:
                self.park(self.wait_g, idx + n_mb, ri, ("input", a, f"{s + 1}B{mb} or {s + 1}I{mb}",
                                                        _where(self.local_next[s], self.ranks, self.srank[s + 1])))
                return None
            return dep if self.local_next[s] else dep + self.lat
        if self.got_b[idx] is None:
            self.park(self.waiting, (RECV_B, idx), ri, ("data" if self.early else "recv", a, RECV_B))
        return self.got_b[idx]

    def meet(self, ri: int, t: float, key, peer_kind: Kind, early_recv: bool = False) -> Optional[float]:
        """Rendezvous of a send and a receive: this side's completion time, or None if it came
        first (an early-posted receive never waits: its rank goes on)."""
        posted = self.posted
        other = posted.pop(key, None)
        if other is None:
            posted[key] = (ri, t, early_recv)
            if not early_recv:
                self.blocked[ri] = ("meet", peer_kind)
            return None
        rj, tj, other_early = other
        meet_at = tj if tj > t else t
        lat = self.lat
        this_receives = peer_kind is SEND_F or peer_kind is SEND_B
        # whoever receives, the data lands then (data_there, inline: this runs once per pair)
        (self.got_f if key[0] is RECV_F else self.got_b)[key[1]] = meet_at + lat
        waiting = self.waiting
        if waiting and key in waiting:
            self.work.extend(waiting.pop(key))
        if not other_early:  # the peer is parked on its send or blocking receive: release it
            done_j = meet_at if this_receives else meet_at + lat
            pos = self.pos
            p = pos[rj]
            self.starts[rj][p], self.ends[rj][p] = tj, done_j
            self.clock[rj], pos[rj] = done_j, p + 1
            self.blocked.pop(rj, None)
            self.work.append(rj)
        return meet_at + lat if this_receives else meet_at

    def send(self, ri: int, p: int, a: Action, t: float) -> Optional[float]:
        """The send step: ``a`` (SEND_F or SEND_B, at position ``p`` of rank ``ri``, which is free
        at ``t``); the rank's new time, or None if it must wait."""
        s, k, mb = a
        n_mb = self.n_mb
        idx = s * n_mb + mb
        forward = k is SEND_F
        if (self.f_end if forward else self.g_end)[idx] is None:
            self.park(self.wait_f if forward else self.wait_g, idx, ri, ("unsent", a))
            return None
        key = (RECV_F, idx + n_mb) if forward else (RECV_B, idx - n_mb)
        if self.blocking_sends:
            finished = self.meet(ri, t, key, key[0])
            if finished is None:
                self.starts[ri][p] = t
            return finished
        self.arrived[key] = there = t if self.rendezvous else t + self.lat
        if self.early:
            self.data_there(key, there)
        elif self.waiting and key in self.waiting:
            self.work.extend(self.waiting.pop(key))
        return t

    def receive(self, ri: int, p: int, a: Action, t: float) -> Optional[float]:
        """The receive step: ``a`` (RECV_F or RECV_B), as :meth:`send`."""
        s, k, mb = a
        key = (k, s * self.n_mb + mb)
        if self.early:  # post it and go on; the compute that needs the data waits for it
            if self.blocking_sends:
                self.meet(ri, t, key, SEND_F if k is RECV_F else SEND_B, True)
            return t
        if self.blocking_sends:
            finished = self.meet(ri, t, key, SEND_F if k is RECV_F else SEND_B)
            if finished is None:
                self.starts[ri][p] = t
                return None
            self.data_there(key, finished)
            return finished
        there = self.arrived.get(key)
        if there is None:
            self.park(self.waiting, key, ri, ("send", a))
            return None
        if there > t:
            t = there
        if self.rendezvous:  # the data leaves the sender now: the later of the two posts
            t += self.lat
        (self.got_f if k is RECV_F else self.got_b)[key[1]] = t  # data_there, inline
        if self.waiting and key in self.waiting:
            self.work.extend(self.waiting.pop(key))
        return t

    def overlapped_pair(self, ri: int, p: int, t: float) -> Optional[float]:
        """The overlapped-pair step: the mark at ``p`` and the two actions after it take one slot;
        the rank's new time, or None if it must wait."""
        acts = self.lists[ri]
        first, second = acts[p + 1], acts[p + 2]
        dep_first = self.inputs_at(ri, first)
        dep_second = None if dep_first is None else self.inputs_at(ri, second)
        if dep_second is None:
            return None
        start = max(t, dep_first, dep_second)
        c1, c2 = self.compute_cost(first), self.compute_cost(second)
        t = start + self.pair_slot(c1, c2)
        self.saved[ri] += c1 + c2 - (t - start)
        self.pairs[ri] += 1
        my_starts, my_ends = self.starts[ri], self.ends[ri]
        my_starts[p] = my_ends[p] = start
        for q, b in ((p + 1, first), (p + 2, second)):
            my_starts[q], my_ends[q] = start, t
            self.done(b[0] * self.n_mb + b[2], b[1], t)
        return t

    def compute_cost(self, a: Action) -> float:
        s, k = a[0], a[1]
        return (self.cost_f[s] if k is KF else self.cost_b[s] if k is KB else self.cost_i[s] if k is KI
                else self.cost_w[s])

    # -- the loop ----------------------------------------------------------------------------

    def run(self) -> "Simulation":
        """Advance ranks from the work queue until none can move; the compute step is inline."""
        # locals: the loop below runs once per action
        kf, kb, ki, kw = KF, KB, KI, KW
        send_f, send_b, recv_f, recv_b, mark = SEND_F, SEND_B, RECV_F, RECV_B, MARK
        lists, clock, pos, starts, ends, work = self.lists, self.clock, self.pos, self.starts, self.ends, self.work
        f_end, g_end, got_f, got_b, wait_f, wait_g = self.f_end, self.g_end, self.got_f, self.got_b, self.wait_f, \
            self.wait_g
        direct_prev, direct_next, local_prev, local_next = self.direct_prev, self.direct_next, self.local_prev, \
            self.local_next
        cost_f, cost_b, cost_i, cost_w = self.cost_f, self.cost_b, self.cost_i, self.cost_w
        n_mb, n_stages, lat, blocked, pair_slot = self.n_mb, self.n_stages, self.lat, self.blocked, self.pair_slot
        inputs_at, park, send, receive, overlapped_pair = self.inputs_at, self.park, self.send, self.receive, \
            self.overlapped_pair
        extra = self.extra
        while work:
            ri = work.popleft()
            acts, t, n = lists[ri], clock[ri], len(lists[ri])
            ex = extra[ri] if extra is not None else None
            my_starts, my_ends = starts[ri], ends[ri]
            stopped = False  # a break leaves p at the action this rank waits on
            pair_end = 0  # the two actions of an overlapped pair were timed with their mark
            p = pos[ri]
            for p in range(p, n):
                if p < pair_end:
                    continue
                a = acts[p]
                s, k, mb = a
                start = t if ex is None else t + ex[p]  # committed to t only when the action completes
                if k is kf or k is kb or k is ki:  # the compute step (W below)
                    idx = s * n_mb + mb
                    if k is kf:
                        if s:
                            dep = (f_end[idx - n_mb] if direct_prev[s] else got_f[idx])
                            if dep is None:
                                inputs_at(ri, a)  # parks with the reason
                                stopped = True
                                break
                            if direct_prev[s] and not local_prev[s]:
                                dep += lat
                            if dep > start:
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
                            dep = (g_end[idx + n_mb] if direct_next[s] else got_b[idx])
                            if dep is None:
                                inputs_at(ri, a)
                                stopped = True
                                break
                            if direct_next[s] and not local_next[s]:
                                dep += lat
                            if dep > start:
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
                elif k is send_f or k is send_b or k is recv_f or k is recv_b:
                    # may release a parked peer, or park this rank (and record the start)
                    moved = send(ri, p, a, start) if k is send_f or k is send_b else receive(ri, p, a, start)
                    if moved is None:
                        stopped = True
                        break
                    t = moved
                elif k is mark and pair_slot is not None:  # an overlapped pair: one slot
                    moved = overlapped_pair(ri, p, start)
                    if moved is None:
                        stopped = True
                        break
                    t, pair_end = moved, p + 3
                    continue
                # else: a no-op (UNSHARD, RESHARD, REDUCE_GRAD) or an ignored mark takes no time
                my_starts[p] = start
                my_ends[p] = t
            if not stopped:
                p = n
                blocked.pop(ri, None)
            pos[ri], clock[ri] = p, t
        return self

    def result(self) -> SimulationResult:
        """The deadlock check, then the figures."""
        stuck = [i for i in range(self.n_ranks) if self.pos[i] < len(self.lists[i])]
        if stuck:
            raise_deadlock(self.schedule, self.ranks, self.lists, self.pos, stuck, self.blocked)
        return build_result(self.ranks, self.lists, self.starts, self.ends, self.of_stage, self.shape,
                            self.activation_bytes, saved=self.saved, pairs=self.pairs, recv=self.recv,
                            overlap=self.overlap)


def _add(x: float, y: float) -> float:
    return x + y


def _extra_of(extra: Mapping[int, List[float]], rank: int, n_actions: int) -> List[float]:
    times = [float(x) for x in extra.get(rank, [0.0] * n_actions)]
    if len(times) != n_actions or any(not x >= 0 for x in times):
        raise ScheduleError(f"extra time of rank {rank}: {len(times)} values for its {n_actions} actions (idle slots "
                            "not counted), each a number >= 0; give one per action")
    return times


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


def raise_deadlock(schedule, ranks, lists, pos, stuck, blocked) -> None:
    """Raise the deadlock :class:`ScheduleError`: the grid around the stuck actions, each marked."""
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
