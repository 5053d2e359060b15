"""Measure a cost profile on this machine (an adapter: imports Paddle, launches ranks).

* In this process, dense: every matmul shape the candidate plans of the model run (forward,
  backward for the input, backward for the weight), and the elementwise line (a multiply at
  four sizes, forward and backward, fitted to ``alpha + s_per_elem * numel``).
* On ``nproc`` ranks (:func:`paddle_ext.launcher.run_ranks`, gloo on CPU): the extra time of an
  op call on distributed tensors (one block of the model forward and backward, replicated on the
  ranks, against the same block dense, with ``paddle_ext.install()`` and ``enable()`` as the demo
  runs), each collective kind per group size as ``dist.reshard`` runs it on a ``[N/g, g]`` mesh
  (all ranks busy at once, as in a plan), point-to-point send/recv, one AdamW step over
  distributed parameters, and the rank's memory after all that (the process base);
* the pipeline runtime's cost per action beyond compute: the demo's ``ppD`` plan at 1 and at 8
  microbatches on D ranks, D = 2, 4, ... up to ``nproc`` (:func:`measure_pipeline_action`), and
  what a split backward costs beyond its two actions: ``pp2`` with ZBH1 at 4 microbatches
  (:func:`measure_split_backward`).

Each collective is timed at three sizes and fitted against the reshard planner's bytes for that
transition, so ``alpha + s_per_byte * planner bytes`` is what the step model reads back.
"""
from __future__ import annotations

import importlib
import os
import platform
import statistics
import time

from .candidates import Candidate
from .model_desc import gpt_family
from .predict import predict
from .profile_blocks import measure_block_extra, timed_in_turns
from .profile_data import Profile, fit_line, gemm_key
from .runner import run_candidate
from .stage_cost import reshard_bytes
from .trace_paddlenlp import MODELS as PADDLENLP_MODELS

COLLECTIVE_SIZES = (256, 16384, 131072)       # float32 elements
ELEMENTWISE_SIZES = (256, 4096, 65536, 262144)
COLLECTIVE_REPEATS = 15
TRANSITIONS = {"all_reduce": ("[P]", "[R]"), "all_gather": ("[S(0)]", "[R]"), "reduce_scatter": ("[P]", "[S(0)]")}


def _timed(fn, repeats: int) -> float:
    """Median seconds of ``fn()`` over ``repeats`` runs after one warm-up."""
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def measure_matmuls(gemms, repeats: int = 15) -> dict:
    """``{"BxMxKxN": {"fwd", "bwd_input", "bwd_weight"}}`` seconds, dense, in this process."""
    import paddle

    out = {}
    for b, m, k, n in gemms:
        lead = [b] if b > 1 else []
        x, w = paddle.rand(lead + [m, k]), paddle.rand(lead + [k, n])
        dy = paddle.rand(lead + [m, n])
        out[gemm_key((b, m, k, n))] = {
            "fwd": _timed(lambda: paddle.matmul(x, w), repeats),
            "bwd_input": _timed(lambda: paddle.matmul(dy, w, transpose_y=True), repeats),
            "bwd_weight": _timed(lambda: paddle.matmul(x, dy, transpose_x=True), repeats)}
    return out


def measure_elementwise(repeats: int = 15) -> dict:
    """The elementwise line, forward and backward, from a multiply at several sizes."""
    import paddle

    fwd, bwd = [], []
    for n in ELEMENTWISE_SIZES:
        x, y = paddle.rand([n]), paddle.rand([n])
        x.stop_gradient = False
        g = paddle.ones([n])
        f = _timed(lambda: x * y, repeats)

        def both():
            (x * y).backward(g)

        fwd.append((n, f))
        bwd.append((n, max(_timed(both, repeats) - f, 0.0)))
    (fa, fr), (ba, br) = fit_line(fwd), fit_line(bwd)
    return {"fwd": {"alpha_s": fa, "s_per_elem": fr}, "bwd": {"alpha_s": ba, "s_per_elem": br}}


