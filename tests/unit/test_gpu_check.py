"""tools/gpu_check.sh on a CPU machine: GPU mode refuses without GPUs; its steps as ``--dry-run``
prints them (every mode); one step run for real.

* the step limits, each step's grace and the GPU probe add up to the printed total, within the
  script's 10-minute claim, in every mode (2+ GPUs, one GPU, the CPU double);
* the demo step selects the 2-rank documented-plan test alone (not the 3-rank odd world);
* the matrix step's own time limit is inside the step's limit, and the matrix starts no launch past
  it; numeric GPU steps run with ``NVIDIA_TF32_OVERRIDE=0``; one GPU runs the one-process steps and
  says what needs two;
* a step ends a process its command started in another session (out of ``timeout``'s reach).
"""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from paddle_ext.launcher import running

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "gpu_check.sh"
MODES = {"2+ GPUs": ("--gpus", "2"), "one GPU": ("--gpus", "1"), "CPU double": ("--cpu-double",)}


def _dry(*args):
    proc = subprocess.run(["bash", str(SCRIPT), "--dry-run", *args], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    steps = re.findall(r"^step (\S+) limit (\d+)s: (.*)$", proc.stdout, re.M)
    total = re.search(r"^total: (\d+)s worst case \((\d+) steps, each with (\d+)s grace(, and the (\d+)s GPU probe)?\); "
                      r"budget (\d+)s$", proc.stdout, re.M)
    assert steps and total, proc.stdout
    return {name: (int(secs), cmd) for name, secs, cmd in steps}, total, proc.stdout


def test_the_script_parses():
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, timeout=60).returncode == 0


@pytest.mark.parametrize("mode", MODES)
def test_step_limits_add_up_to_the_total_within_ten_minutes(mode):
    steps, total, _ = _dry(*MODES[mode])
    grace, probe, budget = int(total.group(3)), int(total.group(5) or 0), int(total.group(6))
    assert int(total.group(2)) == len(steps)
    assert int(total.group(1)) == sum(s for s, _ in steps.values()) + grace * len(steps) + probe
    assert budget == 600 and int(total.group(1)) <= budget
    assert "at most 10 minutes" in SCRIPT.read_text()
    assert grace >= 10 + 1   # timeout -k 10, then a second before the leftovers are ended
    if mode != "CPU double":
        assert probe > 0


def test_the_demo_step_selects_only_the_two_rank_documented_plans():
    steps, _, _ = _dry("--gpus", "2")
    node = re.search(r"(tests/multirank/test_demo.py::\S+)", steps["demo_plans"][1]).group(1)
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", node],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    collected = [line for line in proc.stdout.splitlines() if "::" in line]
    assert collected == ["tests/multirank/test_demo.py::test_every_documented_plan_matches_dense[2]"], proc.stdout


def test_matrix_time_limit_fits_its_step_and_numeric_steps_have_full_fp32():
    steps, _, _ = _dry("--gpus", "2")
    secs, cmd = steps["reshard_matrix_nccl"]
    inner = int(re.search(r"--time-limit (\d+)", cmd).group(1))
    assert inner + 15 <= secs   # the matrix writes its report before the step's timeout
    one, _, out = _dry("--gpus", "1")
    for table in (steps, one):
        for name, (_, command) in table.items():
            if "pytest" in command or "reshard-matrix" in command:
                assert command.startswith("env NVIDIA_TF32_OVERRIDE=0 "), name
    assert {"dispatch_one_process", "zero_byte_plans_one_process", "dispatch_cpp_key_cuda_wheel"} <= set(one)
    assert "--nproc 1" in one["bench_dispatch_one_process"][1]
    assert "need 2 GPUs: not run (1 visible)" in out


def test_dry_run_takes_a_gpu_count_only_with_dry_run():
    proc = subprocess.run(["bash", str(SCRIPT), "--gpus", "2"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "only goes with --dry-run" in proc.stderr


def test_a_step_ends_what_it_started_in_another_session(tmp_path):
    """The command starts a sleeper in its own session and outlives the step's limit: ``timeout``
    ends the command, the environment marker finds the sleeper and ends it too."""
    script = f"""
source "{SCRIPT}"
OUT="{tmp_path}"; REPORT="{tmp_path}/report.md"; DRY=0; TOTAL=0; STEPS=0; FAILED=0; MARK="gpu_check_test.$$"
step orphan 2 bash -c 'setsid sleep 300 < /dev/null > /dev/null 2>&1 & echo $! > "{tmp_path}/pid"; sleep 0.3;
  cut -d" " -f6 /proc/$!/stat > "{tmp_path}/sid"; sleep 100'
"""
    subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    pid = int((tmp_path / "pid").read_text())
    assert int((tmp_path / "sid").read_text()) == pid   # the sleeper led its own session
    assert not running(pid), f"process {pid} outlived its step"
    assert "| orphan | FAILED (timeout after 2s)" in (tmp_path / "report.md").read_text()


def test_the_matrix_starts_no_launch_past_its_time_limit(monkeypatch):
    """``paddle-ext reshard-matrix --time-limit``: every launch crashes after using all the time it
    is given (a hang), so the bisection would go on to its launch budget; with a 100 s limit no
    launch runs past it, none starts with less than MIN_LAUNCH_SECONDS left, and the cases left are
    reported "not run (time limit)"."""
    import types

    from paddle_ext import launcher
    from paddle_ext.cli import reshard_matrix as rm

    clock = [0.0]
    launches = []

    def hang(*args, timeout, **kwargs):
        launches.append((clock[0], timeout))
        clock[0] += timeout
        raise rm.HarnessError("rank 0: TIMEOUT")

    monkeypatch.setattr(rm, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    monkeypatch.setattr(launcher, "run_ranks", hang)
    cases = rm._cases(2)
    out = rm._run(cases, 2, True, [60], deadline=100.0)
    assert launches and clock[0] <= 100.0
    assert all(100.0 - start >= rm.MIN_LAUNCH_SECONDS for start, _ in launches)
    assert len(launches) < 60   # the time limit, not the launch budget, stopped it
    assert set(out) == {c.id for c in cases}
    assert "not run (time limit)" in out.values()


def test_gpu_mode_on_a_cpu_machine_says_to_use_the_double(tmp_path):
    proc = subprocess.run(["bash", str(SCRIPT), "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "at least 1 visible GPU" in proc.stderr and "found 0" in proc.stderr and "--cpu-double" in proc.stderr


def test_unknown_argument_is_named(tmp_path):
    proc = subprocess.run(["bash", str(SCRIPT), "--nodes", "8"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "unknown argument --nodes" in proc.stderr
