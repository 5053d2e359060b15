"""Rank functions for the reshard multi-rank tests (run through paddle_ext.testing.run_ranks)."""
from __future__ import annotations

import itertools

import numpy as np

from paddle_ext.reshard.checks import Case, run_cases
from paddle_ext.reshard.matrix_cases import (MESH_2x2, ONE_D, SHAPES, cross_cases,  # noqa: F401
                                             one_d_cases, two_d_cases)


def ext_cases(cases):
    """paddle-ext reshard of every case on this rank."""
    import paddle.distributed as dist
    import paddle_ext

    if not dist.is_initialized():  # a user's script joins the gloo world and turns paddle-ext on
        dist.init_parallel_env()
    paddle_ext.install()

    return run_cases(cases, native=False)


GRAD_PAIRS = [("[S(0)]", "[R]"), ("[R]", "[S(1)]"), ("[S(0)]", "[S(1)]"), ("[P(sum)]", "[R]"),
              ("[P(sum)]", "[S(0)]"), ("[P(avg)]", "[S(1)]"), ("[S(1)]", "[S(0)]")]


def grad_checks(shapes=((4, 6), (5, 7))):
    """d/dx sum(reshard(x)^2) = 2x: the gradient goes back through the reverse plan."""
    import paddle
    import paddle.distributed as dist

    from paddle_ext.reshard.checks import make_source, specs
    from paddle_ext.reshard.dygraph import placements_of, reshard
    from paddle_ext.compat.ports.convert import to_paddle_placements
    from paddle_ext.placements import format_placements

    n = dist.get_world_size()
    mesh_ids = tuple(range(n))
    out = {}
    for shape in shapes:
        for a, b in GRAD_PAIRS:
            case = Case(f"grad:{shape}:{a}->{b}", shape, mesh_ids, a, mesh_ids, b)
            _, dst, _, _ = specs(case)
            x = make_source(case)
            x.stop_gradient = False
            mesh = dist.ProcessMesh(list(mesh_ids))
            y = reshard(x, mesh, to_paddle_placements(dst.placements))
            (y * y).sum().backward()
            g = reshard(x.grad, mesh, [dist.Replicate()])
            out[case.id] = (g._local_value().numpy(), format_placements(placements_of(x.grad)))
    return out


def error_checks():
    """Bad requests raise ReshardPlanError on every rank before any data moves; x is untouched."""
    import paddle
    import paddle.distributed as dist

    from paddle_ext.errors import ReshardPlanError
    from paddle_ext.reshard.checks import make_source
    from paddle_ext.reshard.dygraph import reshard

    n, rank = dist.get_world_size(), dist.get_rank()
    mesh = dist.ProcessMesh(list(range(n)))
    case = Case("e", (4, 6), tuple(range(n)), "[S(0)]", tuple(range(n)), "[R]")
    x = make_source(case)
    before = x._local_value().numpy().copy()
    results = {}
    bad = {
        "too many placements": (mesh, [dist.Shard(0), dist.Replicate()]),
        "shard dim beyond rank": (mesh, [dist.Shard(2)]),
        "rank outside job": (dist.ProcessMesh(list(range(n + 2))), [dist.Replicate()] * 1),
    }
    for name, (m, pl) in bad.items():
        try:
            reshard(x, m, pl)
            results[name] = "no error"
        except ReshardPlanError as exc:
            results[name] = str(exc)
    # a rank with a different global shape: detected by the metadata exchange on every rank
    odd = Case("e2", (4, 6) if rank else (6, 6), tuple(range(n)), "[S(0)]", tuple(range(n)), "[R]")
    try:
        reshard(make_source(odd), mesh, [dist.Replicate()])
        results["shape mismatch"] = "no error"
    except ReshardPlanError as exc:
        results["shape mismatch"] = str(exc)
    untouched = bool((x._local_value().numpy() == before).all())
    # the ranks are still in step: a real reshard works afterwards
    y = reshard(x, mesh, [dist.Replicate()])
    return results, untouched, y._local_value().numpy()