def _dispatch_per_op(mesh, model_config: dict, repeats: int) -> float:
    """Extra seconds per op call on distributed tensors: forward + backward of one demo block
    with its input sharded over ``mesh`` on the batch and its weights replicated (every op then
    runs Paddle's SPMD rule and its distributed kernel path, and none communicates: the weight
    gradients stay partial), against the same block dense on this rank's part of the batch,
    divided by its op calls (forward and backward). A replicated input would take Paddle's
    shortcut for all-replicated operands and time almost nothing. With ``paddle_ext.enable()``
    on, this includes paddle-ext's rule dispatch."""
    import paddle
    import paddle.distributed as dist

    from ..demo.model import Block, GPTConfig

    cfg = GPTConfig(**model_config)
    world = len(mesh.process_ids)
    x = paddle.rand([2 * world, cfg.seq_len, cfg.d_model])

    def step(layer, inp):
        layer(inp).sum().backward()

    paddle.seed(0)
    local, dense_block = x[:2], Block(cfg)
    block = dist.shard_layer(Block(cfg), mesh)
    xd = dist.shard_tensor(x, mesh, [dist.Shard(0)])
    # alternated, every rank at once: both see the same contention
    dense, spread = timed_in_turns([lambda: step(dense_block, local), lambda: step(block, xd)], 2 * repeats)
    ops = len(gpt_family(cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.seq_len, cfg.vocab, 1).layers[1].ops)
    return max(spread - dense, 0.0) / (2 * ops)


