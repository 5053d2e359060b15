"""The plan ``paddle-ext plan`` emits for a user's model, applied by a fresh script on 4 gloo ranks.

The example MLP-Mixer (``examples/plan_my_model.py``) is traced and planned for 4 ranks; the
chosen plan (and a pipeline plan) is emitted as ``plan.json``; a fresh script that imports only
Paddle, ``paddle_ext.apply_plan`` and the example's factory applies it with ``dist.parallelize``
and trains with SGD. Every rank's losses and every parameter's first-step gradient (gathered with
``dist.unshard_dtensor`` on the ranks of its mesh) must equal the dense model's, trained in the
same process from the same factory."""
import ast
import json
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from paddle_ext.launcher import run_ranks
from paddle_ext.parallel_plan import parse_plan
from paddle_ext.plan.emit import expressible
from paddle_ext.plan.user_plan import emit_plan

pytestmark = pytest.mark.multirank
ROOT = Path(__file__).resolve().parents[2]

FRESH_SCRIPT = textwrap.dedent('''
    """Apply an emitted plan; train the dense model beside it (imports Paddle and apply_plan only)."""
    import paddle
    import paddle.distributed as dist

    from paddle_ext import apply_plan
    from examples.plan_my_model import build


    def dense(steps, lr):
        model, (x, y), loss_fn = build()
        opt = paddle.optimizer.SGD(learning_rate=lr, parameters=model.parameters())
        losses, grads = [], None
        for step in range(steps):
            loss = loss_fn(model(x), y)
            loss.backward()
            if step == 0:
                grads = {n: p.grad.numpy().copy() for n, p in model.named_parameters()}
            opt.step()
            opt.clear_grad()
            losses.append(float(loss))
        return losses, grads


    def parallel(plan, steps, lr):
        dist.init_parallel_env()
        model, (x, y), loss_fn = build()
        names = [n for n, _ in model.named_parameters()]
        opt = paddle.optimizer.SGD(learning_rate=lr, parameters=model.parameters())
        model, opt = apply_plan(model, opt, plan)
        mesh = dist.auto_parallel.get_mesh()
        first = mesh.get_mesh_with_dim("pp", 0) if "pp" in mesh.dim_names else mesh
        last = mesh.get_mesh_with_dim("pp", mesh.get_dim_size("pp") - 1) if "pp" in mesh.dim_names else mesh
        x = dist.shard_tensor(x, first, [dist.Shard(0), dist.Replicate()])
        y = dist.shard_tensor(y, last, [dist.Shard(0), dist.Replicate()])
        rank = dist.get_rank()
        layout = {n: (list(p.process_mesh.process_ids), str(p.placements)) for n, p in zip(names, model.parameters())}
        losses, grads = [], {}
        for step in range(steps):
            loss = loss_fn(model(x), y)
            loss.backward()
            if step == 0:
                for n, p in zip(names, model.parameters()):
                    if p.grad is not None and rank in p.grad.process_mesh.process_ids:
                        grads[n] = dist.unshard_dtensor(p.grad).numpy().copy()
            opt.step()
            opt.clear_grad()
            losses.append(float(loss) if rank in loss.process_mesh.process_ids else None)
        return losses, grads, layout


    def check(plan, steps=3, lr=0.1):
        ref = dense(steps, lr)
        got = parallel(plan, steps, lr)
        return {"rank": dist.get_rank(), "losses": got[0], "grads": got[1], "layout": got[2],
                "dense_losses": ref[0], "dense_grads": ref[1]}
''')


def _imports(text: str) -> set:
    out = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


@pytest.fixture(scope="module")
def planned():
    sys.path.insert(0, str(ROOT))
    import examples.plan_my_model as ex

    return ex.plan(4)


def _chosen(result):
    return next(p.candidate for p in result.plans if not expressible(p.candidate))


