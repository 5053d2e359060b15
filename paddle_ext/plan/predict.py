"""Predicted step time and peak memory per rank of one plan (pure: no Paddle).

``step = pipeline + max over pipeline ranks (data-parallel sync + optimizer) + loss sync``:

* **pipeline**: without pipelining, one microbatch's F + I + W of the single stage
  (:mod:`.stage_cost`); with it, the makespan of the schedule simulated
  (:func:`paddle_ext.passes.simulate_schedule`) with each stage's F/I/W and a point-to-point
  latency for the ``[b, seq, hidden]`` activation (``/ tp`` with sequence parallelism) between
  stages. The "pipeline bubble" is the makespan minus the busiest rank's compute.
* **data-parallel sync** per parameter tensor of the rank, on the ``dp`` group, bytes from the
  reshard planner: ZeRO 0 an all-reduce (P -> R); ZeRO 1 and 2 a reduce-scatter of the gradient
  (P -> S(0)) and an all-gather of the updated parameter (S(0) -> R); ZeRO 3 the reduce-scatter
  and an all-gather of the parameter before each forward and each backward of each microbatch.
* **optimizer**: the profile's AdamW line over the rank's tensors and (ZeRO 1+: sharded) elements.
* **loss sync**: one 4-byte all-reduce over all ranks (the runner's global loss).
* **CPU contention**: with ``host.cores`` in the profile (CPU ranks sharing cores), compute is
  stretched by ``max(1, ranks busy at once / cores)`` (:func:`contention`): every rank without
  pipelining; with it, the ranks times the schedule's mean busy fraction.

Memory: :mod:`.memory` with the simulator's peak live activation bytes per rank.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Dict, List, Optional, Tuple

from ..passes.schedules import generate_schedule, get_schedule_info
from ..passes.simulate import simulate_schedule
from .candidates import Candidate
from .memory import local_param_shape, state_bytes
from .model_desc import ModelDesc
from .profile_data import Profile
from .stage_cost import CommCost, StageCost, reshard_bytes, stage_costs, stage_layers
from .static_engine_cost import StaticRuntime, static_simulate


@dataclass
class Prediction:
    candidate: Candidate
    step_s: float
    parts: Dict[str, float]
    peak_bytes: float
    memory: Dict[str, float] = field(default_factory=dict)
    simulated: bool = True   # False: a pipeline plan whose step is a lower bound (its compute, no bubble)
    same_as: Tuple[str, ...] = ()  # other schedules whose action lists are this plan's (same plan, other names)

    def top(self, k: int = 3) -> List[Tuple[str, float]]:
        """The ``k`` largest contributions as ``(cause, fraction of the step)``."""
        ranked = sorted(self.parts.items(), key=lambda kv: -kv[1])[:k]
        return [(name, value / self.step_s if self.step_s else 0.0) for name, value in ranked]


@lru_cache(maxsize=512)
def _schedule(name: str, pp: int, m: int, v: int):
    sched = generate_schedule(name, pp, m, v)
    stages = {r: sorted({a[0] for a in acts if a is not None}) for r, acts in sched.items()}
    return sched, stages


@lru_cache(maxsize=512)
def schedule_signature(name: str, pp: int, m: int, v: int) -> tuple:
    """Every rank's action list of ``name`` at these sizes: two schedules with equal signatures
    run the same actions in the same order (1F1B, FThenB and Eager1F1B at one microbatch)."""
    sched, _ = _schedule(name, pp, m, v)
    return tuple((r, tuple(str(a) for a in sched[r] if a is not None)) for r in sorted(sched))


def placed_stages(schedule: str, rank: int, pp: int, chunks: int) -> List[int]:
    """The stages on ``rank`` by the schedule's placement: looped (``rank + k pp``) or V
    (``rank`` and ``2 pp - 1 - rank``)."""
    if get_schedule_info(schedule).placement == "v":
        return [rank, 2 * pp - 1 - rank]
    return [rank + k * pp for k in range(chunks)]


def _kind(action) -> str:
    """An action's kind, "F", "B", "I" or "W" (a string or an enum member's name)."""
    return str(action[1]).rsplit(".", 1)[-1]


@lru_cache(maxsize=512)
def splits_backward(name: str, pp: int, m: int, v: int) -> bool:
    """True if the schedule runs split backwards (I and W actions) at these sizes."""
    sched, _ = _schedule(name, pp, m, v)
    return any(a is not None and _kind(a) == "W" for acts in sched.values() for a in acts)


@lru_cache(maxsize=8192)
def live_activation_peaks(name: str, pp: int, m: int, v: int, act: tuple) -> Tuple[float, ...]:
    """Peak live activation bytes per rank (ranks in order) by the simulator's rule: an F makes
    its stage's activation live until the W (split backward) or the B of that stage and microbatch.
    The peak depends only on each rank's action order, so no timing is needed."""
    sched, _ = _schedule(name, pp, m, v)
    peaks = []
    for r in sorted(sched):
        live = peak = 0.0
        for a in sched[r]:
            if a is None:
                continue
            kind = _kind(a)
            if kind == "F":
                live += act[a[0]]
                peak = max(peak, live)
            elif kind in ("W", "B"):
                live -= act[a[0]]
        peaks.append(peak)
    return tuple(peaks)


