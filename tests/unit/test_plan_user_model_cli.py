"""``paddle-ext plan --model pkg.module:factory`` from the command line, on one process: the
ranked table of the example MLP-Mixer with what the trace found, ``--emit DIR`` (the configuration
of the plan ranked first), and bad input as named errors with exit code 2."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from paddle_ext.plan.profile_data import COLLECTIVE_KINDS

ROOT = Path(__file__).resolve().parents[2]
SPEC = "examples.plan_my_model:build"
PROFILE = {"source": "test: hand-written unit costs", "matmul": {"rate_flops_per_s": 1e9},
           "elementwise": {"fwd": {"alpha_s": 1e-6, "s_per_elem": 1e-9}, "bwd": {"alpha_s": 1e-6, "s_per_elem": 1e-9}},
           "optimizer": {"alpha_s_per_tensor": 1e-6, "s_per_elem": 1e-9},
           "collectives": {k: {"any": {"alpha_s": 5e-5, "s_per_byte": 1e-9}} for k in COLLECTIVE_KINDS}}


def _plan(tmp_path, *extra):
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps(PROFILE))
    return subprocess.run([sys.executable, "-m", "paddle_ext", "plan", "--nproc", "4", "--profile", str(profile),
                           "--out", str(tmp_path / "out"), *extra], capture_output=True, text=True, timeout=300,
                          cwd=ROOT)


def test_plan_and_emit_the_example(tmp_path):
    proc = _plan(tmp_path, "--model", SPEC, "--emit", str(tmp_path / "emit"), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["emitted"]["plan"] == doc["plans"][0]["name"]
    assert all(not p["sp"] for p in doc["plans"])
    assert doc["trace"]["blocks"] == "blocks" and doc["trace"]["n_blocks"] == 4
    cfg = json.loads((tmp_path / "emit" / "plan.json").read_text())
    assert cfg["plan"] == doc["plans"][0]["name"] and cfg["model"] == SPEC
    assert (tmp_path / "emit" / "apply_plan.py").read_text().count("from paddle_ext import apply_plan") == 1


def test_the_table_says_what_the_trace_found(tmp_path):
    proc = _plan(tmp_path, "--model", SPEC, "--emit", str(tmp_path / "emit"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "repeated blocks: blocks.0 .. blocks.3" in proc.stdout
    assert "token_fc1 (column)" in proc.stdout and "replicated (11 layers)" in proc.stdout
    assert "as a dist.parallelize configuration" in proc.stdout


@pytest.mark.parametrize("extra, message", [
    (["--model", "examples.nope:build"], "importing module 'examples.nope' failed"),
    (["--model", "examples.plan_my_model:Mixer"], "the factory returned Mixer"),
    (["--model", SPEC, "--layers", "8"], "size overrides (--layers) do not apply"),
    (["--model", "demo", "--emit", "x"], "--emit writes a dist.parallelize configuration for your own model"),
])
def test_bad_input_is_a_named_error(tmp_path, extra, message):
    proc = _plan(tmp_path, *extra)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert message in proc.stderr
