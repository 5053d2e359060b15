"""What one pipeline stage of a plan costs per microbatch: time by kind (F, I, W) and by cause,
and the bytes it keeps for backward (pure: no Paddle).

Per op of the stage's layers, at the microbatch a plan gives each rank
(:attr:`~.candidates.Candidate.microbatch_samples`) and split as :mod:`.model_desc` says:

* a matmul costs the profile's ``fwd`` (F), ``bwd_input`` (I) and ``bwd_weight`` (W, only when it
  reads a weight; a product of two activations has two input gradients, both I);
* any other op costs the profile's elementwise line, forward in F and backward in I;
* with a mesh inside the stage (``dp`` or ``tp`` > 1) every op call, forward and backward, pays
  the profile's ``dist_op_s`` (the semi-automatic dispatch of distributed tensors);
* for a model whose profile timed its own decoder layer under this ``tp`` (``blocks``, a
  PaddleNLP model: :mod:`.profile_blocks`; ``tp = 1``: data parallelism alone), that layer's
  measured extra, forward in F and backward in I, in place of the dispatch above and the
  tensor-parallel collectives below for its blocks;
* tensor parallelism per block: without sequence parallelism two all-reduces of the block's
  ``[b, seq, hidden]`` output forward (after o and down) and two backward (the column inputs'
  gradients); with it two all-gathers and two reduce-scatters forward, the same backward; the
  head gathers the sequence once. Bytes are the reshard planner's for that tensor on a ``tp`` mesh;
* in a pipeline, the profile's cost per action at the plan's pipeline degree (``pipeline.
  action_s_by_degree``, else ``action_s``) for each of F, the full backward B, and a split
  backward's I and W (so splitting the backward costs one action more), and the profile's
  ``pipeline.split_extra_s`` on each W (what else a split backward costs here).

>>> from .model_desc import gpt_family
>>> from .candidates import Candidate
>>> from .profile_data import Profile
>>> p = Profile.from_json({"source": "t", "matmul": {"rate_flops_per_s": 1.0}, "elementwise":
...     {"fwd": {"alpha_s": 0, "s_per_elem": 0}, "bwd": {"alpha_s": 0, "s_per_elem": 0}}})
>>> m = gpt_family(hidden=4, heads=2, ffn=8, seq=2, vocab=4, layers=1)
>>> s = stage_costs(m, Candidate(dp=2, batch=2), p, comm=None)[0]
>>> s.forward == 2 * (3 * 2*4*4 + 2 * 2*2*2*2 + 2*4*4 + 2 * 2*4*8 + 2*8*4 + 2*4*4)  # 2 x flops, 1 sample
True
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Dict, List, Optional, Tuple

from ..placements import DistSpec
from ..reshard.planner import plan_bytes, plan_reshard
from .candidates import Candidate
from .model_desc import LayerDesc, ModelDesc, OpDesc
from .profile_data import Profile


@lru_cache(maxsize=256)
def _planner_bytes(shape: Tuple[int, ...], group: int, src: str, dst: str, itemsize: int) -> int:
    spec = (DistSpec(tuple(shape), (group,), src), DistSpec(tuple(shape), (group,), dst))
    return plan_bytes(plan_reshard(*spec, itemsize=itemsize))


def reshard_bytes(shape: Tuple[int, ...], group: int, src: str, dst: str, itemsize: int = 4) -> int:
    """Bytes a rank receives for ``src -> dst`` of ``shape`` on a 1-D mesh of ``group`` ranks,
    as the reshard planner plans it. ``S(d)`` is read as a split of dim ``d``, the other dims
    flattened behind it; when ``group`` divides that dim the planner is asked about a tensor of
    one element per rank and the answer scaled by the elements per rank (its byte counts are
    linear in the block size for even splits), so a search asks it a handful of questions.

    >>> reshard_bytes((8, 16, 32), 2, "[P]", "[R]"), 2 * (2 - 1) / 2 * 8 * 16 * 32 * 4
    (16384, 16384.0)
    """
    return _reshard_bytes(tuple(shape), group, src, dst, itemsize)


@lru_cache(maxsize=8192)
def _reshard_bytes(shape: Tuple[int, ...], group: int, src: str, dst: str, itemsize: int) -> int:
    if group <= 1:
        return 0
    numel = 1
    for d in shape:
        numel *= int(d)
    dim = next((int(t[3:-2]) for t in (src, dst) if t.startswith("[S(")), None)
    lead = int(shape[dim]) if dim is not None else numel
    rename = {t: ("[S(0)]" if t.startswith("[S(") else t) for t in (src, dst)}
    if lead % group == 0:
        return _planner_bytes((group,), group, rename[src], rename[dst], itemsize) * (numel // group)
    return _planner_bytes((lead, numel // lead), group, rename[src], rename[dst], itemsize)


def split_sizes(n_layers: int, n_stages: int) -> List[int]:
    """Layers per stage, as even as possible, larger first (as the pipeline runtime splits them)."""
    base, extra = divmod(n_layers, n_stages)
    return [base + (1 if i < extra else 0) for i in range(n_stages)]


def stage_layers(model: ModelDesc, n_stages: int) -> List[Tuple[LayerDesc, ...]]:
    out, start = [], 0
    for n in split_sizes(len(model.layers), n_stages):
        out.append(model.layers[start:start + n])
        start += n
    return out


def local_gemm(op: OpDesc, samples: int, tp: int) -> Tuple[int, int, int, int]:
    b, m, k, n = op.gemm
    if op.batched:
        b, m = (b * samples, m) if op.gemm_scales == "B" else (b, m * samples)
    if op.tp == "column":
        n //= tp
    elif op.tp == "row":
        k //= tp
    elif op.tp == "heads":
        b //= tp
    return b, m, k, n


def local_numel(op: OpDesc, samples: int, tp: int, sp: bool) -> int:
    n = op.numel * (samples if op.batched else 1)
    if op.tp in ("column", "heads") or (op.tp == "seq" and sp):
        n //= tp
    return n


@dataclass
class StageCost:
    """Seconds per microbatch: ``forward`` (F), ``backward_input`` (I), ``backward_weight`` (W);
    ``parts`` splits F + I + W by cause; ``activation_bytes`` kept per microbatch on the rank."""

    forward: float = 0.0
    backward_input: float = 0.0
    backward_weight: float = 0.0
    parts: Dict[str, float] = field(default_factory=dict)
    activation_bytes: float = 0.0
    comm_max_bytes: float = 0.0
    runtime_s: float = 0.0   # what the pipeline runtime adds per action (F, B, I or W)
    split_extra_s: float = 0.0  # what a split backward (I + W) costs beyond its two actions, in W

    def add(self, part: str, f: float = 0.0, i: float = 0.0, w: float = 0.0) -> None:
        self.forward += f
        self.backward_input += i
        self.backward_weight += w
        self.parts[part] = self.parts.get(part, 0.0) + f + i + w

    @property
    def total(self) -> float:
        return self.forward + self.backward_input + self.backward_weight

    @property
    def full_backward(self) -> float:
        """The backward as one action (B): its compute and one runtime action."""
        return self.backward_input + self.backward_weight - self.runtime_s

    @property
    def least_total(self) -> float:
        """F plus the cheaper of one B or a split I + W: a lower bound of a microbatch's work."""
        return self.forward + min(self.full_backward, self.backward_input + self.backward_weight)


