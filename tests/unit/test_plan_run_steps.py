"""How ``paddle-ext plan --run`` measures each plan: about ``TIMED_S`` seconds of timed steps at
the plan's predicted step (so a fast plan is not judged on a shorter look at a noisy machine than
a slow one), or exactly ``--steps`` when given; its figure is its median pass's. The runner is
replaced by one that records what it was asked, so this needs no ranks."""
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


def _result(step, steps, n, peak_mib=400, steal=None):
    """What the runner returns for the ``n``-th run of a plan measuring ``step`` s a step."""
    result = {"measured_step_s": step, "measured_peak_bytes": peak_mib * 2 ** 20,
              "step_times": [step] * (steps - WARMUP), "losses": [float(n)]}
    if steal is not None:
        result["steal_fraction"] = steal
    return result


def _plan_json(tmp_path, monkeypatch, run, *args) -> dict:
    """``plan --model demo --nproc 2 ... --json`` with ``run(c, steps)`` in place of the runner;
    the plan.json it wrote."""
    monkeypatch.setattr(plan_cli, "_runner", lambda cli_args, model: ((lambda c: ""), run))
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps(PROFILE))
    out = tmp_path / "out"
    assert main(["plan", "--model", "demo", "--nproc", "2", "--profile", str(profile), *args,
                 "--json", "--out", str(out)]) == 0
    return json.loads((out / "plan.json").read_text())


def _run(tmp_path, monkeypatch, *extra, per_pass=(0.05,), steal=None):
    """``plan --run 3`` (2 passes unless ``extra`` says) with a runner whose n-th run of a plan
    measures ``per_pass[n]`` seconds a step, peaks at 400 MiB + n MiB and, given ``steal``, says
    the host took ``steal[n]`` of the CPU time meanwhile."""
    asked = []

    def run(c, steps):
        n = sum(1 for name, _ in asked if name == c.name) % len(per_pass)
        asked.append((c.name, steps))
        return _result(per_pass[n], steps, n, 400 + n, None if steal is None else steal[n])

    repeat = [] if "--repeat" in extra else ["--repeat", "2"]
    doc = _plan_json(tmp_path, monkeypatch, run, "--run", "3", *repeat, *extra)
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


def test_a_plans_figure_is_its_median_pass(tmp_path, monkeypatch, capsys):
    """Three passes at 50, 90 and 60 ms: 60 ms and that pass's own steps and losses, not the
    fastest pass (a fast spell of the machine favours whichever plan it meets); the peak memory
    is the largest of all passes."""
    asked, run = _run(tmp_path, monkeypatch, "--repeat", "3", per_pass=(0.05, 0.09, 0.06))
    assert len(asked) == 9
    for p in run:
        assert p["measured_step_s_passes"] == [0.05, 0.09, 0.06]
        assert p["measured_step_s"] == 0.06 and set(p["step_times"]) == {0.06} and p["losses"] == [2.0]
        assert p["measured_peak_bytes"] == 402 * 2 ** 20
        assert p["measured_steal_passes"] == [None, None, None]   # the fake runner measured no steal


def test_passes_the_host_took_leave_the_median(tmp_path, monkeypatch, capsys):
    """Passes at 50, 90, 60, 130 ms; the second and fourth lost 8% and 20% of the CPU time to the
    host: the figure is the median of the other two (50 ms, the lower middle), and the command says
    so; the peak memory still counts every pass."""
    asked, run = _run(tmp_path, monkeypatch, "--repeat", "4", per_pass=(0.05, 0.09, 0.06, 0.13),
                      steal=(0.001, 0.08, 0.0, 0.2))
    for p in run:
        assert p["measured_passes_used"] == [0, 2]
        assert p["measured_step_s"] == 0.05 and p["losses"] == [0.0]
        assert p["measured_peak_bytes"] == 403 * 2 ** 20
        assert p["measured_steal_passes"] == [0.001, 0.08, 0.0, 0.2]


def test_when_every_pass_was_stolen_all_of_them_count(tmp_path, monkeypatch, capsys):
    """No pass is left out when none is clean: a figure from a noisy host, with the note, beats none."""
    asked, run = _run(tmp_path, monkeypatch, "--repeat", "3", per_pass=(0.05, 0.09, 0.06),
                      steal=(0.1, 0.2, 0.3))
    for p in run:
        assert p["measured_passes_used"] == [0, 1, 2] and p["measured_step_s"] == 0.06


