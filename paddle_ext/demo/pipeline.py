"""Pipeline plans of the demo: the GPT's layers split into stages run by a paddle-ext schedule.

The mesh is ``[pp, (dp), (tp)]``. Each rank builds the stages its schedule places on its pipeline
rank (V shape for ZBV/DualPipeV, interleaved for VPP-like schedules), shards their parameters
over its own sub-mesh (the ``dp``/``tp`` dims of its pipeline rank) exactly as the non-pipeline
plans do, and runs ``paddle_ext.passes.runtime.get_schedule(name)``. The loss of a microbatch
is its mean token loss divided by the number of microbatches, so the microbatch gradients add up
to the gradient of the global mean loss the reference run minimises.
"""
from __future__ import annotations

import numpy as np

from .model import build_model, lm_loss
from .plans import ParallelPlan, PlanError, build_mesh
from .sharding import placements, shard_model


def _sub_plan(plan: ParallelPlan) -> ParallelPlan:
    """The plan a pipeline rank applies on its own sub-mesh: everything but ``pp`` and the schedule."""
    return ParallelPlan(dp=plan.dp, tp=plan.tp, zero=plan.zero, sp=plan.sp, batch=plan.batch)


def _value(t) -> float:
    import paddle.distributed as dist

    if t.is_dist():
        t = dist.reshard(t, t.process_mesh, [dist.Replicate()] * len(t.process_mesh.shape))
    return float(np.asarray(t.numpy()).reshape(-1)[0])


class PipelineParallel:
    """A GPT split into pipeline stages on this rank's part of the mesh, with its schedule and
    optimizer; ``train_step`` runs one global batch and returns the global mean loss. ``plan``
    names the schedule and microbatches (``plan.with_schedule("1F1B", 4)`` gives a ``ppN`` plan one)."""

    def __init__(self, plan: ParallelPlan, mcfg, seed: int, lr: float):
        import paddle
        import paddle.distributed as dist

        from ..compat.ports.pipelining import pipeline_stage_class
        from ..passes.runtime import get_schedule, pipeline_group, split_model, stage_indices
        from ..reshard import prepare_reshard_groups

        if plan.zero:
            raise ValueError(f"plan {plan.name}: ZeRO with pipeline parallelism is not a demo plan; "
                             f"use zeroK with dp/tp plans, or ppN with dpN/tpN")
        if plan.schedule is None:
            raise PlanError(f"plan {plan.name} names no schedule: give it one, e.g. "
                             f"plan.with_schedule('1F1B', 4) or the text {plan.layout}:1F1B:m4")
        schedule, microbatches, v = plan.schedule, plan.microbatches, plan.chunks
        self.plan, self.p = plan, plan.pp
        n_stages = self.p * v
        mesh = build_mesh(plan)
        dist.auto_parallel.set_mesh(mesh)
        group = pipeline_group(mesh, "pp")
        prepare_reshard_groups(mesh)  # reshards inside a stage talk only within the stage's sub-mesh
        rank = dist.get_rank()
        pp_rank = int(np.argwhere(np.array(mesh.process_ids).reshape(mesh.shape) == rank)[0][0])
        self.sub_plan = _sub_plan(plan)
        self.sub_mesh = mesh.get_mesh_with_dim("pp", pp_rank) if self.sub_plan.degrees else None
        self.model = build_model(mcfg, seed)
        if self.sub_mesh is not None:
            shard_model(self.model, self.sub_plan, self.sub_mesh)
        pieces = split_model(self.model.layers(), n_stages)
        self.mine = stage_indices(schedule, pp_rank, self.p, v)
        stages = [pipeline_stage_class()(pieces[i], i, n_stages, group=group) for i in self.mine]

        def loss_fn(logits, targets):
            return lm_loss(logits, targets) * (1.0 / microbatches)

        self.schedule = get_schedule(schedule)(stages if len(stages) > 1 else stages[0], microbatches,
                                               loss_fn=loss_fn)
        self.params = [q for i in self.mine for q in pieces[i].parameters()]
        opt = paddle.optimizer.AdamW(lr, parameters=self.params)
        # data parallel inside a stage: parameter gradients come out P(sum) over dp
        self.optimizer = dist.shard_optimizer(opt) if self.sub_mesh is not None else opt
        self.first, self.last = 0 in self.mine, n_stages - 1 in self.mine

    def _input(self, array):
        import paddle
        import paddle.distributed as dist


        t = paddle.to_tensor(array)
        if self.sub_mesh is None:
            return t
        return dist.shard_tensor(t, self.sub_mesh, placements(self.sub_plan, dp=dist.Shard(0)))

    def train_step(self, x, y) -> float:
        import paddle
        import paddle.distributed as dist

        mb_losses = []
        args = (self._input(x),) if self.first else ()
        kwargs = {"target": self._input(y), "losses": mb_losses} if self.last else {}
        self.schedule.step(*args, **kwargs)
        self.optimizer.step()
        self.optimizer.clear_grad()
        total = paddle.to_tensor([sum(_value(t) for t in mb_losses) if self.last else 0.0], dtype="float32")
        dist.all_reduce(total)  # every rank holding the last stage has the global loss
        return float(total.numpy()[0]) / (self.plan.world_size // self.p)

    def state_dict(self) -> dict:
        """This rank's stages' parameters under the whole model's names (for dist.save_state_dict)."""
        mine = {id(q) for q in self.params}
        return {k: v for k, v in self.model.state_dict().items() if id(v) in mine}
