"""Prove predictions by running a PaddleNLP auto model: a plan through the real-model runner.

``paddle-ext plan --model paddlenlp-gpt --run K`` hands each plan (the same
:class:`~paddle_ext.parallel_plan.ParallelPlan` the search ranked) to
:func:`paddle_ext.models.real_models.train_layout`, the runner of ``paddle-ext compat --models``:
PaddleNLP's own auto-parallel path (``fleet.auto.create_mesh``, ``LazyGuard``,
``dist.shard_dataloader``, ``dist.shard_optimizer``, the model's own placements) with every
paddle-ext opt-in on, in dygraph. That path has no pipeline runtime: pipeline parallelism is by
annotation (each stage's layers on its sub-mesh; every rank runs the whole forward, ranks
outside a stage skip its compute), i.e. one microbatch, every forward then every backward. So
the runnable plans are those without pipeline stages, and pipeline plans of one microbatch whose
schedule runs F then B per stage (FThenB, 1F1B, Eager1F1B at ``m = 1``), without ZeRO, with
PaddleNLP's stage split (``pp`` divides the layer count).

The step time is the median of rank 0's step-to-step times after ``WARMUP`` steps; the peak
memory is the largest per-rank peak RSS.
"""
from __future__ import annotations

import statistics

from ..launcher import run_ranks
from ..models.real_models import OUTSIDE_STATIC_MODE, train_layout
from .candidates import Candidate
from ..compat.native.cpp_build import optional_file_lock
from .host_steal import steal_meter
from .runner import _cpu_rank_env, step_times

# schedules that, at one microbatch on one chunk, are "every forward, then every backward"
F_THEN_B = ("FThenB", "1F1B", "Eager1F1B")
# the plan fields train_layout builds; a plan that sets another one is refused (ParallelPlan.unbuilt)
BUILDS = ("pp", "dp", "tp", "zero", "sp", "schedule", "chunks", "microbatches", "batch")


def model_key(model_name: str) -> str:
    """``paddlenlp-gpt`` -> ``gpt`` (the real-model runner's name)."""
    return model_name.split("-", 1)[1]


def runnable(c: Candidate, n_hidden_layers: int) -> str:
    """Why the real-model runner cannot run ``c`` ("" when it can)."""
    if c.unbuilt(BUILDS):
        return f"the PaddleNLP runner does not build {', '.join(c.unbuilt(BUILDS))}"
    if c.pp == 1:
        return ""
    if c.zero:
        return "the PaddleNLP runner runs ZeRO only without pipeline stages"
    if c.schedule not in F_THEN_B or c.microbatches != 1 or c.chunks != 1:
        return "PaddleNLP's pipeline by annotation runs one microbatch, every forward then every backward"
    if n_hidden_layers % c.pp:
        return f"PaddleNLP splits {n_hidden_layers} layers over pp stages evenly only"
    return ""


def run_candidate(c: Candidate, model_name: str, steps: int = 16, timeout: float = 600.0, lock: str | None = None,
                  log_dir=None) -> dict:
    """Run plan ``c`` on PaddleNLP's ``model_name``; ``{"measured_step_s", "measured_peak_bytes",
    "step_times", "losses", "steal_fraction"}``."""
    stolen: dict = {}
    with optional_file_lock(lock), steal_meter(stolen):
        results = run_ranks(train_layout, nproc=c.world_size,
                            args=(model_key(model_name), c, OUTSIDE_STATIC_MODE, "dygraph", steps),
                            timeout=timeout, log_dir=log_dir, env=_cpu_rank_env(), teardown="warn",
                            pin_cpus=True)   # as the demo's runner and the profile
    ends = next(r for r in results if r["rank"] == 0)["step_ends"]   # perf_counter readings
    diffs = step_times([e - ends[0] for e in ends])
    losses = next((r["losses"] for r in results if r.get("losses")), None)
    return {"measured_step_s": statistics.median(diffs), "measured_peak_bytes": max(r["peak_memory"] for r in results),
            "step_times": diffs, "losses": losses, **stolen}


__all__ = ["BUILDS", "F_THEN_B", "model_key", "runnable", "run_candidate"]