def _run_paced(tmp_path, monkeypatch, base_of, pace, noise=None, steal=None):
    """``plan --run 5 --repeat 3``: plan ``i`` (in the order first run) measures ``base_of[i] *
    pace[pass]`` (times ``noise[i][pass]`` if given): a machine whose pace moves between passes."""
    order, asked = [], []

    def run(c, steps):
        if c.name not in order:
            order.append(c.name)
        i = order.index(c.name)
        n = sum(1 for name in asked if name == c.name)
        asked.append(c.name)
        step = base_of[i] * pace[n] * (noise[i][n] if noise else 1.0)
        return _result(step, steps, n, steal=None if steal is None else steal[i][n])

    doc = _plan_json(tmp_path, monkeypatch, run, "--run", "5", "--repeat", "3")
    measured = {p["name"]: p for p in doc["plans"] if p["measured_step_s"] is not None}
    return doc["run"], [measured[name] for name in order]


def test_a_pass_that_runs_every_plan_slower_moves_no_plans_figure(tmp_path, monkeypatch, capsys):
    """The machine at 0.8x, 1.25x and 1.0x its pace in the three passes, the plans at 10-30 ms
    apart from that: each plan's figure is its own step at the run's mean pace (1.0 here, as the
    geometric mean of the paces is 1), whichever pass is its median."""
    base = [0.010, 0.015, 0.020, 0.025, 0.030]
    run, plans = _run_paced(tmp_path, monkeypatch, base, (0.8, 1.25, 1.0))
    assert run["pass_paces"] == pytest.approx([0.8, 1.25, 1.0])
    for b, p in zip(base, plans):
        assert p["measured_step_s"] == pytest.approx(b)
        assert p["measured_step_s_passes"] == pytest.approx([b * 0.8, b * 1.25, b])
        assert p["measured_step_s_unpaced"] in p["measured_step_s_passes"]   # the raw step of the pass chosen


def test_pacing_keeps_what_a_plan_does_differently_from_the_pass(tmp_path, monkeypatch, capsys):
    """On a machine at 0.5x, 1x and 2x, plan 0 is 1.5x slow in one pass alone and plan 1 in two:
    plan 0's figure is its usual step (its median paced pass), plan 1's the 1.5x one."""
    base = [0.010, 0.012, 0.014, 0.016, 0.018]
    noise = [[1.0, 1.5, 1.0], [1.5, 1.0, 1.5]] + [[1.0] * 3] * 3
    run, plans = _run_paced(tmp_path, monkeypatch, base, (0.5, 1.0, 2.0), noise=noise)
    # each pass holds one 1.5x plan, so the paces are the machine's own: 0.5, 1 and 2
    assert run["pass_paces"] == pytest.approx([0.5, 1.0, 2.0])
    assert plans[0]["measured_step_s"] == pytest.approx(0.010)
    assert plans[1]["measured_step_s"] == pytest.approx(0.012 * 1.5)
    assert [p["measured_step_s"] for p in plans[2:]] == pytest.approx(base[2:])


def test_a_stolen_pass_still_leaves_the_paced_median(tmp_path, monkeypatch, capsys):
    """Plan 2's second pass lost 30% of the CPU to the host: its figure is the median of its
    other two paced passes (the lower middle), the others' of all three."""
    base = [0.010, 0.015, 0.020, 0.025, 0.030]
    steal = [[0.0] * 3, [0.0] * 3, [0.0, 0.3, 0.0], [0.0] * 3, [0.0] * 3]
    noise = [[1.0] * 3, [1.0] * 3, [1.1, 3.0, 1.0], [1.0] * 3, [1.0] * 3]
    run, plans = _run_paced(tmp_path, monkeypatch, base, (1.0, 1.0, 1.0), noise=noise, steal=steal)
    assert plans[2]["measured_passes_used"] == [0, 2] and plans[0]["measured_passes_used"] == [0, 1, 2]
    assert plans[2]["measured_step_s"] == pytest.approx(0.020 * 1.0 / run["pass_paces"][2])


def test_fewer_than_four_plans_are_not_paced(tmp_path, monkeypatch, capsys):
    asked, run = _run(tmp_path, monkeypatch, "--repeat", "3", per_pass=(0.05, 0.09, 0.06))
    assert all(p["measured_step_s"] == p["measured_step_s_unpaced"] == 0.06 for p in run)
