"""The demo's plans: the documented ones, and the Paddle objects a plan builds (mesh, ZeRO stage).

A plan is a :class:`paddle_ext.parallel_plan.ParallelPlan`; its text form joins parts with ``-``,
each a strategy and its degree (``paddle-ext plan`` prints the same names):

=========  ==========================================================================
``dpN``    data parallel: the batch is split over N ranks (``Shard(0)`` on the input)
``zeroK``  data parallel on 2 ranks with ZeRO stage K (1, 2, 3) through ``dist.shard_optimizer``;
           ``zeroKdN`` (e.g. ``zero3d4``) for another data-parallel degree
``tpN``    tensor parallel: q/k/v, gate/up column-parallel (``Shard(1)``), o/down
           row-parallel (``Shard(0)``), with an explicit P->R all-reduce after row layers
``spN``    sequence parallel on the tensor-parallel ranks (needs ``tpN`` of the same N):
           activations between blocks are ``Shard(seq)``; norms run on the shard; an
           all-gather before q/k/v and gate/up, a reduce-scatter (P->S) after o and down
``ppN``    pipeline parallel over N stages with ``--schedule`` (one of paddle-ext's), or the
           plan's own ``:Schedule:mM`` part (e.g. ``pp2-tp2:ZBV:m4``)
=========  ==========================================================================

>>> p = parse_plan("zero3-tp2")
>>> str(p), p.mesh_dims, p.world_size, p.zero
('zero3d2-tp2', ('dp', 'tp'), 4, 3)
>>> parse_plan("sp2-tp2").degrees, parse_plan("sp2-tp2").sp
((('tp', 2),), True)
"""
from __future__ import annotations

from ..parallel_plan import ParallelPlan, PlanError
from ..parallel_plan import parse_plan as _parse

PLANS = {
    "dp2": "data parallel on 2 ranks",
    "tp2": "tensor parallel (column/row) on 2 ranks",
    "dp2-tp2": "2x2 mesh: data parallel x tensor parallel",
    "zero1-tp2": "2x2 mesh: ZeRO stage 1 on dp x tensor parallel",
    "zero2": "ZeRO stage 2 on 2 ranks",
    "zero3-tp2": "2x2 mesh: ZeRO stage 3 on dp x tensor parallel",
    "sp2-tp2": "tensor parallel with sequence-parallel norms on 2 ranks",
    "dp2-sp2-tp2": "2x2 mesh: data parallel x sequence+tensor parallel",
    "pp2": "pipeline parallel, 2 stages",
    "tp2-pp2": "2x2 mesh: tensor parallel x pipeline parallel",
    "dp2-pp2": "2x2 mesh: data parallel x pipeline parallel",
    "pp2-sp2-tp2": "2x2 mesh: pipeline parallel x sequence+tensor parallel",
}


def parse_plan(name: str, batch: int = 8) -> ParallelPlan:
    """Read a demo plan (:func:`paddle_ext.parallel_plan.parse_plan`); a plan on one rank, or a
    bad name, is a :class:`PlanError` that lists the documented plans."""
    known = ", ".join(PLANS)
    plan = _parse(name, batch=batch, hint=f"documented plans: {known}")
    if plan.world_size == 1:
        raise PlanError(f"plan {name!r} has no parallel part; use one of {known}")
    return plan


def resolve(text: str, schedule: str, microbatches: int, batch: int) -> ParallelPlan:
    """The plan a run trains: ``text`` with its own schedule part, else (a ``ppN`` plan without
    one) ``schedule`` at ``microbatches``; no schedule without pipeline parallelism."""
    plan = parse_plan(text, batch=batch)
    if plan.pp > 1 and plan.schedule is None:
        return plan.with_schedule(schedule, microbatches)
    return plan


def build_mesh(plan: ParallelPlan):
    """The ``dist.ProcessMesh`` of ``plan`` over ranks ``0..world-1``: its mesh dims (degree > 1)
    in the order ``pp``, ``dp``, ``tp``."""
    import numpy as np
    import paddle.distributed as dist

    return dist.ProcessMesh(np.arange(plan.world_size).reshape(plan.mesh_shape).tolist(),
                            dim_names=list(plan.mesh_dims))


def sharding_stage(plan: ParallelPlan, mesh):
    """The ``dist.ShardingStageK`` of ``plan``'s ZeRO level on the mesh dim "dp" (None without ZeRO)."""
    import paddle.distributed as dist

    stage = {1: dist.ShardingStage1, 2: dist.ShardingStage2, 3: dist.ShardingStage3}.get(plan.zero)
    return stage("dp", mesh) if stage else None


__all__ = ["PLANS", "ParallelPlan", "PlanError", "build_mesh", "parse_plan", "resolve", "sharding_stage"]
