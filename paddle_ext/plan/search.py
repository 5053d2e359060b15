"""Search the plans of a model on N ranks: enumerate, check the profile covers them, predict,
prune by memory, rank (pure: no Paddle).

>>> from .model_desc import gpt_family
>>> from .profile_data import Profile
>>> prof = Profile.from_json({"source": "unit costs", "matmul": {"rate_flops_per_s": 1e9},
...     "elementwise": {"fwd": {"alpha_s": 1e-6, "s_per_elem": 1e-9}, "bwd": {"alpha_s": 1e-6, "s_per_elem": 1e-9}},
...     "optimizer": {"alpha_s_per_tensor": 1e-6, "s_per_elem": 1e-9},
...     "collectives": {k: {"any": {"alpha_s": 1e-5, "s_per_byte": 1e-9}} for k in COLLECTIVE_KINDS}})
>>> r = search(gpt_family(32, 4, 64, 16, 64, 4), prof, 4, schedules=["1F1B"])
>>> r.candidates, len(r.plans) == r.candidates, r.plans[0].step_s <= r.plans[-1].step_s
(38, True, True)
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import List, Optional

from ..parallel_plan import FIELDS
from .candidates import Candidate, enumerate_candidates
from .errors import MeshFactorError, NoFeasiblePlanError
from .memory import format_bytes, parse_memory
from .model_desc import ModelDesc
from .predict import Prediction, predict, schedule_signature
from .profile_data import COLLECTIVE_KINDS, Profile, check_profile_covers
from .stage_cost import CommCost, local_gemm
from .static_engine_cost import PADDLE_PASSES, check_engine, static_runtime, static_view


@dataclass
class SearchResult:
    candidates: int
    search_s: float
    plans: List[Prediction]          # feasible plans, fastest first (one row per distinct plan)
    infeasible: int
    memory_limit: Optional[int]
    merged: int = 0                  # feasible plans folded into an equal one's ``same_as``
    engine: str = "dygraph"          # what runs the plans: paddle-ext's dygraph runtime or the static Engine


def requirements(model: ModelDesc, cands, ranks_per_node: int):
    """The matmul shapes and ``(collective, group, inter-node)`` the candidates need from a profile."""
    gemms, colls = set(), set()
    ops = [op for layer in model.layers for op in layer.ops if op.gemm is not None]
    for samples, tp in {(c.microbatch_samples, c.tp) for c in cands}:
        gemms.update(local_gemm(op, samples, tp) for op in ops)
    for c in cands:
        comm = CommCost(None, c, ranks_per_node or c.world_size)
        if c.tp > 1:
            kinds = ("all_gather", "reduce_scatter") if c.sp else ("all_reduce",)
            colls.update((k, c.tp, comm.inter_node("tp")) for k in kinds)
        if c.dp > 1:
            kinds = ("reduce_scatter", "all_gather") if c.zero else ("all_reduce",)
            colls.update((k, c.dp, comm.inter_node("dp")) for k in kinds)
        if c.pp > 1:
            colls.add(("p2p", 2, comm.inter_node("pp")))
        colls.add(("all_reduce", c.world_size, comm.inter_node("world")))
    return sorted(gemms), sorted(colls)


def search(model_desc: ModelDesc, profile: Profile, nproc: int, memory=None, *, nodes: Optional[int] = None,
           batch: Optional[int] = None, schedules=None, max_microbatches: int = 64,
           exact: int = 50, engine: str = "dygraph") -> SearchResult:
    """Every plan of ``model_desc`` on ``nproc`` ranks (``nodes`` nodes of ``nproc / nodes`` ranks;
    by default ``nproc / ranks_per_node`` of the profile, else 1), predicted with ``profile``,
    those within ``memory`` (bytes or ``"2GiB"``; None: no limit) ranked fastest first, one row
    per distinct plan (:func:`merge_same_schedules`). The best ``exact`` distinct plans are exact
    (their pipelines built and simulated, their memory checked); a plan that cannot be among them
    keeps its lower bounds of step and memory (``Prediction.simulated`` False). Named errors
    before the search: :class:`~.errors.MemoryUnitError`, :class:`~.errors.MeshFactorError`,
    :class:`~.errors.ProfileError`; after it, :class:`~.errors.NoFeasiblePlanError` when no plan
    fits the limit. ``engine``: ``"dygraph"`` (paddle-ext's pipeline runtime) or ``"static"``
    (``dist.to_static`` with ``install(static_engine=True)``: the profile's ``static_engine``
    section, :mod:`.static_engine_cost`)."""
    check_engine(engine)
    static = static_runtime(profile) if engine == "static" else None
    if static is not None:
        profile = static_view(profile)
    limit = parse_memory(memory) if memory is not None else None
    if nodes is None:  # a profile of a multi-node machine says how many ranks a node holds
        per_node = int(profile.data.get("ranks_per_node") or nproc)
        nodes = max(1, -(-nproc // per_node)) if isinstance(nproc, int) and nproc % per_node == 0 else 1
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1 or \
            (isinstance(nproc, int) and nproc % nodes):
        raise MeshFactorError(f"--nodes {nodes!r} must be a positive int dividing --nproc {nproc}")
    batch = batch or max(8, 2 * nproc)
    rpn = nproc // nodes
    start = time.perf_counter()
    cands = enumerate_candidates(len(model_desc.layers), model_desc.heads, model_desc.hidden, model_desc.ffn,
                                 model_desc.seq, batch, nproc, schedules, max_microbatches)
    check_profile_covers(profile, *requirements(model_desc, cands, rpn))
    memo: dict = {}
    # branch and bound: every plan's lower bound first (a pipeline neither built nor simulated),
    # then, in bound order, exact predictions while a plan can still enter the best ``exact``
    bounds = sorted((predict(model_desc, c, profile, rpn, memo, lower_bound=True, static=static) for c in cands),
                    key=lambda p: p.step_s)
    feasible, best, infeasible, checked, distinct = [], [], [], 0, set()
    for p in bounds:
        if limit is not None and p.peak_bytes > limit:
            infeasible.append(p)
            continue
        threshold = best[exact - 1] if len(best) >= exact else float("inf")
        if not p.simulated and p.step_s <= threshold:
            p = predict(model_desc, p.candidate, profile, rpn, memo, static=static)
            checked += 1
            if limit is not None and p.peak_bytes > limit:
                infeasible.append(p)
                continue
        if p.simulated and _distinct(p, distinct, engine):  # a plan equal to one already counted takes no place
            best = sorted(best + [p.step_s])[:exact]
        feasible.append(p)
    if not feasible:
        exact_peaks = [p if p.simulated else predict(model_desc, p.candidate, profile, rpn, memo, static=static)
                       for p in infeasible]
        smallest = min(exact_peaks, key=lambda p: p.peak_bytes)
        raise NoFeasiblePlanError(
            f"no plan of {model_desc.name} on {nproc} ranks fits --memory-limit {format_bytes(limit)} per rank: "
            f"the smallest any of the {len(exact_peaks)} plans needs is {format_bytes(smallest.peak_bytes)} "
            f"({smallest.candidate.name}); raise the limit, add ranks or shrink the batch")
    feasible.sort(key=lambda p: (p.step_s, p.peak_bytes, p.candidate.name))
    plans, merged = merge_same_schedules(feasible, engine)
    return SearchResult(len(cands), time.perf_counter() - start, plans, len(infeasible), limit, merged, engine)


def _same_plan_key(p: Prediction, engine: str = "dygraph"):
    """What makes two simulated plans the same plan: mesh, ZeRO, sp, batch, microbatches and
    every rank's action list (None for a plan without a pipeline or not simulated); in the
    static Engine also which pass runs it (Paddle's own FThenB/1F1B/VPP pass or paddle-ext's)."""
    c = p.candidate
    if c.pp == 1 or not p.simulated:
        return None
    return (c.pp, c.dp, c.tp, c.zero, c.sp, c.batch, c.microbatches,
            schedule_signature(c.schedule, c.pp, c.microbatches, c.chunks),
            engine == "static" and c.schedule in PADDLE_PASSES)


def _distinct(p: Prediction, seen: set, engine: str) -> bool:
    key = _same_plan_key(p, engine)
    if key is None:
        return True
    if key in seen:
        return False
    seen.add(key)
    return True


def merge_same_schedules(ranked: List[Prediction], engine: str = "dygraph"):
    """``(plans, how many merged)``: a simulated pipeline plan whose schedule runs the same
    action lists as a better-ranked plan's on the same mesh and microbatches is the same plan
    under another name; it is folded into that plan's ``same_as`` instead of taking a row of
    its own (so ``--run K`` runs K different plans)."""
    first: dict = {}
    plans: List[Prediction] = []
    for p in ranked:
        key = _same_plan_key(p, engine)
        if key is not None:
            kept = first.get(key)
            if kept is not None:
                kept.same_as = kept.same_as + (p.candidate.schedule,)
                continue
            first[key] = p
        plans.append(p)
    return plans, len(ranked) - len(plans)


def to_json(result: SearchResult, top: Optional[int] = None) -> dict:
    """``{"candidates", "search_s", "plans": [...]}`` with the measured fields null until run."""
    plans = []
    for p in result.plans[:top]:
        c: Candidate = p.candidate
        plans.append({"name": c.name, "predicted_step_s": p.step_s, "predicted_peak_bytes": p.peak_bytes,
                      "measured_step_s": None, "measured_peak_bytes": None,
                      "plan": c.layout, **{f: getattr(c, f) for f in FIELDS},
                      "simulated": p.simulated, "same_as": list(p.same_as), "top": [{"part": k, "fraction": f} for k, f in p.top(3)],
                      "memory": p.memory})
    return {"engine": result.engine, "candidates": result.candidates, "search_s": result.search_s, "feasible": len(result.plans),
            "infeasible": result.infeasible, "merged": result.merged,
            "memory_limit": result.memory_limit, "plans": plans}


__all__ = ["SearchResult", "search", "to_json", "merge_same_schedules", "requirements", "COLLECTIVE_KINDS"]