@pytest.mark.parametrize("which", ["chosen", "pp2-tp2:1F1B:m1"])
def test_emitted_plan_applied_by_a_fresh_script_equals_dense(planned, which, tmp_path, monkeypatch):
    trace, result = planned
    plan = _chosen(result) if which == "chosen" else parse_plan(which, batch=8)
    plan_json, _ = emit_plan(trace, plan, tmp_path / "emit")
    script = tmp_path / "fresh_apply_check.py"
    script.write_text(FRESH_SCRIPT)
    assert _imports(FRESH_SCRIPT) == {"paddle", "paddle.distributed", "paddle_ext.apply_plan",
                                      "examples.plan_my_model.build"}
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(ROOT))
    import fresh_apply_check

    results = run_ranks(fresh_apply_check.check, nproc=4, args=(str(plan_json),), timeout=300,
                        log_dir=tmp_path / "log")
    # the plan was applied: Linears split as the config says, blocks on their stage's ranks
    layout = results[0]["layout"]
    for i in range(4):
        mesh, placements = layout[f"blocks.{i}.token_fc1.weight"]
        assert ("Shard(dim=1)" in placements) == (plan.tp > 1), placements
        assert ("Shard(dim=0)" in layout[f"blocks.{i}.channel_fc2.weight"][1]) == (plan.tp > 1)
        stage = i // 2 if plan.pp == 2 else 0
        assert mesh == list(range(stage * 4 // plan.pp, (stage + 1) * 4 // plan.pp)), (i, mesh)
    dense_losses, dense_grads = results[0]["dense_losses"], results[0]["dense_grads"]
    assert len(dense_losses) == 3 and dense_losses[2] < dense_losses[0]     # it trains
    seen = set()
    for r in results:
        got = [x for x in r["losses"] if x is not None]
        if plan.pp == 1:
            assert got, f"{plan.name}: rank {r['rank']} holds no loss"
        if got:
            np.testing.assert_allclose(got, dense_losses, rtol=1e-5, err_msg=f"{plan.name} rank {r['rank']}")
        for name, grad in r["grads"].items():
            np.testing.assert_allclose(grad, dense_grads[name], rtol=1e-4, atol=1e-6,
                                       err_msg=f"{plan.name} rank {r['rank']} {name}")
            seen.add(name)
    assert seen == set(dense_grads), f"parameters no rank held: {set(dense_grads) - seen}"
    if plan.pp > 1:   # the loss lives on the last stage only
        assert [r["losses"][0] is not None for r in results] == [False] * (4 - 4 // plan.pp) + [True] * (4 // plan.pp)


def test_the_emitted_script_trains_with_the_losses_of_plan_run(planned, tmp_path, monkeypatch):
    """``--emit``'s own ``apply_plan.py`` (Paddle and ``apply_plan`` only, no ``install()``), run on
    the plan's ranks, gives the losses ``plan --run`` measured for the same plan (its rank
    function, ``user_runner.train_rank``: AdamW at the same rate, the same factory batch)."""
    from paddle_ext.plan.user_runner import train_rank

    trace, result = planned
    plan = _chosen(result)
    plan_json, script = emit_plan(trace, plan, tmp_path / "emit")
    assert _imports(script.read_text()) == {"paddle", "paddle.distributed", "paddle_ext.apply_plan",
                                            "examples.plan_my_model.build"}
    monkeypatch.syspath_prepend(str(tmp_path / "emit"))
    monkeypatch.syspath_prepend(str(ROOT))
    import apply_plan as emitted

    world = plan.pp * plan.dp * plan.tp
    got = run_ranks(emitted.train, nproc=world, args=(3,), timeout=300, log_dir=tmp_path / "emitted")
    ran = run_ranks(train_rank, nproc=world, args=("examples.plan_my_model:build", json.loads(plan_json.read_text()), 3),
                    timeout=300, log_dir=tmp_path / "run")
    run_losses = next(r["losses"] for r in ran if r["losses"][0] is not None)
    holders = [losses for losses in got if losses]
    assert holders, f"{plan.name}: no rank of the emitted script held the loss"
    for losses in holders:
        np.testing.assert_allclose(losses, run_losses, rtol=1e-6, err_msg=plan.name)
    assert run_losses[2] < run_losses[0]   # it trains
