"""One rank's training loop under a plan, and the single-process reference it is compared with.

Both build the same GPT from the same seed and read the same batches; the reference runs dense
in one process. Every rank returns its per-step losses (the global mean loss, identical on all
ranks), its peak memory and the bytes its collectives were handed.
"""
from __future__ import annotations

import json
import resource
import time
from dataclasses import asdict, dataclass

import numpy as np

from .data import make_batches
from .model import GPTConfig, build_model, lm_loss
from .pipeline import PipelineParallel
from .plans import ParallelPlan, build_mesh, parse_plan, resolve, sharding_stage
from .sharding import placements as _placements
from .sharding import shard_model as _shard_model


@dataclass(frozen=True)
class RunConfig:
    """One run: ``plan`` is a plan's text form; a ``ppN`` plan without its own ``:Schedule:mM``
    part runs ``schedule`` at ``microbatches`` (:func:`.plans.resolve`)."""

    plan: str = "dp2-tp2"
    schedule: str = "1F1B"
    steps: int = 20
    batch: int = 8
    microbatches: int = 4
    seed: int = 0
    lr: float = 1e-2
    progress_file: str | None = None
    enable_rules: bool = True  # paddle_ext.enable(): rules for the ops Paddle would replicate
    fault_rank: int | None = None  # tests: this rank raises at step 1 (a failing rank must end the job)


def model_for(plan: ParallelPlan) -> GPTConfig:
    """The demo GPT for ``plan``: the default one when every tensor-parallel degree divides its
    widths (d_model, heads, d_ff, sequence), else the same shape family scaled by the degree
    ``k``: d_model 16k, 2k heads, d_ff 32k, sequence 6k (so ``sp3-tp3`` trains evenly).

    >>> from .plans import parse_plan
    >>> model_for(parse_plan("sp2-tp2")) == GPTConfig(), model_for(parse_plan("sp3-tp3")).d_model
    (True, 48)
    """
    base = GPTConfig()
    k = plan.degree("tp")
    if all(v % k == 0 for v in (base.d_model, base.n_heads, base.d_ff, base.seq_len)):
        return base
    return GPTConfig(vocab=base.vocab, seq_len=6 * k, d_model=16 * k, n_heads=2 * k, d_ff=32 * k,
                     n_layers=base.n_layers)


def reference_losses(cfg: RunConfig, model_cfg: GPTConfig | None = None) -> list[float]:
    """Dense single-process training: the numbers every plan must reproduce."""
    import paddle

    model_cfg = model_cfg or model_for(parse_plan(cfg.plan))
    model = build_model(model_cfg, cfg.seed)
    opt = paddle.optimizer.AdamW(cfg.lr, parameters=model.parameters())
    losses = []
    for x, y in make_batches(cfg.steps, cfg.batch, model_cfg.seq_len, model_cfg.vocab, cfg.seed):
        loss = lm_loss(model(paddle.to_tensor(x)), paddle.to_tensor(y))
        loss.backward()
        opt.step()
        opt.clear_grad()
        losses.append(float(loss.numpy()))
    return losses


def _optimizer(model, plan: ParallelPlan, mesh, lr: float):
    import paddle
    import paddle.distributed as dist

    opt = paddle.optimizer.AdamW(lr, parameters=model.parameters())
    return dist.shard_optimizer(opt, sharding_stage(plan, mesh))


@dataclass
class Parallel:
    """A GPT laid out on a mesh under a plan, with its optimizer: one ``train_step`` per batch."""

    plan: ParallelPlan
    mesh: object
    model: object
    optimizer: object

    def shard_batch(self, array):
        import paddle
        import paddle.distributed as dist

        return dist.shard_tensor(paddle.to_tensor(array), self.mesh, _placements(self.plan, dp=dist.Shard(0)))

    def train_step(self, x, y) -> float:
        """Forward, backward and optimizer step on one global batch; returns the global mean loss."""
        import paddle.distributed as dist

        loss = lm_loss(self.model(self.shard_batch(x)), self.shard_batch(y))
        loss.backward()
        self.optimizer.step()
        self.optimizer.clear_grad()
        return float(np.asarray(dist.reshard(loss, self.mesh, _placements(self.plan)).numpy()).reshape(-1)[0])


def setup_parallel(plan: ParallelPlan, mcfg: GPTConfig, seed: int, lr: float) -> Parallel:
    """Build the GPT from ``seed``, shard it for ``plan`` on a mesh of all ranks, wrap the optimizer."""
    mesh = build_mesh(plan)
    model = _shard_model(build_model(mcfg, seed), plan, mesh)
    return Parallel(plan, mesh, model, _optimizer(model, plan, mesh, lr))


def _peak_memory_bytes() -> int:
    import paddle

    if paddle.is_compiled_with_cuda() and paddle.device.cuda.device_count():
        return int(paddle.device.cuda.max_memory_allocated())
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _report(progress_file, record):
    if progress_file:
        with open(progress_file, "a") as f:
            f.write(json.dumps(record) + "\n")


def train_rank(run: dict, model_cfg: dict | None = None) -> dict:
    """Run on every rank: build, shard, train ``steps`` steps; return losses, memory, bytes."""
    import paddle.distributed as dist

    import paddle_ext
    from ..dispatch import audit

    from .comm_stats import count_collectives

    if not dist.is_initialized():  # as a user's script: join the gloo world, turn paddle-ext on
        dist.init_parallel_env()
    paddle_ext.install()
    cfg = RunConfig(**run)
    if cfg.enable_rules:
        paddle_ext.enable()
    if cfg.fault_rank is not None and dist.get_rank() == cfg.fault_rank:
        raise RuntimeError(f"injected fault on rank {cfg.fault_rank} (paddle-ext demo --inject-fault)")
    plan = resolve(cfg.plan, cfg.schedule, cfg.microbatches, cfg.batch)
    mcfg = GPTConfig(**model_cfg) if model_cfg else model_for(plan)
    if dist.get_world_size() != plan.world_size:
        raise ValueError(f"plan {plan.name} needs {plan.world_size} ranks, this job has {dist.get_world_size()}")
    if plan.pp > 1:
        parallel = PipelineParallel(plan, mcfg, cfg.seed, cfg.lr)
    else:
        parallel = setup_parallel(plan, mcfg, cfg.seed, cfg.lr)
    rank = dist.get_rank()
    losses = []
    start = time.perf_counter()
    with count_collectives() as stats, audit() as report:
        for step, (x, y) in enumerate(make_batches(cfg.steps, cfg.batch, mcfg.seq_len, mcfg.vocab, cfg.seed)):
            value = parallel.train_step(x, y)
            losses.append(value)
            if rank == 0:
                _report(cfg.progress_file, {"step": step, "loss": value, "elapsed": time.perf_counter() - start})
    return {"rank": rank, "losses": losses, "peak_memory": _peak_memory_bytes(),
            "collectives": {k: dict(v) for k, v in stats.items()}, "run": asdict(cfg),
            "stages": list(getattr(parallel, "mine", ())),
            "audit": report.text(), "audit_count": report.count}