def profile_rank(model_config: dict, repeats: int = 7, imports=(), model: str = "demo") -> dict:
    """Run on every rank: dispatch overhead, collectives, p2p, optimizer, process memory (after
    importing ``imports`` too: the modules the model's runner loads, e.g. PaddleNLP's) and, for a
    PaddleNLP ``model``, its decoder layer under tensor parallelism (:mod:`.profile_blocks`)."""
    import resource

    import numpy as np
    import paddle
    import paddle.distributed as dist

    import paddle_ext

    for name in imports:
        importlib.import_module(name)
    dist.init_parallel_env()
    paddle_ext.install()
    paddle_ext.enable()
    world, rank = dist.get_world_size(), dist.get_rank()
    mesh = dist.ProcessMesh(list(range(world)), dim_names=["x"])
    out = {"rank": rank, "dist_op_s": _dispatch_per_op(mesh, model_config, repeats), "collectives": {}}
    place = {"[P]": dist.Partial(), "[R]": dist.Replicate(), "[S(0)]": dist.Shard(0)}
    cases = []   # (kind, group, bytes, the reshard to time)
    for g in [g for g in range(2, world + 1) if world % g == 0]:
        mesh2 = dist.ProcessMesh(np.arange(world).reshape(world // g, g).tolist(), dim_names=["o", "g"])
        for kind, (src, dst) in TRANSITIONS.items():
            for n in COLLECTIVE_SIZES:
                x = dist.shard_tensor(paddle.rand([n]), mesh2, [dist.Replicate(), place[src]])
                cases.append((kind, g, reshard_bytes((n,), g, src, dst),
                              lambda x=x, m=mesh2, d=place[dst]: dist.reshard(x, m, [dist.Replicate(), d])))
    peer = rank ^ 1
    for n in COLLECTIVE_SIZES:
        buf = paddle.rand([n])

        def exchange(buf=buf):
            if peer >= world:
                return
            if rank % 2 == 0:
                dist.send(buf, peer)
            else:
                dist.recv(buf, peer)
        cases.append(("p2p", 2, n * 4, exchange))
    times = timed_in_turns([case[-1] for case in cases], COLLECTIVE_REPEATS)
    for kind, g in dict.fromkeys((k, g) for k, g, _, _ in cases):
        pts = [(nbytes, t) for (k, gg, nbytes, _), t in zip(cases, times) if (k, gg) == (kind, g)]
        if kind == "p2p" and peer >= world and world > 1:
            continue   # no peer here (odd world): the other ranks' fits make the profile's
        alpha, beta = fit_line(pts)
        out["collectives"].setdefault(kind, {})[str(g)] = {"alpha_s": alpha, "s_per_byte": beta}
    out["optimizer"] = _optimizer_line(mesh, repeats)
    if model in PADDLENLP_MODELS and world > 1:
        out["blocks"] = measure_block_extra(PADDLENLP_MODELS[model])
    out["process_base_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return out


def _optimizer_line(mesh, repeats: int) -> dict:
    """AdamW over distributed replicated parameters: many small tensors, then a few large ones."""
    import paddle
    import paddle.distributed as dist

    def step_time(count: int, numel: int) -> float:
        params = [dist.shard_tensor(paddle.create_parameter([numel], "float32"), mesh, [dist.Replicate()])
                  for _ in range(count)]
        opt = dist.shard_optimizer(paddle.optimizer.AdamW(1e-3, parameters=params))
        sum(paddle.sum(p * p) for p in params).backward()
        return _timed(opt.step, repeats)

    small, large = step_time(32, 64), step_time(4, 65536)
    per_tensor = small / 32
    per_elem = max(large - 4 * per_tensor, 0.0) / (4 * 65536)
    return {"alpha_s_per_tensor": per_tensor, "s_per_elem": per_elem}


def build_profile(gemms, nproc: int, model_config: dict, timeout: float = 600.0, log_dir=None, imports=(),
                  model: str = "demo") -> dict:
    """Measure everything on this machine: the matmul ``gemms`` here, the rest on ``nproc`` ranks
    (``model_config``: the demo GPT's sizes, for the dispatch measurement on one block;
    ``imports``: modules the model's runner loads, in the process base; ``model``: its name, for
    a PaddleNLP model's own decoder layer)."""
    from ..launcher import run_ranks

    load_before = os.getloadavg()
    elementwise = measure_elementwise()
    matmuls = measure_matmuls(gemms)
    ranks = run_ranks(profile_rank, nproc=nproc, args=(dict(model_config), 7, tuple(imports), model), timeout=timeout,
                      log_dir=log_dir, teardown="warn", pin_cpus=True)   # as the plans' runs
    med = statistics.median
    collectives = {}
    for kind, by_group in ranks[0]["collectives"].items():
        # over the ranks that timed it (with an odd world, the last rank has no p2p peer)
        timed = {g: [r["collectives"][kind][g] for r in ranks if g in r["collectives"].get(kind, {})]
                 for g in by_group}
        collectives[kind] = {g: {"alpha_s": med(f["alpha_s"] for f in fits),
                                 "s_per_byte": med(f["s_per_byte"] for f in fits)} for g, fits in timed.items()}
    data = {
        "source": f"measured by paddle-ext profile on {platform.node()} ({platform.machine()}, "
                  f"{os.cpu_count()} CPUs), {nproc} CPU ranks on gloo, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
                  f"load average {load_before[0]:.2f} before",
        "backend": "gloo", "device": "cpu", "dtype_bytes": 4, "nproc": nproc,
        "matmul": {"shapes": matmuls},
        "elementwise": elementwise,
        "dispatch": {"dist_op_s": med(r["dist_op_s"] for r in ranks)},
        "optimizer": {k: med(r["optimizer"][k] for r in ranks) for k in ("alpha_s_per_tensor", "s_per_elem")},
        "collectives": collectives,
        "host": {"cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()},
        "memory": {"process_base_bytes": max(r["process_base_bytes"] for r in ranks),
                   "base_imports": list(imports)},
    }
    if "blocks" in ranks[0]:
        data["blocks"] = {"model": model, "hidden": model_config["d_model"], "seq": model_config["seq_len"], "extra": {
            key: {part: med(r["blocks"][key][part] for r in ranks) for part in ("fwd_s", "bwd_s")}
            for key in ranks[0]["blocks"]}}
    data["pipeline"] = measure_pipeline_action(data, model_config, timeout, nproc)
    data["pipeline"].update(measure_split_backward(data, model_config, timeout, nproc))
    return data


def _median_steps(plans: list, cfg: dict, timeout: float, runs: int = 3, steps: int = 128) -> list:
    """Each plan's median of ``runs`` measured step times on the demo's runner, the plans run in
    turn ``runs`` times over (a slow or a fast spell of the machine then falls on no one plan
    alone), as ``plan --run`` measures. Two 16-step runs gave ``action_s`` 1.8-4.2 ms and
    ``split_extra_s`` -4.2 to +5.9 ms in four profiles of one hour, the fastest of three 32-step
    runs 1.8-2.0 ms and 5.9-6.4 ms in two; a 30-step median moves by +-10% within one run
    (``runner.steps_for``), so 128 steps a run."""
    times: list = [[] for _ in plans]
    for _ in range(runs):
        for i, c in enumerate(plans):
            times[i].append(run_candidate(c, cfg, steps=steps, timeout=timeout)["measured_step_s"])
    return [statistics.median(t) for t in times]


def pipeline_degrees(nproc: int) -> tuple:
    """The pipeline degrees a profile on ``nproc`` ranks times its action cost at: 2, 4, 8, ...
    up to ``nproc`` (each on that many ranks, all of them stages)."""
    return tuple(2 ** k for k in range(1, max(nproc, 2).bit_length()) if 2 ** k <= max(nproc, 2))


def solve_increasing(f, target: float, low: float, high: float, steps: int = 40) -> float:
    """Where the increasing ``f`` reaches ``target`` between ``low`` and ``high``, by bisection:
    ``low`` itself if ``f(low)`` already reaches it (the bound the caller allows)."""
    if f(low) >= target:
        return low
    for _ in range(steps):
        mid = (low + high) / 2
        low, high = (mid, high) if f(mid) < target else (low, mid)
    return low


def fit_action_cost(model, profile_data: dict, pp: int, measured: dict) -> float:
    """The per-action cost ``a`` at which this profile's prediction of 1F1B on ``pp`` ranks alone
    grows from 1 to 8 microbatches as much as it measured (``measured``: ``{1: s, 8: s}``): a
    bisection over :func:`predict`, so compute, contention on the host's cores and the schedule's
    shape are the step model's own; what does not depend on the microbatch count cancels. 0 where
    the prediction without any action cost already grows as much."""
    def growth(a: float) -> float:
        trial = Profile.from_json({**profile_data, "pipeline": {"action_s": a}})
        step = {m: predict(model, Candidate(pp=pp, schedule="1F1B", microbatches=m, batch=8), trial, pp).step_s
                for m in (1, 8)}
        return step[8] - step[1]

    target = measured[8] - measured[1]
    high = max(target, 1e-6)
    while growth(high) < target:
        high *= 2
    return solve_increasing(growth, target, 0.0, high)


def measure_pipeline_action(data: dict, model_config: dict, timeout: float, nproc: int = 2) -> dict:
    """Seconds a pipeline runtime adds per action (F, or a backward as two halves I + W) beyond
    its compute, per pipeline degree (:func:`pipeline_degrees`): the demo's ``ppD`` plan with 1F1B
    at 1 and at 8 microbatches on D ranks, each the median of three 128-step runs, alternated, and
    the cost that makes the prediction grow as much (:func:`fit_action_cost`). The degrees differ:
    4 ranks on 2 cores measured 3.0 ms an action where 2 ranks measured 1.9-2.0 ms
    (docs/measurements/plan_rounds.md, "Profile terms").
    Returns ``{"action_s": at degree 2, "action_s_by_degree": {"2": s, "4": s, ...}}``."""

    cfg = dict(model_config)
    model = gpt_family(cfg["d_model"], cfg["n_heads"], cfg["d_ff"], cfg["seq_len"], cfg["vocab"], cfg["n_layers"])
    by_degree = {}
    for pp in pipeline_degrees(nproc):
        plans = [Candidate(pp=pp, schedule="1F1B", microbatches=m, batch=8) for m in (1, 8)]
        measured = dict(zip((1, 8), _median_steps(plans, cfg, timeout)))
        by_degree[str(pp)] = fit_action_cost(model, data, pp, measured)
    return {"action_s": by_degree["2"], "action_s_by_degree": by_degree}


def fit_split_extra(model, profile_data: dict, measured: dict, pp: int = 2) -> float:
    """The cost per W at which this profile's prediction of the demo's ``ppD`` plan (``pp``) at 4
    microbatches is as much slower with ZBH1 than with 1F1B as it measured (``measured``:
    ``{"1F1B": s, "ZBH1": s}``): a bisection over :func:`predict`, so what both schedules share
    (compute, the pipeline actions of F, the error of the prediction's absolute level) cancels, as
    in :func:`fit_action_cost`. Bounded below by the degree's action cost, negated (a W that
    costs nothing)."""
    plans = {s: Candidate(pp=pp, schedule=s, microbatches=4, batch=8) for s in ("1F1B", "ZBH1")}
    pipeline = {k: v for k, v in profile_data["pipeline"].items() if k != "split_extra_s_by_degree"}

    def predicted(schedule: str, extra: float) -> float:
        trial = {**profile_data, "pipeline": {**pipeline, "split_extra_s": extra}}
        return predict(model, plans[schedule], Profile.from_json(trial), pp).step_s

    target = predicted("1F1B", 0.0) + measured["ZBH1"] - measured["1F1B"]
    low = -Profile.from_json(profile_data).pipeline_action_s(pp)
    high = max(abs(target), 1e-6)
    while predicted("ZBH1", high) < target:
        high *= 2
    return solve_increasing(lambda e: predicted("ZBH1", e), target, low, high)


def measure_split_backward(data: dict, model_config: dict, timeout: float, nproc: int = 2) -> dict:
    """Seconds a split backward (I then W) costs beyond its compute and two runtime actions, per
    pipeline degree (:func:`pipeline_degrees`): the demo's ``ppD`` plan at 4 microbatches with
    ZBH1 and with 1F1B on D ranks, each the median of three 128-step runs, alternated, and
    :func:`fit_split_extra` of the two. Positive where the backward's two halves each walk the
    autograd graph; negative, down to the action cost, where a W costs less than an F or a B
    action (it sends nothing, while the action cost of 4 ranks on 2 cores is mostly waiting for
    what is sent). Fitted to the difference between the two schedules, not to ZBH1's step alone
    (which would take up the whole prediction's error), and per degree: pp2's figure read at pp4
    charges every W the full pp4 action cost and puts the zero-bubble plans at 2 microbatches
    behind 1F1B where they measure level (docs/measurements/plan_rounds.md, "Profile terms").
    Returns ``{"split_extra_s": at degree 2, "split_extra_s_by_degree": {...}}``."""

    cfg = dict(model_config)
    model = gpt_family(cfg["d_model"], cfg["n_heads"], cfg["d_ff"], cfg["seq_len"], cfg["vocab"], cfg["n_layers"])
    schedules = ("1F1B", "ZBH1")
    by_degree = {}
    for pp in pipeline_degrees(nproc):
        plans = [Candidate(pp=pp, schedule=s, microbatches=4, batch=8) for s in schedules]
        measured = dict(zip(schedules, _median_steps(plans, cfg, timeout)))
        by_degree[str(pp)] = fit_split_extra(model, data, measured, pp)
    return {"split_extra_s": by_degree["2"], "split_extra_s_by_degree": by_degree}


__all__ = ["build_profile", "fit_action_cost", "fit_split_extra", "measure_elementwise", "measure_matmuls", "measure_pipeline_action",
           "measure_split_backward", "pipeline_degrees", "profile_rank", "solve_increasing"]
