"""``paddle-ext plan --engine static``: plans predicted as the static Engine runs them
(paddle_ext/plan/static_engine_cost.py): the Engine's cost per job, message and hand-off from the
profile's ``static_engine`` section, and none of what only the dygraph runtime pays."""
from __future__ import annotations

import pytest

from paddle_ext.errors import PaddleExtError
from paddle_ext.passes.sim_model import Costs
from paddle_ext.passes.static.job_model import StaticCosts, simulate_static
from paddle_ext.plan.candidates import Candidate, enumerate_candidates
from paddle_ext.plan.errors import ProfileError
from paddle_ext.plan.model_desc import gpt_family
from paddle_ext.plan.predict import predict
from paddle_ext.plan.profile_data import COLLECTIVE_KINDS, Profile
from paddle_ext.plan.search import search, to_json
from paddle_ext.plan.stage_cost import stage_costs
from paddle_ext.plan.static_engine_cost import StaticRuntime, static_runtime, static_view

MODEL = gpt_family(hidden=8, heads=2, ffn=16, seq=2, vocab=8, layers=4)
FREE = {"alpha_s": 0.0, "s_per_byte": 0.0}


def profile(job=0.0, message=0.0, latency=0.0, **extra) -> Profile:
    """Matmuls at 1 flop/s, other ops and collectives free, and the static Engine's runtime."""
    data = {"source": "static engine test", "matmul": {"rate_flops_per_s": 1.0},
            "elementwise": {"fwd": {"alpha_s": 0, "s_per_elem": 0}, "bwd": {"alpha_s": 0, "s_per_elem": 0}},
            "optimizer": {"alpha_s_per_tensor": 0.0, "s_per_elem": 0.0},
            "collectives": {k: {"any": FREE} for k in COLLECTIVE_KINDS},
            "static_engine": {"job_s": job, "message_s": message, "latency_s": latency}}
    data.update(extra)
    return Profile.from_json(data)


def static_predict(c: Candidate, prof: Profile):
    return predict(MODEL, c, static_view(prof), memo={}, static=static_runtime(prof))


def test_the_pipeline_is_the_static_engines_simulation():
    """The predicted pipeline of a static plan is simulate_static's makespan over the plan's own
    stage costs, jobs, messages and hand-off (built here by hand from the job model)."""
    prof = profile(job=30.0, message=5.0, latency=40.0)
    for schedule, chunks in (("1F1B", 1), ("ZBV", 2), ("VPP", 2), ("ZBH1", 1)):
        c = Candidate(pp=2, schedule=schedule, microbatches=4, chunks=chunks, batch=4)
        stages = stage_costs(MODEL, c, static_view(prof), None)
        want = simulate_static(schedule, 2, 4, chunks, paddle_pass=schedule in ("1F1B", "VPP"),
                               costs=StaticCosts(1, 1, 1, job=30.0, message=5.0, latency=40.0),
                               stage_costs={s: Costs(st.forward, st.backward_input, st.backward_weight)
                                            for s, st in enumerate(stages)})
        p = static_predict(c, prof)
        assert p.simulated
        assert p.step_s == pytest.approx(want.makespan), schedule


def test_each_job_costs_more_where_a_schedule_runs_more_jobs():
    """ZBV runs about three times FThenB's jobs per rank (its V crosses the ranks four times per
    micro-batch, the backward splits in two): the Engine's fixed cost per job lengthens its step
    about twice as fast as FThenB's, so the ranking of schedules moves with the profile."""
    fthenb = Candidate(pp=2, schedule="FThenB", microbatches=8, batch=8)
    zbv = Candidate(pp=2, schedule="ZBV", microbatches=8, chunks=2, batch=8)
    steps = {}
    for job in (0.0, 1000.0):
        prof = profile(job=job)
        steps[job] = (static_predict(fthenb, prof).step_s, static_predict(zbv, prof).step_s)
    per_job = [(steps[1000.0][k] - steps[0.0][k]) / 1000.0 for k in (0, 1)]
    # on the critical path: FThenB's 16 compute jobs and the last stage's loss job at least;
    # ZBV's 8 x (F, F, I, W, I, W) on rank 0 less what overlaps the other rank's
    assert 17 <= per_job[0] < 24 and per_job[1] > 1.5 * per_job[0], per_job
    assert steps[1000.0][1] / steps[1000.0][0] > steps[0.0][1] / steps[0.0][0]


def test_dygraph_only_costs_are_left_out():
    """The dispatch per op call and the dygraph runtime's cost per action raise the dygraph
    prediction of a TP pipeline plan; the static Engine's is the same without them."""
    c = Candidate(pp=2, tp=2, schedule="1F1B", microbatches=4, batch=4)
    plain = profile(job=1.0)
    dear = profile(job=1.0, dispatch={"dist_op_s": 50.0}, pipeline={"action_s": 70.0})
    assert predict(MODEL, c, dear).step_s > predict(MODEL, c, plain).step_s + 100.0
    assert static_predict(c, dear).step_s == pytest.approx(static_predict(c, plain).step_s)


