"""Pipeline plans of the demo: the GPT's layers split into stages run by a paddle-ext schedule.

The mesh is ``[pp, (dp), (tp)]``. Each rank builds the stages its schedule places on its pipeline
rank (V shape for ZBV/DualPipeV, interleaved for VPP-like schedules), shards their parameters
over its own sub-mesh (the ``dp``/``tp`` dims of its pipeline rank) exactly as the non-pipeline
plans do, and runs ``paddle_ext.passes.runtime.get_schedule(name)``. The loss of a microbatch
is its mean token loss divided by the number of microbatches, so the microbatch gradients add up
to the gradient of the global mean loss the reference run minimises.
"""
from __future__ import annotations

import time

import numpy as np

from .data import make_batches
from .model import build_model, lm_loss
from .plans import Plan


def _sub_plan(plan: Plan) -> Plan:
    """The plan a pipeline rank applies on its own sub-mesh: everything but ``pp``."""
    return Plan(name=plan.name, degrees=tuple((d, n) for d, n in plan.degrees if d != "pp"),
                zero_stage=plan.zero_stage, sequence_parallel=plan.sequence_parallel)


def _value(t) -> float:
    import paddle.distributed as dist

    if t.is_dist():
        t = dist.reshard(t, t.process_mesh, [dist.Replicate()] * len(t.process_mesh.shape))
    return float(np.asarray(t.numpy()).reshape(-1)[0])


def train_pipeline_rank(cfg, mcfg, plan: Plan) -> dict:
    """One rank of a pipeline plan; returns what :func:`train.train_rank` returns."""
    import paddle
    import paddle.distributed as dist

    from ..passes.runtime import get_schedule, pipeline_group, split_model, stage_indices
    from ..reshard import prepare_reshard_groups
    from ..compat.pipelining import pipeline_stage_class
    from ..passes.schedules import get_schedule_info
    from .comm_stats import count_collectives
    from .train import _peak_memory_bytes, _placements, _report, _shard_model

    if plan.zero_stage:
        raise ValueError(f"plan {plan.name}: ZeRO with pipeline parallelism is not a demo plan; "
                         f"use zeroK with dp/tp plans, or ppN with dpN/tpN")
    p = plan.degree("pp")
    info = get_schedule_info(cfg.schedule)
    v = info.default_chunks
    n_stages = p * v
    mesh = dist.ProcessMesh(np.arange(plan.world_size).reshape(plan.mesh_shape).tolist(),
                            dim_names=list(plan.mesh_dims))
    dist.auto_parallel.set_mesh(mesh)
    group = pipeline_group(mesh, "pp")
    prepare_reshard_groups(mesh)  # reshards inside a stage talk only within the stage's sub-mesh
    rank = dist.get_rank()
    coord = np.argwhere(np.array(mesh.process_ids).reshape(mesh.shape) == rank)[0]
    pp_rank = int(coord[0])
    sub_plan = _sub_plan(plan)
    model = build_model(mcfg, cfg.seed)
    if sub_plan.degrees:
        sub_mesh = mesh.get_mesh_with_dim("pp", pp_rank)
        _shard_model(model, sub_plan, sub_mesh)
    pieces = split_model(model.layers(), n_stages)
    mine = stage_indices(cfg.schedule, pp_rank, p, v)
    stage_cls = pipeline_stage_class()
    stages = [stage_cls(pieces[i], i, n_stages, group=group) for i in mine]
    m = cfg.microbatches

    def loss_fn(logits, targets):
        return lm_loss(logits, targets) * (1.0 / m)

    schedule = get_schedule(cfg.schedule)(stages if len(stages) > 1 else stages[0], m, loss_fn=loss_fn)
    params = [q for i in mine for q in pieces[i].parameters()]
    opt = paddle.optimizer.AdamW(cfg.lr, parameters=params)
    first, last = 0 in mine, n_stages - 1 in mine
    losses = []
    start = time.perf_counter()

    def as_input(array):
        t = paddle.to_tensor(array)
        if sub_plan.degrees:
            return dist.shard_tensor(t, sub_mesh, _placements(sub_plan))
        return t

    with count_collectives() as stats:
        for step, (x, y) in enumerate(make_batches(cfg.steps, cfg.batch, mcfg.seq_len, mcfg.vocab, cfg.seed)):
            mb_losses = []
            args = (as_input(x),) if first else ()
            kwargs = {"target": as_input(y), "losses": mb_losses} if last else {}
            schedule.step(*args, **kwargs)
            opt.step()
            opt.clear_grad()
            total = paddle.to_tensor([sum(_value(t) for t in mb_losses) if last else 0.0], dtype="float32")
            dist.all_reduce(total)  # every rank holding the last stage has the global loss
            value = float(total.numpy()[0]) / (plan.world_size // p)
            losses.append(value)
            if rank == 0:
                _report(cfg.progress_file, {"step": step, "loss": value, "elapsed": time.perf_counter() - start})
    return {"rank": rank, "losses": losses, "peak_memory": _peak_memory_bytes(),
            "collectives": {k: dict(val) for k, val in stats.items()},
            "stages": list(mine), "schedule": cfg.schedule}
