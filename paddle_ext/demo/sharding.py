"""How the demo lays its GPT out on a mesh: parameter placements and the blocks' reshards.

Used by the one-mesh runner (:mod:`.train`) and by each pipeline stage (:mod:`.pipeline`).
"""
from __future__ import annotations

from .plans import ParallelPlan

# the plan fields the demo builds (mesh, ZeRO, sequence parallelism, pipeline): a plan that sets
# another one is refused by the planner's runner (ParallelPlan.unbuilt), never run without it
BUILDS = ("pp", "dp", "tp", "zero", "sp", "schedule", "chunks", "microbatches", "batch")


def placements(plan: ParallelPlan, **by_dim):
    """One placement per mesh dim: ``by_dim`` gives some (e.g. tp=Shard(1)); the rest Replicate."""
    import paddle.distributed as dist

    return [by_dim.get(d, dist.Replicate()) for d in plan.mesh_dims]


def shard_model(model, plan: ParallelPlan, mesh):
    """Lay the GPT's parameters out on ``mesh`` and set the blocks' enter/exit reshards."""
    import paddle.distributed as dist

    reshard = dist.reshard  # paddle_ext.install() routes the transitions Paddle lacks to paddle-ext
    tp = plan.degree("tp") > 1
    column = ("attn.q", "attn.k", "attn.v", "mlp.gate", "mlp.up")
    row = ("attn.o", "mlp.down")

    def shard_fn(name, layer, process_mesh):
        if tp and any(name.endswith(c) for c in column):
            layer.weight = dist.shard_tensor(layer.weight, process_mesh, placements(plan, tp=dist.Shard(1)))
        elif tp and any(name.endswith(r) for r in row):
            layer.weight = dist.shard_tensor(layer.weight, process_mesh, placements(plan, tp=dist.Shard(0)))

    dist.shard_layer(model, mesh, shard_fn)
    if not tp:
        return model
    replicated = placements(plan)
    if plan.sp:
        seq = placements(plan, tp=dist.Shard(1), dp=dist.Shard(0))
        full = placements(plan, dp=dist.Shard(0))
        model.embed.exit = lambda t: reshard(t, mesh, seq)          # R -> S(seq): local slice
        model.head.enter = lambda t: reshard(t, mesh, full)         # S(seq) -> R: all-gather
        for block in model.blocks:
            block.enter = lambda t: reshard(t, mesh, full)          # all-gather the sequence
            block.exit = lambda t: reshard(t, mesh, seq)            # P -> S(seq): reduce-scatter
    else:
        full = placements(plan, dp=dist.Shard(0)) if plan.degree("dp") > 1 else replicated
        for block in model.blocks:
            block.exit = lambda t: reshard(t, mesh, full)           # P -> R: all-reduce
    return model


__all__ = ["placements", "shard_model"]