@pytest.mark.parametrize("runtime", [{"job": 0.0}, {"job": 30.0, "message": 10.0, "latency": 80.0}])
def test_lower_bound_never_exceeds_the_static_step(runtime):
    """The search's branch and bound is sound for static plans too: every pipeline plan's bound
    is at most its simulated static step."""
    prof = profile(**runtime)
    view, rt = static_view(prof), static_runtime(prof)
    cands = [c for c in enumerate_candidates(4, 2, 8, 16, 2, 8, 4, max_microbatches=8) if c.pp > 1]
    assert len({c.schedule for c in cands}) >= 10
    memo: dict = {}
    for c in cands:
        bound = predict(MODEL, c, view, memo=memo, lower_bound=True, static=rt)
        exact = predict(MODEL, c, view, memo=memo, static=rt)
        assert bound.step_s <= exact.step_s * (1 + 1e-9), (c.name, bound.step_s, exact.step_s)


def test_search_says_its_engine_and_keeps_paddles_passes_apart():
    """One row per distinct static plan: at one micro-batch FThenB and 1F1B run the same actions
    by Paddle's passes (one row), Eager1F1B the same actions by paddle-ext's (a row of its own)."""
    r = search(MODEL, profile(job=5.0), 2, schedules=["FThenB", "1F1B", "Eager1F1B"], exact=10_000,
               engine="static")
    assert to_json(r)["engine"] == "static"
    at_one = [p for p in r.plans if p.candidate.pp == 2 and p.candidate.microbatches == 1 and p.candidate.dp == 1]
    paddle_rows = [p for p in at_one if p.candidate.schedule in ("FThenB", "1F1B")]
    assert len(paddle_rows) == 1 and len(paddle_rows[0].same_as) == 1
    assert [p.candidate.schedule for p in at_one if p.candidate.schedule == "Eager1F1B"] == ["Eager1F1B"]


def test_a_profile_without_the_static_section_says_how_to_measure_it():
    prof = Profile.from_json({k: v for k, v in profile().data.items() if k != "static_engine"})
    with pytest.raises(ProfileError, match=r"paddle-ext profile --static"):
        search(MODEL, prof, 2, engine="static")
    with pytest.raises(ProfileError, match=r"static_engine.job_s = -1.0 must be seconds >= 0"):
        static_runtime(profile(job=-1.0))
    with pytest.raises(PaddleExtError, match=r"say dygraph .* or static"):
        search(MODEL, profile(), 2, engine="compiled")
    assert static_runtime(profile(job=1e-4, message=2e-5, latency=3e-4)) == StaticRuntime(1e-4, 2e-5, 3e-4)
    bad = profile()
    bad.data["static_engine"]["recv"] = "early"
    with pytest.raises(ProfileError, match=r"static_engine.recv = 'early' must be one of \['ahead', 'rendezvous'\]"):
        static_runtime(bad)


def test_the_profile_says_how_receives_were_posted_and_the_plan_follows_it():
    """A message sent before its receive is asked for: with receives posted ahead it is there
    (no hand-off after the later post), so the same plan is never slower and here faster; a
    profile without ``recv`` was measured with receives posted by their ops."""
    rendezvous, ahead = profile(job=1e-3, latency=2.0), profile(job=1e-3, latency=2.0)
    ahead.data["static_engine"]["recv"] = "ahead"
    assert static_runtime(rendezvous).recv == "rendezvous" and static_runtime(ahead).recv == "ahead"
    c = Candidate(dp=1, tp=1, pp=2, microbatches=4, schedule="ZBV", chunks=2)
    slow, fast = static_predict(c, rendezvous).step_s, static_predict(c, ahead).step_s
    assert fast < slow, (fast, slow)


def test_the_cli_refuses_to_run_static_plans_with_the_dygraph_runner(tmp_path, capsys):
    import json

    from paddle_ext.cli.main import main

    path = tmp_path / "p.json"
    path.write_text(json.dumps(profile().data))
    code = main(["plan", "--nproc", "2", "--profile", str(path), "--engine", "static", "--run", "1",
                 "--out", str(tmp_path / "out")])
    assert code != 0
    assert "--engine static ranks plans for dist.to_static; --run runs" in capsys.readouterr().err
    assert not (tmp_path / "out" / "plan.json").exists()


def test_the_cli_ranks_static_plans(tmp_path, capsys):
    import json

    from paddle_ext.cli.main import main

    path = tmp_path / "p.json"
    path.write_text(json.dumps(profile(job=1.0).data))
    assert main(["plan", "--nproc", "2", "--profile", str(path), "--engine", "static", "--json",
                 "--layers", "4", "--hidden", "8", "--heads", "2", "--seq", "2", "--vocab", "8", "--ffn", "16",
                 "--out", str(tmp_path / "out")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["engine"] == "static" and doc["plans"]
    steps = [p["predicted_step_s"] for p in doc["plans"]]
    assert steps == sorted(steps)