@lru_cache(maxsize=8192)
def _simulate(name: str, pp: int, m: int, v: int, costs: tuple, act: tuple, latency: float):
    sched, _ = _schedule(name, pp, m, v)
    r = simulate_schedule(sched, {"F": 0.0, "I": 0.0, "W": 0.0}, comm_latency=latency,
                          activation_bytes=dict(enumerate(act)),
                          stage_costs={s: {"F": f, "I": i, "W": w, "B": b} for s, (f, i, w, b) in enumerate(costs)})
    return r.makespan, tuple(r.busy), tuple(r.peak_activation_bytes), tuple(r.ranks)


def _dp_sync(layers, c: Candidate, comm: CommCost, itemsize: int, memo: dict) -> Dict[str, float]:
    """Seconds of the data-parallel / ZeRO collectives over the parameters of ``layers``."""
    parts: Dict[str, float] = {}
    if c.dp <= 1:
        return parts
    inter = comm.inter_node("dp")
    for layer in layers:
        sig = memo.get(("sig", id(layer)))
        if sig is None:
            sig = memo[("sig", id(layer))] = tuple((p.shape, p.role) for p in layer.params)
        key = ("sync", sig, c.dp, c.tp, c.zero, c.microbatches, inter)
        one = memo.get(key)
        if one is None:
            one = memo[key] = _layer_sync(layer, c, comm.profile, inter, itemsize)
        for name, value in one.items():
            parts[name] = parts.get(name, 0.0) + value
    return parts


def _layer_sync(layer, c: Candidate, profile: Profile, inter: bool, itemsize: int) -> Dict[str, float]:
    parts: Dict[str, float] = {}

    def add(name, kind, nbytes, times=1):
        parts[name] = parts.get(name, 0.0) + times * profile.collective(kind, c.dp, nbytes, inter)

    for p in layer.params:
        shape = local_param_shape(p, c.tp)
        if c.zero == 0:
            add("dp all-reduce", "all_reduce", reshard_bytes(shape, c.dp, "[P]", "[R]", itemsize))
            continue
        add("zero reduce-scatter", "reduce_scatter", reshard_bytes(shape, c.dp, "[P]", "[S(0)]", itemsize))
        gathers = 2 * c.microbatches if c.zero == 3 else 1
        add("zero all-gather", "all_gather", reshard_bytes(shape, c.dp, "[S(0)]", "[R]", itemsize), gathers)
    return parts


