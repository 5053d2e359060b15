"""Rank function running several demo plans of one world size in one launch.

Per plan: the demo's own training (its losses), then the gradient probe: the plan's layout built
again from the same seed, test-side (the demo's mesh, ``shard_model`` and ``shard_optimizer``
wrapping, or its pipeline stages and schedule), with SGD instead of AdamW, for one step; per
parameter its initial value, first-step gradient and value after the step, as each rank holds
them (``scenario_ranks_train.sgd_probe``). For the plans of ``MUTATE`` the probe runs a second
time with one gradient scaled by 2 and another by 0.5 (the test of the tests).
"""
import numpy as np

from paddle_ext.demo.train import train_rank

PROBE_LR = 64.0   # a power of two (lr * grad is exact); the update -lr * grad then stands far above
                 # the float32 rounding of the weight it is added to (the attention weights' gradients are small)
# plan -> {parameter: (factor, when)}: the test of the tests, on dp, tp and ZeRO plans
MUTATE = {
    "dp2": {"blocks.0.attn.q.weight": (2.0, "grad"), "head.proj.weight": (0.5, "grad")},
    "tp2": {"blocks.1.mlp.up.weight": (2.0, "grad"), "blocks.0.attn.o.weight": (0.5, "grad")},
    "zero2": {"embed.tok.weight": (2.0, "grad"), "blocks.1.norm2.weight": (0.5, "step")},
}


def _probe(plan_name, schedule, scales):
    """One SGD step of ``plan_name``'s layout: {init:/grad:/step1:<param>: rec} of this rank's parameters."""
    import paddle
    import paddle.distributed as dist

    from paddle_ext.demo.data import make_batches
    from paddle_ext.demo.model import build_model, lm_loss
    from paddle_ext.demo.pipeline import PipelineParallel
    from paddle_ext.demo.plans import parse_plan
    from paddle_ext.demo.sharding import placements, shard_model
    from paddle_ext.demo.train import RunConfig, model_for
    from scenario_ranks_train import sgd_probe

    cfg, plan = RunConfig(plan=plan_name), parse_plan(plan_name)
    mcfg = model_for(plan)
    x, y = make_batches(1, cfg.batch, mcfg.seq_len, mcfg.vocab, cfg.seed)[0]
    if plan.degree("pp") > 1:
        pp = PipelineParallel(plan.with_schedule(schedule, cfg.microbatches), mcfg, cfg.seed, cfg.lr)
        opt = paddle.optimizer.SGD(PROBE_LR, parameters=pp.params)
        opt = dist.shard_optimizer(opt) if pp.sub_mesh is not None else opt
        mine = {id(q) for q in pp.params}
        named = [(n, q) for n, q in pp.model.named_parameters() if id(q) in mine]

        def backward():
            args = (pp._input(x),) if pp.first else ()
            kwargs = {"target": pp._input(y), "losses": []} if pp.last else {}
            pp.schedule.step(*args, **kwargs)
    else:
        mesh = dist.ProcessMesh(np.arange(plan.world_size).reshape(plan.mesh_shape).tolist(),
                                dim_names=list(plan.mesh_dims))
        model = shard_model(build_model(mcfg, cfg.seed), plan, mesh)
        opt = paddle.optimizer.SGD(PROBE_LR, parameters=model.parameters())
        if plan.zero:
            stage = getattr(dist, f"ShardingStage{plan.zero}")
            opt = dist.shard_optimizer(opt, stage("dp", mesh))
        else:
            opt = dist.shard_optimizer(opt)
        named = list(model.named_parameters())

        def batch(a):
            return dist.shard_tensor(paddle.to_tensor(a), mesh, placements(plan, dp=dist.Shard(0)))

        def backward():
            lm_loss(model(batch(x)), batch(y)).backward()
    return sgd_probe(named, backward, opt, True, scales)


def run_plans(plans, steps, schedule):
    """{plan: {"losses": [...], "probe": {...}, "mutated": {...} (plans of MUTATE)}} or {plan: error}."""
    out = {}
    for plan in plans:
        try:
            out[plan] = {"losses": train_rank({"plan": plan, "steps": steps, "schedule": schedule})["losses"],
                         "probe": _probe(plan, schedule, {})}
            if plan in MUTATE:
                out[plan]["mutated"] = _probe(plan, schedule, MUTATE[plan])
        except Exception as exc:  # noqa: BLE001 - report which plan failed, keep the others
            out[plan] = f"{type(exc).__name__}: {exc}"
    return out
