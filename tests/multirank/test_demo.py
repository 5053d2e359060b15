"""The demo: every documented plan matches the single-process run; bad requests fail cleanly."""
import subprocess
import sys

import numpy as np
import pytest

import demo_ranks
from paddle_ext.demo.plans import PLANS, parse_plan
from paddle_ext.demo.train import RunConfig, reference_losses
from paddle_ext.testing import run_ranks

pytestmark = pytest.mark.multirank
STEPS = 3


# the 4-rank plans are the long tail (the default demo, a 4-rank plan, runs in CI end to end)
@pytest.mark.parametrize("world", [pytest.param(w, marks=pytest.mark.long_tail) if w == 4 else w
                                   for w in sorted({parse_plan(p).world_size for p in PLANS})])
def test_every_documented_plan_matches_dense(world, tmp_path):
    plans = [p for p in PLANS if parse_plan(p).world_size == world]
    results = run_ranks(demo_ranks.run_plans, nproc=world, args=(plans, STEPS, "ZBV"), timeout=600,
                        log_dir=tmp_path / "log")
    ref = reference_losses(RunConfig(steps=STEPS))
    for plan in plans:
        for rank, per_rank in enumerate(results):
            got = per_rank[plan]
            assert not isinstance(got, str), f"{plan} on rank {rank}: {got}"
            np.testing.assert_allclose(got, ref, rtol=1e-4, err_msg=f"{plan} on rank {rank}")


def test_an_odd_world_plan_matches_dense(tmp_path):
    """sp3-tp3 on 3 ranks: odd groups and the model sized so every width splits in three."""
    proc = _demo("--plan", "sp3-tp3", "--steps", "3", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "on 3 CPU ranks" in proc.stdout
    assert float(proc.stdout.strip().splitlines()[-1].split("=")[1]) <= 1e-6


def _demo(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "paddle_ext", "demo", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_default_demo_cli_end_to_end(tmp_path):
    out = tmp_path / "out"
    proc = _demo("--steps", "3", "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("max_rel_loss_diff=") and float(last.split("=")[1]) <= 1e-4
    assert "replication audit: 0 op call(s)" in proc.stdout
    for name in ("results.json", "audit.txt", "schedule_ZBV.png", "logs"):
        assert (out / name).exists(), name


@pytest.mark.parametrize("args, needle", [
    (["--plan", "dp2-tp3x"], "cannot read 'tp3x'"),
    (["--plan", "dp2-tp2", "--nproc", "8"], "runs on exactly 4 ranks"),
    (["--plan", "pp2", "--schedule", "NoSuchSchedule"], "NoSuchSchedule"),
    (["--plan", "pp2", "--microbatches", "3"], "does not divide the batch"),
])
def test_bad_requests_fail_before_launch(args, needle, tmp_path):
    proc = _demo(*args, "--out", str(tmp_path), timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert needle in proc.stderr, proc.stderr
    assert not (tmp_path / "logs").exists()  # refused before any rank was launched


def test_failing_rank_ends_the_demo(tmp_path):
    proc = _demo("--plan", "tp2", "--steps", "2", "--inject-fault", "1", "--timeout", "120", "--out", str(tmp_path))
    assert proc.returncode == 1
    assert "rank 1 raised" in proc.stderr and "injected fault on rank 1" in proc.stderr, proc.stderr[-2000:]
    assert "rank 0 timeout" not in proc.stderr and "rank 1 timeout" not in proc.stderr  # bounded by the fault
