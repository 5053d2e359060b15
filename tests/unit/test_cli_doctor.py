"""`paddle-ext doctor --json` reports every item the Foundation promises, on this machine's Paddle."""
import json
import subprocess
import sys

import pytest

import paddle  # noqa: E402,F401 - required: a broken install fails here, never skips


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "paddle_ext", *args], capture_output=True, text=True, timeout=180)


def test_doctor_json_lists_everything_and_passes():
    proc = _cli("doctor", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    import numpy
    import paddle

    assert report["paddle"]["version"] == paddle.__version__ and report["paddle"]["supported"]
    assert report["paddle"]["build"] == ("GPU (CUDA)" if paddle.is_compiled_with_cuda() else "CPU")
    assert report["numpy"] == numpy.__version__
    assert report["backend"] == ("nccl" if paddle.is_compiled_with_cuda() else "gloo")
    assert set(report["compat_fixes"]) == {"numpy-mesh-rank", "static-gloo-groups", "static-gloo-barrier",
                                           "gloo-group-rendezvous", "gloo-batch-p2p-order", "cpu-collectives",
                                           "checkpoint-cpu-load", "static-gloo-rings",
                                           "zero3-gather-on-conflict", "stage1-dense-grads", "bool-cast-grad",
                                           "outside-mesh-hint", "static-name-clash"}
    for fix in report["compat_fixes"].values():
        assert fix["applied"] == fix["needed"]
    # the silent-wrong gradient fix is needed on Paddle 3.3.1 and applied by plain install()
    if paddle.__version__ == "3.3.1":
        assert report["compat_fixes"]["bool-cast-grad"]["applied"] is True
    # every opt-in is listed with its switch, off in a process that did not ask for it
    opt = report["opt_in_fixes"]
    assert {"ranks-outside-mesh", "local-layer-dense-gradient", "static-pipeline-schedules"} <= set(opt)
    for name in ("ranks-outside-mesh", "local-layer-dense-gradient"):
        assert opt[name]["switch"] == "install(pipeline_by_annotation=True)"
    # the default hint is not needed where every rank is in every mesh (one process)
    assert report["compat_fixes"]["outside-mesh-hint"]["needed"] is False
    assert all(f["on"] is False for f in opt.values())
    # one process: where every rank is in every mesh, the fix says it does not apply, and why
    assert opt["ranks-outside-mesh"]["applies_here"] is False and "world size 1" in opt["ranks-outside-mesh"]["why_not_here"]
    regs = report["registries"]
    assert set(regs) == {"static_reshard_functions", "pass_registry", "dygraph_pipelining",
                         "spmd_rule_lookup", "pir_pipeline_pass"}
    assert all(r["found"] for r in regs.values())
    assert "pipeline_scheduler_FThenB" in regs["pass_registry"]["pipeline_schedulers"]
    assert regs["static_reshard_functions"]["count"] > 0
    assert report["usable"] is True
    from paddle_ext.compat.native import fast_key

    assert report["dispatch_key"]["built"] == fast_key.is_built() and report["dispatch_key"]["disabled"] is False


def test_doctor_text_and_unknown_command():
    proc = _cli("doctor")
    assert proc.returncode == 0 and "usable: yes" in proc.stdout
    proc = _cli("no-such-command")
    assert proc.returncode == 2 and "invalid choice" in proc.stderr
