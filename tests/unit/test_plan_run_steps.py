"""How many steps ``paddle-ext plan --run`` gives each plan: about ``TIMED_S`` seconds of timed
steps at the plan's predicted step (so a fast plan is not judged on a shorter look at a noisy
machine than a slow one), or exactly ``--steps`` when given. The runner is replaced by one that
records what it was asked, so this needs no ranks."""
import json

import pytest

from paddle_ext.cli import plan as plan_cli
from paddle_ext.cli.main import main
from paddle_ext.plan.profile_data import COLLECTIVE_KINDS
from paddle_ext.plan.runner import MAX_STEPS, MIN_STEPS, TIMED_S, WARMUP, steps_for

PROFILE = {"source": "test: hand-written unit costs", "matmul": {"rate_flops_per_s": 1e9, "alpha_s": 1e-5},
           "elementwise": {"fwd": {"alpha_s": 1e-5, "s_per_elem": 1e-9}, "bwd": {"alpha_s": 1e-5, "s_per_elem": 1e-9}},
           "dispatch": {"dist_op_s": 1e-4}, "optimizer": {"alpha_s_per_tensor": 1e-4, "s_per_elem": 1e-9},
           "collectives": {k: {"any": {"alpha_s": 1e-3, "s_per_byte": 1e-9}} for k in COLLECTIVE_KINDS},
           "memory": {"process_base_bytes": 300 * 2 ** 20}}


def test_steps_for_covers_the_timed_seconds_within_bounds():
    for step_s in (0.004, 0.02, 0.035, 0.1, 0.25):
        n = steps_for(step_s)
        assert MIN_STEPS <= n <= MAX_STEPS
        if MIN_STEPS < n < MAX_STEPS:   # the timed steps (after the warm-up) cover TIMED_S, one step more would not be needed
            assert (n - WARMUP) * step_s >= TIMED_S > (n - WARMUP - 1) * step_s
    assert steps_for(10.0) == MIN_STEPS and steps_for(1e-6) == MAX_STEPS
    assert steps_for(0.02) > steps_for(0.1)          # the faster plan runs more steps


def _run(tmp_path, monkeypatch, *extra):
    asked = []

    def fake_runner(args, model):
        def run(c, steps):
            asked.append((c.name, steps))
            times = [0.05] * (steps - WARMUP)
            return {"measured_step_s": 0.05, "measured_peak_bytes": 400 * 2 ** 20, "step_times": times, "losses": []}
        return (lambda c: ""), run

    monkeypatch.setattr(plan_cli, "_runner", fake_runner)
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps(PROFILE))
    out = tmp_path / "out"
    assert main(["plan", "--model", "demo", "--nproc", "2", "--profile", str(profile), "--run", "3", "--repeat", "2",
                 "--json", "--out", str(out), *extra]) == 0
    doc = json.loads((out / "plan.json").read_text())
    return asked, [p for p in doc["plans"] if p["measured_step_s"] is not None]


def test_each_plan_gets_steps_for_its_predicted_step(tmp_path, monkeypatch, capsys):
    asked, run = _run(tmp_path, monkeypatch)
    assert len(run) == 3 and len(asked) == 6                  # 3 plans, 2 passes
    for p in run:
        assert p["steps"] == steps_for(p["predicted_step_s"])
        assert [s for name, s in asked if name == p["name"]] == [p["steps"]] * 2


@pytest.mark.parametrize("steps", ["5", "40"])
def test_steps_given_are_the_steps_run(tmp_path, monkeypatch, capsys, steps):
    asked, run = _run(tmp_path, monkeypatch, "--steps", steps)
    assert {s for _, s in asked} == {int(steps)} and all(p["steps"] == int(steps) for p in run)
