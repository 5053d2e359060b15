"""Prove predictions by running: a plan through the demo's runner on CPU ranks (an adapter).

Each plan runs :func:`paddle_ext.demo.train.train_rank` (the runner ``paddle-ext demo`` uses)
through :func:`paddle_ext.launcher.run_ranks` with the described model's sizes; the run's plan is
the plan's text form (mesh, ZeRO, schedule, microbatches) and its batch, which the demo reads
back into the same :class:`~paddle_ext.parallel_plan.ParallelPlan`. The step time is the median
of rank 0's step-to-step times after ``warmup`` steps (from the runner's progress records); the
peak memory is the largest per-rank peak the runner reports (``ru_maxrss`` on CPU, the
allocator's peak on GPU). Each rank is bound to one CPU (``run_ranks(pin_cpus=True)``): with 4
ranks on 2 CPUs, which ranks share a CPU is then the same in every run and in the profile, not
the scheduler's choice of the moment.
"""
from __future__ import annotations

import json
import math
import statistics
import tempfile
from pathlib import Path

from ..compat.native.cpp_build import optional_file_lock
from ..demo.sharding import BUILDS
from .candidates import Candidate
from .host_steal import steal_meter

WARMUP = 2
TIMED_S = 8.0
MIN_STEPS, MAX_STEPS = 32, 512


def steps_for(predicted_step_s: float, timed_s: float = TIMED_S) -> int:
    """Steps for about ``timed_s`` seconds of timed steps at ``predicted_step_s``, plus the warm-up,
    within ``MIN_STEPS``..``MAX_STEPS``."""
    wanted = WARMUP + math.ceil(timed_s / max(predicted_step_s, 1e-9))
    return max(MIN_STEPS, min(MAX_STEPS, wanted))


def runnable(c: Candidate, n_layers: int) -> str:
    """Why the demo's runner cannot run ``c`` ("" when it can)."""
    if c.unbuilt(BUILDS):
        return f"the demo does not build {', '.join(c.unbuilt(BUILDS))}"
    if c.pp > 1 and c.zero:
        return "the demo runs ZeRO only without pipelining"
    if c.n_stages > n_layers:
        return f"{c.n_stages} stages for {n_layers} pieces"
    return ""


def run_candidate(c: Candidate, model_config: dict, steps: int = 6, timeout: float = 600.0, lock: str | None = None,
                  log_dir=None) -> dict:
    """Run plan ``c``; ``{"measured_step_s", "measured_peak_bytes", "step_times", "losses",
    "steal_fraction"}`` (the share of CPU time the host took meanwhile, :mod:`.host_steal`)."""
    from ..demo.train import RunConfig, train_rank
    from ..launcher import run_ranks

    env = _cpu_rank_env()
    stolen: dict = {}
    # the ranks' step log lives only as long as the run: a plan search runs many candidates
    with tempfile.TemporaryDirectory(prefix="paddle_ext_plan_run_") as work:
        progress = Path(work) / "progress.jsonl"
        run = RunConfig(plan=c.name, schedule=c.schedule or "1F1B", steps=steps, batch=c.batch,
                        microbatches=c.microbatches, progress_file=str(progress))
        with optional_file_lock(lock), steal_meter(stolen):
            results = run_ranks(train_rank, nproc=c.world_size, args=(run.__dict__, dict(model_config)),
                                timeout=timeout, log_dir=log_dir, env=env, teardown="warn", pin_cpus=True)
        lines = progress.read_text().splitlines()
    elapsed = [json.loads(line)["elapsed"] for line in lines if line.strip()]
    diffs = step_times(elapsed)
    return {"measured_step_s": statistics.median(diffs), "measured_peak_bytes": max(r["peak_memory"] for r in results),
            "step_times": diffs, "losses": results[0]["losses"], **stolen}


def step_times(ends: list) -> list:
    """Step-to-step times after ``WARMUP`` steps from each step's end time (seconds since the
    run started: the first step's end alone when there is nothing after the warm-up)."""
    return [b - a for a, b in zip(ends, ends[1:])][WARMUP - 1:] or [ends[-1]]


def _cpu_rank_env() -> dict:
    """CPU ranks on gloo: nothing to set on a CPU build; a CUDA build is told to use no GPU."""
    import paddle

    return {"PADDLE_DISTRI_BACKEND": "gloo", "CUDA_VISIBLE_DEVICES": ""} if paddle.is_compiled_with_cuda() else {}


__all__ = ["MAX_STEPS", "MIN_STEPS", "TIMED_S", "runnable", "run_candidate", "step_times", "steps_for"]