def _mlp(paddle, seed):
    paddle.seed(seed)
    return paddle.nn.Sequential(paddle.nn.Linear(8, 16), paddle.nn.ReLU(), paddle.nn.Linear(16, 4))


def sharding_stage_checks(steps: int = 4):
    """shard_optimizer with ShardingStage1/2/3 on CPU (paddle-ext reshard installed) vs AdamW.

    Returns per stage: the losses, the single-process reference losses, and per-rank bytes of
    the gradients (after backward) and parameters (after step) this rank holds.
    """
    import paddle
    import paddle.distributed as dist
    import paddle.nn.functional as F

    from paddle_ext.reshard.dygraph import placements_of, reshard
    from paddle_ext.reshard.install import install_reshard, uninstall_reshard
    from paddle_ext.placements import format_placements

    rank, n = dist.get_rank(), dist.get_world_size()
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((8, 8)).astype("float32") for _ in range(steps)]
    ys = [rng.standard_normal((8, 4)).astype("float32") for _ in range(steps)]

    ref_model = _mlp(paddle, 7)  # single-process reference on the full batches
    ref_opt = paddle.optimizer.AdamW(0.01, parameters=ref_model.parameters())
    ref = []
    for x, y in zip(xs, ys):
        loss = F.mse_loss(ref_model(paddle.to_tensor(x)), paddle.to_tensor(y))
        loss.backward()
        ref_opt.step()
        ref_opt.clear_grad()
        ref.append(float(loss))

    mesh = dist.ProcessMesh(list(range(n)), dim_names=["dp"])
    install_reshard()
    out = {}
    try:
        for name in ("ShardingStage1", "ShardingStage2", "ShardingStage3"):
            model = _mlp(paddle, 7)
            opt = dist.shard_optimizer(paddle.optimizer.AdamW(0.01, parameters=model.parameters()),
                                       getattr(dist, name)("dp", mesh))
            losses, grad_bytes, grad_pl = [], 0, set()
            rows = 8 // n
            for x, y in zip(xs, ys):
                xl = paddle.to_tensor(x[rank * rows:(rank + 1) * rows])
                yl = paddle.to_tensor(y[rank * rows:(rank + 1) * rows])
                from paddle.distributed.auto_parallel.api import dtensor_from_local

                xd = dtensor_from_local(xl, mesh, [dist.Shard(0)])
                yd = dtensor_from_local(yl, mesh, [dist.Shard(0)])
                loss = F.mse_loss(model(xd), yd)
                loss.backward()
                grads = [p.main_grad if getattr(p, "main_grad", None) is not None else p.grad
                         for p in model.parameters()]
                grad_bytes = sum(int(np.prod(g._local_value().shape)) * 4 if g.is_dist() else
                                 int(np.prod(g.shape)) * 4 for g in grads if g is not None)
                grad_pl = {format_placements(placements_of(g)) for g in grads if g is not None and g.is_dist()}
                opt.step()
                opt.clear_grad()
                lr = reshard(loss, mesh, [dist.Replicate()]) if loss.is_dist() else loss
                losses.append(float(lr._local_value() if lr.is_dist() else lr))
            params = list(model.parameters())
            param_bytes = sum(int(np.prod(p._local_value().shape)) * 4 if p.is_dist() else
                              int(np.prod(p.shape)) * 4 for p in params)
            full_bytes = sum(int(np.prod(p.shape)) * 4 for p in params)
            out[name] = {"losses": losses, "grad_bytes": grad_bytes, "param_bytes": param_bytes,
                         "full_bytes": full_bytes, "grad_placements": sorted(grad_pl),
                         "param_placements": sorted({format_placements(placements_of(p))
                                                     for p in params if p.is_dist()})}
    finally:
        uninstall_reshard()
    return ref, out


def suite_2ranks(cases):
    """Everything the 2-rank test checks, in one launch."""
    import paddle.distributed as dist
    import paddle_ext

    dist.init_parallel_env()  # a user's script joins the gloo world and turns paddle-ext on
    paddle_ext.install()

    return {"cases": ext_cases(cases), "grads": grad_checks(), "errors": error_checks(),
            "sharding": sharding_stage_checks()}
