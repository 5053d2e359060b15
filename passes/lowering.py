"""Lowering: add the point-to-point communication a compute-only schedule needs.

:func:`add_send_recv` turns ``{rank: [compute actions]}`` into ``{rank: [compute and SEND/RECV
actions]}``: one ``SEND_F``/``RECV_F`` pair for every forward edge between stages on different
ranks, one ``SEND_B``/``RECV_B`` pair for every backward edge. It is deadlock-free by
construction even when a send blocks until its receive is posted (gloo):

1. Simulate the compute-only schedule (unit costs by default) to get each action's start and end.
2. Give each pair a meeting time ``t`` between the end of the producing action (time ``e``) and the
   start of the consuming one (``c``): the first time at which the sender is between actions and
   the receiver is free for the ``comm_latency`` a blocking receive lasts, or ``e`` if there is
   none in ``[e, c]``.
3. On each rank, put a communication action before the first compute action that starts at or
   after its meeting time, and order communication actions that land together by the global key
   ``(meeting time, direction, stage, microbatch)``.

Why it cannot deadlock: a send comes after its producer and a receive before its consumer (costs
are positive, so ``start(producer) < e <= t <= c``), hence compute never waits on anything but
earlier actions of its own rank. Every rank meets its pairs in increasing key order, so among the
blocked pairs the one with the smallest key has both sides posted: it completes. When every pair
finds a common gap, the lowered schedule runs exactly as fast as the compute-only one; where none
exists (VPP and DualPipeV mix 1- and 2-unit actions) a blocking send costs some time. Compute is
never reordered.

For transports whose sends never block, ``blocking_sends=False`` places each send right after its
producer and each receive right before its consumer: the compute-only timing exactly, but only
safe when sends do not wait for their receive.

>>> from paddle_ext.passes.schedule_ir import format_schedule, parse_schedule
>>> lowered = add_send_recv(parse_schedule("rank 0: 0F0 0F1 0B0 0B1\\nrank 1: 1F0 1B0 1F1 1B1"))
>>> print(format_schedule(lowered))
rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1
rank 1: 1RECV_F0 1F0 1RECV_F1 1B0 1SEND_B0 1F1 1B1 1SEND_B1
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from operator import itemgetter
from typing import List, Mapping, Optional, Sequence, Tuple, Union

from paddle_ext.errors import ScheduleError
from .schedule_ir import Action, Kind, Schedule
from .simulate import Costs, _check_latency, _coerce_costs, run_simulation
from .structure import check_structure

__all__ = ["add_send_recv"]


def _busy_at(starts, ends, t: float, hold: float) -> float:
    """End of the action a rank is running during ``(t, t + hold)`` (``hold == 0``: strictly
    across ``t``), or -1 when the rank is free then."""
    j = bisect_left(starts, t + hold) - 1 if hold else bisect_right(starts, t) - 1
    return ends[j] if j >= 0 and ends[j] > t and (hold or starts[j] < t) else -1.0


def _meeting_time(sender, receiver, earliest: float, latest: float, hold: float) -> float:
    """First t in [earliest, latest - hold] where the sender is between actions at t and the
    receiver is free during the ``hold`` a blocking receive lasts; ``earliest`` if there is none.
    (At ``earliest``, the end of the producing action, the sender is always between actions.)"""
    t = _busy_at(*receiver, earliest, hold)
    if t < 0:
        return earliest
    while t <= latest - hold:
        busy = max(_busy_at(*sender, t, 0.0), _busy_at(*receiver, t, hold))
        if busy < 0:
            return t
        t = busy
    return earliest


def add_send_recv(schedule: Mapping[int, Sequence[Optional[Action]]], costs: Union[Costs, Mapping, None] = None,
                  comm_latency: float = 0.0, *, blocking_sends: bool = True) -> Schedule:
    """Return ``schedule`` with SEND/RECV actions added (idle slots dropped); see the module doc.

    ``blocking_sends=True`` (default) orders the pairs by meeting time as above; ``costs`` and
    ``comm_latency`` only steer where the pairs go, and the result is deadlock-free whatever the
    real costs are. ``blocking_sends=False`` is for transports whose sends never wait (``isend``):
    each send goes right after its producer and each receive right before its consumer, which
    keeps the compute-only timing exactly, but can deadlock if sends do block.
    """
    shape = check_structure(schedule)
    if shape.lowered:
        raise ScheduleError("the schedule already has SEND/RECV actions; lower the compute-only schedule "
                            "(paddle_ext.passes.compute_only(schedule) strips them)")
    _check_latency(comm_latency)
    if not blocking_sends:
        return _lower_next_to_compute(schedule, shape)
    costs = _coerce_costs(costs)
    if min(costs.forward, costs.backward_input, costs.backward_weight, costs.backward) <= 0:
        raise ScheduleError(f"add_send_recv orders communication by simulated time and needs costs > 0, got {costs}")
    timing = run_simulation(schedule, shape, costs, comm_latency)
    n_stages, n_mb, hold = shape.n_stages, shape.n_microbatches, float(comm_latency)
    rank_index = {rank: i for i, rank in enumerate(timing.ranks)}
    srank = [rank_index[shape.stage_to_rank[s]] for s in range(n_stages)]
    # when each consumer starts, at index stage * n_microbatches + microbatch
    kf, kb, ki = Kind.F, Kind.B, Kind.I  # locals: the loops below run once per action
    forward_start: List[float] = [0.0] * (n_stages * n_mb)
    backward_start: List[float] = [0.0] * (n_stages * n_mb)
    for i in range(len(timing.ranks)):
        for (s, kind, mb), start, _ in timing.timed(i):
            if kind is kf:
                forward_start[s * n_mb + mb] = start
            elif kind is kb or kind is ki:
                backward_start[s * n_mb + mb] = start

    new_action = tuple.__new__  # ~10^5 actions: skip NamedTuple.__new__'s Python frame
    send_f, recv_f, send_b, recv_b = Kind.SEND_F, Kind.RECV_F, Kind.SEND_B, Kind.RECV_B
    comms: List[List[Tuple[tuple, Action]]] = [[] for _ in timing.ranks]
    for i in range(len(timing.ranks)):
        sender = (timing.starts[i], timing.ends[i])
        for (s, kind, mb), _, end in timing.timed(i):
            if kind is kf and s + 1 < n_stages and srank[s + 1] != i:
                peer, consumer_start, direction = srank[s + 1], forward_start[(s + 1) * n_mb + mb], 0
                send, recv = (s, send_f, mb), (s + 1, recv_f, mb)
            elif (kind is kb or kind is ki) and s > 0 and srank[s - 1] != i:
                peer, consumer_start, direction = srank[s - 1], backward_start[(s - 1) * n_mb + mb], 1
                send, recv = (s, send_b, mb), (s - 1, recv_b, mb)
            else:
                continue
            meet = _meeting_time(sender, (timing.starts[peer], timing.ends[peer]), end, consumer_start, hold)
            key = (meet, direction, s, mb)
            comms[i].append((key, new_action(Action, send)))
            comms[peer].append((key, new_action(Action, recv)))

    lowered: Schedule = {}
    for i, rank in enumerate(timing.ranks):
        starts, actions = timing.starts[i], timing.actions[i]
        out: List[Optional[Action]] = []
        done = 0
        for key, comm in sorted(comms[i], key=itemgetter(0)):
            slot = bisect_left(starts, key[0])  # compute actions starting before the meeting time
            if slot > done:
                out.extend(actions[done:slot])
                done = slot
            out.append(comm)
        out.extend(actions[done:])
        lowered[rank] = out
    return lowered


def _lower_next_to_compute(schedule, shape) -> Schedule:
    srank, n_stages = shape.stage_to_rank, shape.n_stages
    lowered: Schedule = {}
    for rank in sorted(schedule):
        out: List[Optional[Action]] = []
        for a in schedule[rank]:
            if a is None:
                continue
            s, mb = a.stage, a.microbatch
            forward = a.kind is Kind.F
            src = s - 1 if forward else s + 1  # where the input comes from
            dst = s + 1 if forward else s - 1  # where the output goes
            needs_input = a.kind is not Kind.W and 0 <= src < n_stages and srank[src] != rank
            sends_output = a.kind is not Kind.W and 0 <= dst < n_stages and srank[dst] != rank
            if needs_input:
                out.append(Action(s, Kind.RECV_F if forward else Kind.RECV_B, mb))
            out.append(a)
            if sends_output:
                out.append(Action(s, Kind.SEND_F if forward else Kind.SEND_B, mb))
        lowered[rank] = out
    return lowered