def _layer_cost(cost: StageCost, layer: LayerDesc, c: Candidate, profile: Profile, dist: bool,
                comm: Optional["CommCost"], itemsize: int, hidden: int, seq: int, contention: float = 1.0,
                model: str = "") -> None:
    samples, tp, k = c.microbatch_samples, c.tp, contention
    measured = profile.block_extra(model, hidden, seq, tp, c.sp, samples) \
        if layer.kind == "block" and dist and comm is not None else None
    if measured is not None:   # the model's own layer timed under this tp: its collectives and dispatch
        cost.add("tp block (measured)" if tp > 1 else "dispatch", measured[0], measured[1])
        dist = False
    for op in layer.ops:
        if op.gemm is not None:
            f, bi, bw = profile.matmul(local_gemm(op, samples, tp))
            cost.add("compute", k * f, k * (bi if op.param else bi + bw), k * (bw if op.param else 0.0))
        else:
            f, b = profile.elementwise(local_numel(op, samples, tp, c.sp))
            cost.add("compute", k * f, k * b)
        if dist:
            cost.add("dispatch", profile.dist_op_s(), profile.dist_op_s())
        cost.activation_bytes += local_numel(op, samples, tp, c.sp) * itemsize if op.batched else 0
    if tp > 1 and comm is not None and measured is None:
        shape = (samples, seq, hidden)
        if layer.kind == "block":
            if c.sp:
                gather = comm.time("all_gather", tp, reshard_bytes(shape, tp, "[S(1)]", "[R]", itemsize), "tp")
                scatter = comm.time("reduce_scatter", tp, reshard_bytes(shape, tp, "[P]", "[S(1)]", itemsize), "tp")
                cost.add("sp all-gather", 2 * gather, 2 * gather)
                cost.add("sp reduce-scatter", 2 * scatter, 2 * scatter)
            else:
                nbytes = reshard_bytes(shape, tp, "[P]", "[R]", itemsize)
                reduce = comm.time("all_reduce", tp, nbytes, "tp")
                cost.add("tp all-reduce", 2 * reduce, 2 * reduce)
                cost.comm_max_bytes = max(cost.comm_max_bytes, nbytes)
        elif layer.kind == "head" and c.sp:
            cost.add("sp all-gather", comm.time("all_gather", tp, reshard_bytes(shape, tp, "[S(1)]", "[R]", itemsize),
                                                "tp"))


