"""Faults mid-step: a rank that raises, exits or hangs fails the job in bounded time, naming rank and action.

A hang is bounded by the run's timeout, which also covers the ranks' start (Paddle's import, the
gloo world): 25 s, so a start slowed by another launch beside it (CI runs two groups of launches
at once) still reaches the hanging step, and below gloo's own 30 s timeout, so the healthy rank is
still waiting (not raising) when the run's bound ends it."""
import time

import pytest

import fault_ranks as fr
from paddle_ext.errors import HarnessError
from paddle_ext.launcher import running
from paddle_ext.testing import run_ranks

pytestmark = pytest.mark.multirank


@pytest.mark.parametrize("fault, kind, timeout", [("raise", "raised", 120), ("exit", "exited", 120),
                                                  ("hang", "timeout", 25)])
def test_fault_mid_step_names_rank_and_action(fault, kind, timeout, tmp_path):
    with pytest.raises(HarnessError) as info:
        run_ranks(fr.fault_in_step, nproc=2, args=(4, 1, 2, fault), timeout=timeout, log_dir=tmp_path / "log")
    msg = str(info.value)
    assert f"rank 1 {kind}" in msg, msg
    assert f"step 2: injected {fault}" in msg, msg
    if fault == "hang":  # the healthy rank is stuck in the collective the hung rank never joined
        assert "rank 0 timeout" in msg and "step 2: all_reduce of a [4] tensor" in msg, msg
    if fault == "raise":
        assert "RuntimeError: injected fault on rank 1 at step 2" in msg
    if fault != "hang":  # bounded by the fault itself, not by the run's timeout
        assert "timeout" not in msg.splitlines()[0], msg
    else:
        assert f"no result after {timeout} s" in msg, msg


def test_hang_in_a_pipeline_names_the_action_with_the_grid(tmp_path):
    with pytest.raises(HarnessError) as info:
        run_ranks(fr.pipeline_with_hanging_stage, nproc=2, args=("1F1B", 1, 2), timeout=25,
                  log_dir=tmp_path / "log")
    msg = str(info.value)
    assert "rank 1 timeout" in msg and "rank 0 timeout" in msg, msg
    # rank 1 hangs inside its second forward; rank 0 waits in a pipeline message for it
    assert "1F1B: pipeline rank 1 at step" in msg and "running 1F1" in msg, msg
    assert "1F1B: pipeline rank 0 at step" in msg and ("RECV_B" in msg or "SEND_F" in msg), msg
    assert ">" in msg and "<" in msg  # the rank-by-step grid marks the stuck action
    assert "no result after 25 s" in msg  # bounded by the run's timeout, as the harness reports


def test_ranks_end_when_their_harness_is_killed(tmp_path):
    # the harness (run_ranks in a process of its own) is SIGKILLed while its ranks sleep: its
    # timeout and clean-up die with it, and the launch runs in a session of its own, so nothing
    # but the ranks' own watch ends them. Both ranks must be gone well before their 120 s sleep.
    import signal
    import subprocess
    import sys

    script = tmp_path / "harness.py"
    script.write_text("import sys\n"
                      f"sys.path[:0] = {sys.path!r}\n"
                      "import fault_ranks\n"
                      "from paddle_ext.testing import run_ranks\n"
                      f"run_ranks(fault_ranks.report_pid_and_sleep, nproc=2, args=({str(tmp_path)!r}, 120), "
                      f"timeout=300, log_dir={str(tmp_path / 'log')!r})\n")
    harness = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 90
        pids = []
        while time.monotonic() < deadline and len(pids) < 2:
            pids = [int(p.read_text()) for p in sorted(tmp_path.glob("rank*.pid"))]
            assert harness.poll() is None, "the harness ended before its ranks started"
            time.sleep(0.2)
        assert len(pids) == 2, "the ranks did not start within 90 s"
    finally:
        harness.send_signal(signal.SIGKILL)
        harness.wait()
    gone_by = time.monotonic() + 20
    alive = pids
    while alive and time.monotonic() < gone_by:
        alive = [p for p in pids if running(p)]
        time.sleep(0.2)
    assert not alive, f"ranks {alive} outlived their killed harness by 20 s"