def _optimizer(layers, c: Candidate, profile: Profile) -> float:
    tensors = sum(len(layer.params) for layer in layers)
    elems = sum(p.numel // (c.tp if p.role in ("column", "row") else 1) for layer in layers for p in layer.params)
    return profile.optimizer(tensors, elems // (c.dp if c.zero >= 1 else 1))


def _rank_state(by_stage, stage_ids: tuple, c: Candidate, comm: CommCost, profile: Profile, itemsize: int,
                memo: dict):
    """``(dp sync parts, optimizer s, parameter/gradient/optimizer bytes, largest parameter bytes)``
    of the rank running ``stage_ids``, kept in ``memo``."""
    key = ("rank", stage_ids, c.n_stages, c.dp, c.tp, c.zero, c.microbatches, comm.inter_node("dp"))
    if key not in memo:
        layers = [layer for s in stage_ids for layer in by_stage[s]]
        biggest = max((p.numel for layer in layers for p in layer.params), default=0) * itemsize
        memo[key] = (_dp_sync(layers, c, comm, itemsize, memo), _optimizer(layers, c, profile),
                     state_bytes(layers, c, itemsize), biggest)
    return memo[key]


def _least_finish(stages: List[StageCost], rank_stages, busy, m: int, latency: float) -> List[float]:
    """A lower bound of each rank's finish under any schedule: the later of (a) its start, once the
    first microbatch's forward reached its first stage, plus its work, and (b) the earliest any
    backward of its lowest stage ``s`` can begin (every stage's forward, then the backward chain
    down from the top to ``s + 1``, a p2p hop wherever the next stage is on another rank) plus
    its ``m`` backwards of ``s``, which all come after that."""
    rank_of = {s: r for r, ids in enumerate(rank_stages) for s in ids}
    n = len(stages)
    hop = [latency if s + 1 < n and rank_of[s] != rank_of[s + 1] else 0.0 for s in range(n)]
    forward_chain = sum(st.forward for st in stages) + sum(hop)
    back_chain = [0.0] * (n + 1)  # back_chain[s]: the backward chain from the top down to stage s, hops included
    for s in range(n - 1, -1, -1):
        back_chain[s] = back_chain[s + 1] + hop[s] + min(stages[s].backward_input, stages[s].full_backward)
    finish = []
    for ids, work in zip(rank_stages, busy):
        s = min(ids)
        start = sum(stages[k].forward + latency for k in range(s))
        drain = m * min(stages[s].full_backward, stages[s].backward_input + stages[s].backward_weight)
        finish.append(max(start + work, forward_chain + back_chain[s + 1] + hop[s] + drain))
    return finish


def contention(c: Candidate, profile: Profile, utilization: float = 1.0) -> float:
    """How many times slower a CPU rank computes when ``c.world_size * utilization`` ranks compute at
    once on the profile's ``host.cores`` (1 without ``host``: every rank owns its device).
    A mean-field model: without pipelining every rank computes at once (``utilization`` 1);
    with it, the schedule's mean busy fraction (its bubbles leave cores to the busy ranks)."""
    cores = profile.host_cores()
    return max(1.0, c.world_size * utilization / cores) if cores else 1.0


def _stage_times(stages: List[StageCost]) -> tuple:
    return tuple((round(s.forward, 12), round(s.backward_input, 12), round(s.backward_weight, 12),
                  round(s.full_backward, 12)) for s in stages)


def _pipeline(c: Candidate, stages: List[StageCost], act: tuple, latency: float,
              static: Optional[StaticRuntime]) -> Tuple[float, tuple]:
    """``(makespan, busy per rank)`` of the plan's pipeline: the dygraph runtime's simulation, or
    the static Engine's (``static``: its jobs, messages and hand-off, the ``latency`` given)."""
    if static is None:
        return _simulate(c.schedule, c.pp, c.microbatches, c.chunks, _stage_times(stages), act, latency)[:2]
    return static_simulate(c.schedule, c.pp, c.microbatches, c.chunks, _stage_times(stages), static, latency)


def predict(model: ModelDesc, c: Candidate, profile: Profile, ranks_per_node: int = 0,
            memo: Optional[dict] = None, lower_bound: bool = False,
            static: Optional[StaticRuntime] = None) -> Prediction:
    """Step time, its parts and the peak memory per rank of plan ``c`` (see the module docstring);
    ``memo``: a dict shared by the predictions of one search (same model and profile). With
    ``lower_bound``, a pipeline plan is neither built nor simulated: its step is the least finish
    of any rank (:func:`_least_finish`) and its activations one microbatch of its largest stage, both
    lower bounds (``simulated=False``). Compute is stretched by :func:`contention` (a pipeline's
    utilization from a first, uncontended simulation; none in a lower bound). With ``static`` (the
    profile's static Engine runtime; ``profile`` then :func:`~.static_engine_cost.static_view`'s),
    the pipeline is simulated as the static Engine runs its jobs (:mod:`.static_engine_cost`)."""
    memo = {} if memo is None else memo
    comm = CommCost(profile, c, ranks_per_node or c.world_size)
    stages: List[StageCost] = stage_costs(model, c, profile, comm, memo, contention(c, profile) if c.pp == 1 else 1.0)
    by_stage = stage_layers(model, c.n_stages)
    itemsize = model.dtype_bytes
    parts: Dict[str, float] = {}
    if c.pp == 1:
        pipeline = stages[0].total
        parts.update(stages[0].parts)
        rank_stages, act_peaks = [[0]], [stages[0].activation_bytes]
    else:
        act = tuple(float(s.activation_bytes) for s in stages)
        msg = c.microbatch_samples * model.seq * model.hidden * itemsize / (c.tp if c.sp else 1)
        latency = comm.time("p2p", 2, msg, "pp")
        if static is not None:  # the Engine's hand-off, then the bytes at the p2p line's rate
            wire = profile.collective_line("p2p", 2, comm.inter_node("pp"))[1] * msg
            latency = static.latency_s + wire
        if lower_bound:  # no schedule built: stages by placement, one live microbatch at least
            rank_stages = [placed_stages(c.schedule, r, c.pp, c.chunks) for r in range(c.pp)]
            act_peaks = [max(act[s] for s in ids) for ids in rank_stages]
        else:
            _, on_rank = _schedule(c.schedule, c.pp, c.microbatches, c.chunks)
            rank_stages = [on_rank[r] for r in sorted(on_rank)]
            act_peaks = list(live_activation_peaks(c.schedule, c.pp, c.microbatches, c.chunks, act))
            if profile.host_cores():
                makespan, sim_busy = _pipeline(c, stages, act, latency, static)
                k = contention(c, profile, sum(sim_busy) / (len(sim_busy) * makespan)) if makespan else 1.0
                if k > 1.0:
                    stages = stage_costs(model, c, profile, comm, memo, k)
        busy = [c.microbatches * sum(stages[s].least_total for s in ids) for ids in rank_stages]
        busiest = max(range(len(busy)), key=lambda i: busy[i])
        # backwards run whole (B): no split cost, which each stage's parts count once (in W)
        whole = not lower_bound and not splits_backward(c.schedule, c.pp, c.microbatches, c.chunks)
        for s in rank_stages[busiest]:
            for name, value in stages[s].parts.items():
                parts[name] = parts.get(name, 0.0) + value * c.microbatches
            if whole:
                parts["pipeline runtime"] = parts.get("pipeline runtime", 0.0) - stages[s].split_extra_s * c.microbatches
        pipeline = max(_least_finish(stages, rank_stages, busy, c.microbatches, latency))
        if pipeline > busy[busiest]:
            parts["pipeline bubble"] = pipeline - busy[busiest]
    tail, memory, peak, rank_tail = -1.0, {}, -1.0, {}
    comm_max = max(s.comm_max_bytes for s in stages)
    base = profile.process_base_bytes()
    for stage_ids, act_peak in zip(rank_stages, act_peaks):
        sync, opt, states, biggest = _rank_state(by_stage, tuple(stage_ids), c, comm, profile, itemsize, memo)
        if sum(sync.values()) + opt > tail:
            tail = sum(sync.values()) + opt
            rank_tail = dict(sync, optimizer=opt)
        mem = {"process base": base, **states, "activations": float(act_peak),
               "comm buffers": 2.0 * max(comm_max, biggest if c.dp > 1 else 0)}
        if sum(mem.values()) > peak:
            peak, memory = sum(mem.values()), mem
    parts.update(rank_tail)
    parts["loss sync"] = comm.time("all_reduce", c.world_size, 4, "world")
    simulated = c.pp == 1 or not lower_bound
    if c.pp > 1 and simulated:
        makespan, sim_busy = _pipeline(c, stages, act, latency, static)
        parts["pipeline bubble"] = makespan - max(sim_busy)
        pipeline = makespan
    step = pipeline + tail + parts["loss sync"]
    return Prediction(c, step, {k: v for k, v in parts.items() if v > 0}, peak, memory, simulated)


__all__ = ["Prediction", "contention", "predict", "schedule_signature"]