@dataclass(frozen=True)
class CommCost:
    """Collective times from the profile, intra- or inter-node by the group's span on the mesh."""

    profile: Profile
    candidate: Candidate
    ranks_per_node: int

    def inter_node(self, dim: str) -> bool:
        c = self.candidate
        stride, size = {"tp": (1, c.tp), "dp": (c.tp, c.dp), "pp": (c.tp * c.dp, c.pp),
                        "world": (1, c.world_size)}[dim]
        return stride * size > self.ranks_per_node

    def time(self, kind: str, group: int, nbytes: float, dim: str) -> float:
        return self.profile.collective(kind, group, nbytes, self.inter_node(dim))


def stage_costs(model: ModelDesc, c: Candidate, profile: Profile, comm: Optional[CommCost],
                memo: Optional[dict] = None, contention: float = 1.0) -> List[StageCost]:
    """One :class:`StageCost` per pipeline stage (one stage without pipelining). ``memo`` (a dict
    kept for one model and profile) saves the cost of a layer for plans that split it alike.
    ``contention`` (>= 1) stretches what the profile timed in one uncontended process (compute,
    and the pipeline runtime's actions): CPU ranks computing at once on fewer cores."""
    dist = c.dp > 1 or c.tp > 1
    memo = {} if memo is None else memo
    inter = comm.inter_node("tp") if comm is not None else False
    out = []
    for index, layers in enumerate(stage_layers(model, c.n_stages)):
        stage_key = ("stage", c.n_stages, index, c.microbatch_samples, c.tp, c.sp, dist, inter, comm is None,
                     c.pp, contention)
        if stage_key in memo:
            out.append(memo[stage_key])
            continue
        cost = memo[stage_key] = StageCost()
        for layer in layers:
            key = ("layer", id(layer), c.microbatch_samples, c.tp, c.sp, dist, inter, comm is None, contention)
            one = memo.get(key)
            if one is None:
                one = memo[key] = StageCost()
                _layer_cost(one, layer, c, profile, dist, comm, model.dtype_bytes, model.hidden, model.seq,
                            contention, model.name)
            cost.forward += one.forward
            cost.backward_input += one.backward_input
            cost.backward_weight += one.backward_weight
            for part, value in one.parts.items():
                cost.parts[part] = cost.parts.get(part, 0.0) + value
            cost.activation_bytes += one.activation_bytes
            cost.comm_max_bytes = max(cost.comm_max_bytes, one.comm_max_bytes)
        per_action = profile.pipeline_action_s(c.pp) if c.pp > 1 else 0.0
        per_split = profile.pipeline_split_extra_s(c.pp) if c.pp > 1 else 0.0
        if per_action or per_split:
            a, extra = contention * per_action, contention * per_split
            # F and B are one action each; a split backward is two (I and W), each one action,
            # and W carries what splitting costs beyond that (B, the unsplit backward, does not)
            cost.add("pipeline runtime", a, a / 2, a / 2 + extra)
            cost.backward_input += a / 2   # the other half of each one's action (parts count B's one)
            cost.backward_weight += a / 2
            cost.runtime_s = a + extra
            cost.split_extra_s = extra
        out.append(cost)
    return out


__all__ = ["StageCost", "CommCost", "stage_costs", "stage_layers", "split_sizes", "local_gemm", "local_numel",
           "reshard_bytes"]
