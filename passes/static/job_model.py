"""What a schedule costs in Paddle's static Engine: the simulator told about jobs (pure Python).

The static Engine runs a rank's plan as a list of jobs (:mod:`.jobs`, merged by :mod:`.merge`),
each a sub-program the executor sets up and runs; paddle-ext's gloo send returns once its message
is queued, a receive blocks until the data is there, and the data leaves the sender only once
the receive is posted (gloo's TCP pairs: a send that finds no posted receive only announces
itself; the sender's I/O thread writes the data when the receiver's ready note comes). So a
receive posted long after its send still pays the hand-off latency, and a schedule pays it once
per receive it runs. :func:`simulate_static` simulates exactly that: the schedule lowered with
:func:`~paddle_ext.passes.lowering.add_send_recv`, non-blocking sends, ``"rendezvous"``
receives (:func:`~paddle_ext.passes.simulate.simulate_schedule`: the data lands ``latency`` after
the later of the send and the receive), and before each action the time the runtime spends on
it besides the compute (:class:`StaticCosts`): ``job`` once per job (an action that starts a
job, merged or not) and ``message`` per send (a receive's own work is inside ``latency``, as the
profile measures it: from the later of the two posts to the end of the receive).

Paddle's own passes (FThenB, 1F1B, VPP) run sends and receives inside their forward and
backward jobs, each receive right before its compute and each send right after it, except that
Paddle's VPP runs a backward's ``send_backward`` job after the next forward's ``recv_forward``
job: ``paddle_pass=True`` times them that way (:func:`paddle_job_order`).

A job's compute also depends on what ran before it on the rank (``cold``): with micro-batches
of a few rows every job is bound by reading its stage's weights (a forward, an input
backward) or its weight gradients' buffer (a weight backward), a full backward both, and each
is still in the cache when the rank's previous compute job touched it (:func:`cold_states`).
``cold`` gives per stage and state what an action costs more when that state is cold, over the
warm cost ``stage_costs`` gives: Paddle's FThenB (forwards back to back, then backwards) runs
almost all warm, a zero-bubble schedule's forward after a W of its stage reads cold weights,
and a full backward after a forward finds the gradients cold.

The figures come from a profile of the real Engine (``tools/bench_static.py --profile``: the
executor's per-job events under ``paddle.profiler``). How far the simulated ratios between
schedules follow the measured ones, with and without the order's ``cold`` costs, is in
docs/static_engine.md ("Seventh pass", "Eighth pass").

>>> unit = StaticCosts(forward=1, backward_input=1, backward_weight=1, job=0.0, message=0.0)
>>> simulate_static("1F1B", 2, 4, costs=unit).makespan == simulate_static("1F1B", 2, 4, costs=unit, merge=False).makespan
True
>>> slow = StaticCosts(forward=1, backward_input=1, backward_weight=1, job=0.5, message=0.0)
>>> simulate_static("1F1B", 2, 4, costs=slow, merge=False).makespan > simulate_static("1F1B", 2, 4, costs=slow).makespan
True
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Tuple

from paddle_ext.errors import ScheduleError
from paddle_ext.passes.schedule_ir import Kind
from paddle_ext.passes.schedules import get_schedule_info
from paddle_ext.passes.sim_model import Costs, SimulationResult
from paddle_ext.passes.simulate import simulate_schedule
from paddle_ext.passes.stage_placement import stages_on_rank
from paddle_ext.passes.static.jobs import JOB_OF_KIND, rank_schedule, run_kind, uses_split
from paddle_ext.passes.static.merge import alone_types, groups

__all__ = ["PADDLE_PASSES", "StaticCosts", "simulate_static", "action_jobs", "cold_extras", "cold_states",
           "first_stage_in_w", "paddle_job_order", "split_costs"]

COMM = (Kind.SEND_F, Kind.RECV_F, Kind.SEND_B, Kind.RECV_B)
SENDS = (Kind.SEND_F, Kind.SEND_B)
RECVS = (Kind.RECV_F, Kind.RECV_B)
#: the schedule_modes Paddle's own PIR pipeline passes run (and that work with the gloo backend):
#: their messages run inside the compute jobs (``simulate_static(paddle_pass=True)``);
#: paddle-ext's versions of them are registered as ``IR_<name>``
PADDLE_PASSES = ("FThenB", "1F1B", "VPP")


#: how the Engine posts a receive (``StaticCosts.recv``) -> the simulator's receive model
RECV_MODELS = {"rendezvous": "rendezvous", "ahead": "blocking"}


@dataclass(frozen=True)
class StaticCosts:
    """Per-stage compute (``forward``, ``backward_input``, ``backward_weight``; a full backward
    costs their sum unless ``full_backward`` is given) and the runtime's costs: ``job`` per job
    the executor runs, ``message`` per send (the copy and hand-off to the send thread),
    ``latency`` from the later of a send and its receive being posted to the end of the receive,
    ``step`` once per step outside the micro-batches' jobs (feeding the batch, the optimizer,
    fetching the loss: it adds to every schedule alike). Any unit; :func:`simulate_static`
    returns makespans in it. ``recv`` is how receives are posted: ``"rendezvous"`` when their
    op runs (gloo moves the data only then: ``latency`` after the later of the two posts),
    ``"ahead"`` when the data lands without its receive op: a socket channel (the default) or a
    gloo channel whose receive thread posts the step's plan ahead (the data there ``latency``
    after its send), and then ``receive`` is what a receive op costs when its message has
    landed (reading it from the socket, or taking it from the thread and the copy out),
    paid before the receive like ``message`` before a send (with ``"rendezvous"`` that work is
    inside ``latency``: leave it 0)."""

    forward: float
    backward_input: float
    backward_weight: float
    job: float = 0.0
    message: float = 0.0
    latency: float = 0.0
    full_backward: Optional[float] = None
    step: float = 0.0
    recv: str = "rendezvous"
    receive: float = 0.0

    def __post_init__(self):
        if self.recv not in RECV_MODELS:
            raise ScheduleError(f"StaticCosts recv={self.recv!r}: use one of {sorted(RECV_MODELS)}")
        for name in ("forward", "backward_input", "backward_weight", "job", "message", "latency", "step", "receive"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and value >= 0):
                raise ScheduleError(f"StaticCosts {name}={value!r} must be a number >= 0 (a time)")

    def compute(self) -> Costs:
        return Costs(self.forward, self.backward_input, self.backward_weight, self.full_backward)


def action_jobs(name: str, lowered, rank: int, n_chunks: int, split: bool) -> List[Tuple[str, ...]]:
    """For each action of ``lowered[rank]`` (idle slots dropped), the job types it runs as, in
    the order :func:`.jobs.jobs_of_rank` emits them (a full ``B`` under a split runs as two
    jobs; a ``W`` without a split runs as none)."""
    info = get_schedule_info(name)
    chunk_of = {s: c for c, s in enumerate(stages_on_rank(rank, len(lowered), n_chunks, info.placement))}
    out: List[Tuple[str, ...]] = []
    for a in lowered[rank]:
        if a is None:
            continue
        kind, c = a.kind, chunk_of[a.stage]
        if kind is Kind.W and not split:
            out.append(())
        elif kind is Kind.B and split:
            out.append((f"backward_b{c}", f"backward_w{c}"))
        else:
            out.append((f"{JOB_OF_KIND[run_kind(kind, split)]}{c}",))
    return out


def paddle_job_order(actions, defer_send_backward: bool = False) -> list:
    """One rank's lowered ``actions`` in the order Paddle's own passes run them: each compute
    after its receive and before its send; with ``defer_send_backward`` (Paddle's VPP) a
    backward's send waits until the next forward's receive has run (or the next backward starts).

    >>> from paddle_ext.passes.schedule_ir import Action
    >>> acts = [Action(1, Kind.RECV_F, 1), Action(1, Kind.B, 0), Action(1, Kind.SEND_B, 0), Action(1, Kind.F, 1)]
    >>> [str(a) for a in paddle_job_order(acts, defer_send_backward=True)]
    ['1B0', '1RECV_F1', '1SEND_B0', '1F1']
    """
    comm = {(a.stage, a.kind, a.microbatch): a for a in actions if a is not None and a.kind in COMM}
    out, pending = [], []
    for a in actions:
        if a is None or a.kind in COMM:
            continue
        forward = a.kind is Kind.F
        recv = comm.get((a.stage, Kind.RECV_F if forward else Kind.RECV_B, a.microbatch))
        send = comm.get((a.stage, Kind.SEND_F if forward else Kind.SEND_B, a.microbatch))
        if forward:
            out += ([recv] if recv else []) + pending
        else:
            out += pending + ([recv] if recv else [])
        pending = []
        out.append(a)
        if send is not None and not forward and defer_send_backward:
            pending = [send]
        elif send is not None:
            out.append(send)
    out += pending
    if len(out) != sum(a is not None for a in actions):
        raise ScheduleError("paddle_job_order: the lowered schedule has a message without its compute on this rank")
    return out


def _extra(name: str, lowered, rank: int, n_chunks: int, split: bool, costs: StaticCosts, merge: bool,
           paddle_pass: bool) -> List[float]:
    per_action = action_jobs(name, lowered, rank, n_chunks, split)
    actions = [a for a in lowered[rank] if a is not None]
    flat = [(t, a.microbatch, i) for i, (types, a) in enumerate(zip(per_action, actions)) for t in types]
    extra = [costs.message if a.kind in SENDS else costs.receive if a.kind in RECVS else 0.0 for a in actions]
    if paddle_pass:  # one job per compute action; messages inside it (VPP: recv_forward, send_backward alone)
        alone = (Kind.RECV_F, Kind.SEND_B) if name == "VPP" else ()
        starts = [i for i, a in enumerate(actions) if a.kind not in COMM or a.kind in alone for _ in per_action[i]]
    elif merge:
        placement = get_schedule_info(name).placement
        found = groups([(t, mb) for t, mb, _ in flat], alone_types(rank, len(lowered), n_chunks, placement))
        starts = [flat[g[0]][2] for g in found]
    else:
        starts = [i for _, _, i in flat]
    for i in starts:
        extra[i] += costs.job
    return extra


def simulate_static(name: str, pp_degree: int, n_microbatches: int, n_chunks: Optional[int] = None, *,
                    costs: StaticCosts, merge: bool = True, paddle_pass: bool = False,
                    stage_costs: Optional[Mapping[int, Costs]] = None,
                    cold: Optional[Mapping[int, Mapping[str, Costs]]] = None) -> SimulationResult:
    """Simulate schedule ``name`` as the static Engine runs it (module doc): ``merge`` as
    ``passes.static.passes.MERGE_JOBS`` (merged jobs pay ``costs.job`` once), ``paddle_pass``
    for Paddle's own FThenB/1F1B/VPP passes. ``stage_costs`` overrides the compute per stage;
    ``cold`` (``{stage: {"weights": Costs, "gradients": Costs}}``) adds what an action costs
    more for each of its states :func:`cold_states` finds cold. Under a split the first stage's
    ``stage_costs`` run as :func:`first_stage_in_w` says.

    >>> warm = StaticCosts(forward=1, backward_input=1, backward_weight=1)
    >>> extra = {s: {"weights": Costs(1, 0, 0)} for s in (0, 1)}   # a forward on cold weights costs 2

    FThenB: each rank's first forward is cold (one per rank on the critical path), the rest warm:

    >>> simulate_static("FThenB", 2, 4, costs=warm, cold=extra).makespan - simulate_static("FThenB", 2, 4, costs=warm).makespan
    2.0
    """
    info, lowered, chunks = rank_schedule(name, pp_degree, n_microbatches, n_chunks)
    split = uses_split(lowered)
    if split:
        stage_costs, cold = split_costs(stage_costs, cold)
    if paddle_pass:
        lowered = {r: paddle_job_order(acts, defer_send_backward=info.name == "VPP") for r, acts in lowered.items()}
    extra: Dict[int, List[float]] = {r: _extra(info.name, lowered, r, chunks, split, costs, merge, paddle_pass)
                                     for r in lowered}
    if cold:
        for r, added in cold_extras(lowered, split, cold).items():
            extra[r] = [e + c for e, c in zip(extra[r], added)]
    result = simulate_schedule(lowered, costs.compute(), comm_latency=costs.latency, blocking_sends=False,
                               recv=RECV_MODELS[costs.recv], extra=extra, stage_costs=stage_costs)
    return dataclasses.replace(result, makespan=result.makespan + costs.step) if costs.step else result


def cold_extras(lowered, split: bool, cold: Mapping[int, Mapping[str, Costs]]) -> Dict[int, List[float]]:
    """Per rank of ``lowered``, per action (idle slots dropped): what its cold states
    (:func:`cold_states`) add, from ``cold`` (``{stage: {state: Costs}}``) for the kind the action
    runs as."""
    out = {}
    for r, actions in lowered.items():
        acts = [a for a in actions if a is not None]
        out[r] = [sum(cold[a.stage][state].of(run_kind(a.kind, split)) for state in states
                      if state in cold.get(a.stage, {}))
                  for a, states in zip(acts, cold_states(acts, split))]
    return out


def _w_holds_i(c: Costs) -> Costs:
    return Costs(c.forward, 0.0, c.backward_input + c.backward_weight, c.backward)


def first_stage_in_w(stage_costs: Mapping[int, Costs]) -> Dict[int, Costs]:
    """``stage_costs`` as the Engine's split runs them: the first stage sends no input gradient
    back, so every backward op of it feeds a weight gradient and the split
    (:mod:`.bw_split`: an op is W when all its results feed W ops) makes its whole backward W:
    its ``I`` is empty and its ``W`` holds ``I + W``, its full backward unchanged. ZBH1's first
    stage (two blocks) ran I 0.1 and W 27.3 ms a step (docs/static_engine.md, "Ninth pass").

    >>> first_stage_in_w({0: Costs(1, 2, 3), 1: Costs(1, 2, 3)})[0]
    Costs(forward=1, backward_input=0.0, backward_weight=5, full_backward=5)
    """
    return {s: _w_holds_i(c) if s == 0 else c for s, c in stage_costs.items()}


def split_costs(stage_costs: Optional[Mapping[int, Costs]], cold: Optional[Mapping[int, Mapping[str, Costs]]]):
    """``(stage_costs, cold)`` of :func:`simulate_static` as a split runs them: the first stage's
    ``I`` in its ``W`` (:func:`first_stage_in_w`), and so what its ``I`` pays when a state is
    cold; ``None`` stays ``None``."""
    if stage_costs is not None:
        stage_costs = first_stage_in_w(stage_costs)
    if cold and 0 in cold:
        cold = {**cold, 0: {state: _w_holds_i(c) for state, c in cold[0].items()}}
    return stage_costs, cold


#: what a compute action reads or writes of its stage's state (:func:`cold_states`)
TOUCHES = {Kind.F: frozenset({"weights"}), Kind.I: frozenset({"weights"}), Kind.W: frozenset({"gradients"}),
           Kind.B: frozenset({"weights", "gradients"})}


def cold_states(actions, split: bool) -> List[frozenset]:
    """Per action of one rank's ``actions`` (idle slots dropped): the states of its stage it
    touches (:data:`TOUCHES`) that the rank's previous compute action did not (all of them
    when that ran another stage, or none ran before it in the step); empty for messages and for
    a ``W`` that does not run (no split), which leave the previous action as it was.

    >>> from paddle_ext.passes.schedule_ir import Action
    >>> acts = [Action(0, Kind.F, 0), Action(0, Kind.F, 1), Action(0, Kind.B, 0), Action(0, Kind.B, 1), Action(0, Kind.F, 2)]
    >>> [sorted(s) for s in cold_states(acts, split=False)]
    [['weights'], [], ['gradients'], [], []]
    """
    out, before = [], None
    for a in actions:
        if a is None:
            continue
        kind = run_kind(a.kind, split)
        if kind not in TOUCHES or (kind is Kind.W and not split):
            out.append(frozenset())
            continue
        seen = TOUCHES[before[1]] if before is not None and before[0] == a.stage else frozenset()
        out.append(TOUCHES[kind] - seen)
        before = (a.stage, kind)
    return out
