"""Prove a plan of a user's own model by running it: its emitted configuration applied with
``dist.parallelize`` on CPU ranks (an adapter: imports Paddle).

``paddle-ext plan --model pkg.module:factory --run K`` launches each chosen plan through
:func:`train_rank` on :func:`paddle_ext.launcher.run_ranks`: every rank builds the model from the
factory, applies the plan's configuration (:mod:`.emit`, :func:`paddle_ext.apply_plan`), shards
the factory's batch over ``dp`` and trains ``steps`` steps with AdamW; measured as the demo's
runner is (:mod:`.runner`): the step time is the median of the step-to-step times after the
warm-up, the peak memory the largest per-rank peak RSS, each rank pinned to one CPU. At the first
step every rank also gathers each parameter's gradient it holds (``dist.unshard_dtensor``) and
compares it, and the losses of the first steps, with the dense model trained on this process from
the same factory with the same optimizer: ``max_grad_error`` (:func:`grad_error`) and
``max_loss_error`` (relative).

:func:`runnable` says which plans it runs: those ``dist.parallelize`` expresses (no schedule it
lacks, no sequence parallelism), and no pipeline with ZeRO: on 4 gloo ranks ``pp2-zero1d2`` and
``pp2-zero3d2`` abort in gloo (a 64-byte message where a 4-byte one was expected: the ranks of a
communicator posting different collectives) and ``pp2-zero2d2`` times out. Pipeline with plain
data parallelism (``pp2-dp2``) runs, its losses and gradients equal the dense model's.
"""
from __future__ import annotations

import resource
import statistics
import time

import numpy as np
import paddle
import paddle.distributed as dist

import paddle_ext
from ..compat.native.cpp_build import optional_file_lock
from ..launcher import run_ranks
from .apply import apply_plan
from .emit import expressible
from .host_steal import steal_meter
from .runner import WARMUP, _cpu_rank_env, step_times
from .user_model import load_factory


def runnable(c) -> str:
    """Why :func:`run_candidate` cannot run plan ``c`` ("" when it can)."""
    why = expressible(c)
    if why:
        return why
    if c.pp > 1 and c.dp > 1 and c.zero:
        return "pipeline with ZeRO: dist.parallelize's sharded optimizer beside pipeline stages fails on gloo " \
               "(see the module docstring)"
    return ""


def grad_error(grads: dict, ref: dict):
    """The largest gradient difference over the largest dense gradient element (None: no gradient):
    relative to the model's gradient scale, so a parameter whose gradient is near zero (a bias
    after a norm) does not turn float noise into a large relative error."""
    if not grads:
        return None
    scale = max(float(np.abs(g).max()) for g in ref.values()) or 1.0
    return max(float(np.abs(np.asarray(g, np.float64) - ref[n]).max()) for n, g in grads.items()) / scale


def _dense(spec: str, steps: int):
    um = load_factory(spec)
    opt = paddle.optimizer.AdamW(learning_rate=1e-3, parameters=um.layer.parameters())
    losses, grads = [], {}
    for step in range(steps):
        loss = um.step_loss()
        loss.backward()
        if step == 0:
            grads = {n: p.grad.numpy().copy() for n, p in um.layer.named_parameters() if p.grad is not None}
        opt.step()
        opt.clear_grad()
        losses.append(float(loss))
    return losses, grads


def train_rank(spec: str, cfg: dict, steps: int, check_steps: int = 3) -> dict:
    """One rank of plan ``cfg`` (the emitted JSON) on the model of ``spec``; returns
    ``{"rank", "losses", "step_ends", "peak_memory", "max_loss_error", "max_grad_error", "grads_checked"}``."""
    dist.init_parallel_env()
    um = load_factory(spec)
    names = [n for n, _ in um.layer.named_parameters()]
    opt = paddle.optimizer.AdamW(learning_rate=1e-3, parameters=um.layer.parameters())
    model, opt = apply_plan(um.layer, opt, cfg, paddle_ext.install)
    mesh = dist.auto_parallel.get_mesh()
    pp = mesh.get_dim_size("pp") if "pp" in mesh.dim_names else 1
    first = mesh.get_mesh_with_dim("pp", 0) if pp > 1 else mesh
    last = mesh.get_mesh_with_dim("pp", pp - 1) if pp > 1 else mesh
    inputs = [dist.shard_tensor(x, first, [dist.Shard(0), dist.Replicate()]) for x in um.inputs]
    labels = dist.shard_tensor(um.labels, last, [dist.Shard(0), dist.Replicate()])
    rank = dist.get_rank()
    losses, grads, ends = [], {}, []
    start = time.perf_counter()
    for step in range(steps):
        loss = um.loss(model(*inputs), labels)
        loss.backward()
        if step == 0:
            for n, p in zip(names, model.parameters()):
                if p.grad is not None and rank in p.grad.process_mesh.process_ids:
                    grads[n] = dist.unshard_dtensor(p.grad).numpy().copy()
        opt.step()
        opt.clear_grad()
        losses.append(float(loss) if rank in loss.process_mesh.process_ids else None)
        ends.append(time.perf_counter() - start)
    ref_losses, ref_grads = _dense(spec, min(steps, check_steps))
    held = [(a, b) for a, b in zip(losses, ref_losses) if a is not None]
    return {"rank": rank, "losses": losses, "step_ends": ends,
            "peak_memory": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "max_loss_error": max((abs(a - b) / max(abs(b), 1e-12) for a, b in held), default=None),
            "max_grad_error": grad_error(grads, ref_grads),
            "grads_checked": sorted(grads)}


def run_candidate(c, cfg: dict, spec: str, steps: int = 16, timeout: float = 600.0, lock: str | None = None,
                  log_dir=None) -> dict:
    """Run plan ``c`` (its emitted ``cfg``) of the model of ``spec``; ``{"measured_step_s",
    "measured_peak_bytes", "step_times", "losses", "max_loss_error", "max_grad_error",
    "grads_checked", "steal_fraction"}``."""
    stolen: dict = {}
    with optional_file_lock(lock), steal_meter(stolen):
        results = run_ranks(train_rank, nproc=c.pp * c.dp * c.tp, args=(spec, cfg, max(steps, WARMUP + 1)),
                            timeout=timeout, log_dir=log_dir, env=_cpu_rank_env(), teardown="warn", pin_cpus=True)
    ends = next(r for r in results if r["rank"] == 0)["step_ends"]
    diffs = step_times(ends)
    losses = next((r["losses"] for r in results if r["losses"][0] is not None), None)
    loss_err = [r["max_loss_error"] for r in results if r["max_loss_error"] is not None]
    grad_err = [r["max_grad_error"] for r in results if r["max_grad_error"] is not None]
    checked = sorted({n for r in results for n in r["grads_checked"]})
    return {"measured_step_s": statistics.median(diffs), "measured_peak_bytes": max(r["peak_memory"] for r in results),
            "step_times": diffs, "losses": losses, "max_loss_error": max(loss_err) if loss_err else None,
            "max_grad_error": max(grad_err) if grad_err else None, "grads_checked": len(checked), **stolen}


__all__ = ["grad_error", "run_candidate", "runnable", "train_rank"]
