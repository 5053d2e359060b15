"""A plan the planner ranks is the plan the demo and the PaddleNLP runner train.

The planner hands each runner its plan (the demo: the plan's text form in the run's config; the
PaddleNLP runner: the value itself); here the launch is intercepted and what each rank would
build is read back: the same plan, the same mesh (dims, shape, pipeline sub-mesh), ZeRO level,
sequence parallelism, schedule, microbatches and pipeline stages.
"""
from __future__ import annotations

import json
import os

import pytest

import paddle_ext.launcher
from paddle_ext.demo import plans as demo_plans
from paddle_ext.demo.pipeline import _sub_plan
from paddle_ext.demo.train import RunConfig, train_rank
from paddle_ext.models import real_models as rm
from paddle_ext.parallel_plan import parse_plan
from paddle_ext.plan import real_model_runner, runner
from paddle_ext.plan.candidates import enumerate_candidates

# the demo GPT's sizes (4 pipeline pieces, 4 heads, hidden 32, MLP 64, seq 16) and batch 8 on 4 ranks
DEMO_CANDIDATES = enumerate_candidates(4, 4, 32, 64, 16, 8, 4)
# the real-model tests' tiny PaddleNLP GPT: 2 layers (4 pieces), 4 heads, hidden 64, MLP 128, seq 16
NLP_CANDIDATES = enumerate_candidates(4, 4, 64, 128, 16, 8, 4)


def _demo_launches(monkeypatch, cands):
    """Run ``runner.run_candidate`` on each plan with the launch intercepted: [(plan, rank fn, nproc, run config)]."""
    seen = []

    def fake_run_ranks(fn, nproc, args, **kw):
        run = args[0]
        seen.append((fn, nproc, RunConfig(**run)))
        with open(run["progress_file"], "w") as f:
            f.writelines(json.dumps({"step": i, "loss": 1.0, "elapsed": 0.1 * (i + 1)}) + "\n" for i in range(4))
        return [{"rank": r, "losses": [1.0], "peak_memory": 1} for r in range(nproc)]

    monkeypatch.setattr(paddle_ext.launcher, "run_ranks", fake_run_ranks)
    out = []
    for c in cands:
        runner.run_candidate(c, {"n_layers": 2}, steps=4)
        out.append((c, *seen[-1]))
        # the step log's directory lives as long as the run: a plan search leaves nothing in /tmp
        assert not os.path.exists(os.path.dirname(seen[-1][2].progress_file)), c.name
    return out


def _mesh_degrees(mesh) -> dict:
    return dict(zip(mesh.dim_names, mesh.shape))


def test_the_demo_trains_every_runnable_plan_the_planner_ranked(monkeypatch):
    runnable = [c for c in DEMO_CANDIDATES if not runner.runnable(c, 4)]
    assert len(runnable) > 50 and any(c.pp > 1 for c in runnable) and any(c.zero for c in runnable)
    for c, fn, nproc, run in _demo_launches(monkeypatch, runnable):
        assert fn is train_rank and nproc == c.world_size
        plan = demo_plans.resolve(run.plan, run.schedule, run.microbatches, run.batch)   # what train_rank trains
        assert plan == c, (c.name, run)
        mesh = demo_plans.build_mesh(plan)
        assert _mesh_degrees(mesh) == {d: n for d, n in (("pp", c.pp), ("dp", c.dp), ("tp", c.tp)) if n > 1}
        assert mesh.dim_names == [d for d in ("pp", "dp", "tp") if d in mesh.dim_names]   # pp outermost
        stage = demo_plans.sharding_stage(plan, mesh)
        assert (type(stage).__name__ if stage else None) == (f"ShardingStage{c.zero}" if c.zero else None)


def test_a_pipeline_plan_builds_the_stages_the_planner_costed(monkeypatch):
    from paddle_ext.passes.runtime import stage_indices

    piped = [c for c in DEMO_CANDIDATES if c.pp > 1 and not runner.runnable(c, 4)]
    assert {c.schedule for c in piped} >= {"1F1B", "ZBV", "DualPipeV"}
    for c, _, _, run in _demo_launches(monkeypatch, piped):
        plan = demo_plans.resolve(run.plan, run.schedule, run.microbatches, run.batch)
        owned = [i for r in range(plan.pp) for i in stage_indices(plan.schedule, r, plan.pp, plan.chunks)]
        assert sorted(owned) == list(range(c.n_stages)), c.name
        sub = _sub_plan(plan)   # what each pipeline rank lays out on its own sub-mesh
        full = demo_plans.build_mesh(plan)
        if sub.world_size > 1:
            assert _mesh_degrees(full.get_mesh_with_dim("pp", 0)) == _mesh_degrees(demo_plans.build_mesh(sub))
        assert (sub.pp, sub.dp, sub.tp, sub.sp, sub.zero) == (1, c.dp, c.tp, c.sp, c.zero)


def test_the_paddlenlp_runner_trains_the_plan_the_planner_ranked(monkeypatch):
    seen = []

    def fake_run_ranks(fn, nproc, args, **kw):
        seen.append((fn, nproc, args))
        return [{"rank": r, "step_ends": [0.1 * i for i in range(6)], "losses": [1.0], "peak_memory": 1}
                for r in range(nproc)]

    monkeypatch.setattr(real_model_runner, "run_ranks", fake_run_ranks)
    runnable = [c for c in NLP_CANDIDATES if not real_model_runner.runnable(c, 2)]
    assert len(runnable) > 20
    for c in runnable:
        real_model_runner.run_candidate(c, "paddlenlp-gpt", steps=6)
        fn, nproc, (model, plan, _mode, exec_mode, steps) = seen[-1]
        assert fn is rm.train_layout and nproc == c.world_size and (model, exec_mode, steps) == ("gpt", "dygraph", 6)
        assert plan == c and parse_plan(str(plan), batch=plan.batch) == c
        # PaddleNLP's mesh (every dim, tp named mp) and the demo's (dims of degree > 1) agree
        nlp = dict(rm.mesh_degrees(plan))
        demo = _mesh_degrees(demo_plans.build_mesh(plan))
        assert {"pp": nlp["pp"], "dp": nlp["dp"], "tp": nlp["mp"]} == {d: demo.get(d, 1) for d in ("pp", "dp", "tp")}


@pytest.mark.parametrize("name", sorted(rm.PLANS))
def test_the_real_model_matrix_plans_are_plans_the_planner_names(name):
    plan = rm.PLANS[name]
    assert parse_plan(str(plan), batch=plan.batch) == plan
    if plan.world_size > 1:
        ranked = {c.layout for c in enumerate_candidates(4, 4, 64, 128, 16, 8, plan.world_size)}
        assert plan.layout in ranked
