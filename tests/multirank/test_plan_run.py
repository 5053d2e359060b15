"""``paddle-ext plan --run 2``: the two best plans of the demo on 2 ranks run through the demo's
runner and get measured step times and peak memory beside their predictions."""
import json
import subprocess
import sys

import numpy as np
import pytest

from paddle_ext.demo.train import RunConfig, reference_losses
from paddle_ext.plan.profile_data import COLLECTIVE_KINDS

pytestmark = pytest.mark.multirank

# a hand-written profile: the run needs no measured one to pick and launch plans
PROFILE = {"source": "test: hand-written unit costs", "matmul": {"rate_flops_per_s": 1e9, "alpha_s": 1e-5},
           "elementwise": {"fwd": {"alpha_s": 1e-5, "s_per_elem": 1e-9}, "bwd": {"alpha_s": 1e-5, "s_per_elem": 1e-9}},
           "dispatch": {"dist_op_s": 1e-4}, "optimizer": {"alpha_s_per_tensor": 1e-4, "s_per_elem": 1e-9},
           "collectives": {k: {"any": {"alpha_s": 1e-3, "s_per_byte": 1e-9}} for k in COLLECTIVE_KINDS},
           "memory": {"process_base_bytes": 300 * 2 ** 20}}


def test_run_two_plans_fills_the_measured_fields(tmp_path):
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps(PROFILE))
    proc = subprocess.run([sys.executable, "-m", "paddle_ext", "plan", "--model", "demo", "--nproc", "2",
                           "--profile", str(profile), "--run", "2", "--steps", "4", "--repeat", "1", "--json",
                           "--out", str(tmp_path / "out"), "--timeout", "300"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    run = [p for p in doc["plans"] if p["measured_step_s"] is not None]
    assert len(run) == 2 and doc["run"]["run"] == 2
    best_two = [p["name"] for p in doc["plans"]][:2]
    assert [p["name"] for p in run] == best_two                 # the two best-ranked, both runnable here
    for p in run:
        assert 0 < p["measured_step_s"] < 60
        assert p["measured_peak_bytes"] > 50 * 2 ** 20           # a Paddle process: tens of MiB at least
        assert p["measured_step_s"] == float(np.median(p["step_times"]))
        # the runner trained the described model: the loss curve of the dense demo GPT
        ref = reference_losses(RunConfig(plan="dp2", steps=4, batch=p["batch"]))
        np.testing.assert_allclose(p["losses"], ref, rtol=1e-4, err_msg=p["name"])
    # two plans: the ranks agree (1) or not (-1); equal predictions have no rank order (None)
    tied = run[0]["predicted_step_s"] == run[1]["predicted_step_s"]
    assert doc["run"]["spearman_step"] in ((None,) if tied else (-1.0, 1.0))


def test_run_paddlenlp_gpt_plans_through_its_auto_parallel_path(tmp_path):
    """``--model paddlenlp-gpt --run 2``: the two best plans PaddleNLP's auto-parallel path can
    run (no pipeline, or pipeline by annotation at one microbatch) train PaddleNLP's GPT auto
    model on 2 ranks; their losses are the dense non-auto GPT's on the same batches."""
    from paddle_ext.models import real_models as rm
    from paddle_ext.testing import run_ranks

    try:
        rm.require_paddlenlp()
    except ImportError as exc:
        pytest.fail(str(exc), pytrace=False)
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps(PROFILE))
    proc = subprocess.run([sys.executable, "-m", "paddle_ext", "plan", "--model", "paddlenlp-gpt", "--nproc", "2",
                           "--profile", str(profile), "--run", "2", "--steps", "4", "--repeat", "1", "--json",
                           "--out", str(tmp_path / "out"), "--timeout", "300"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    run = [p for p in doc["plans"] if p["measured_step_s"] is not None]
    assert len(run) == 2 and doc["run"]["run"] == 2 and doc["run"]["not_runnable_by_the_runner"] > 0
    for p in run:
        assert 0 < p["measured_step_s"] < 60 and p["measured_peak_bytes"] > 50 * 2 ** 20
        assert p["measured_step_s_passes"] == [p["measured_step_s"]]
    dense = run_ranks(rm.dense_losses, 1, args=("gpt", 4, run[0]["batch"]), timeout=300,
                      log_dir=tmp_path / "dense")[0]
    for p in run:
        np.testing.assert_allclose(p["losses"], dense, rtol=1e-5, err_msg=p["name"])
