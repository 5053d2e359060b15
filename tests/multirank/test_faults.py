"""Faults mid-step: a rank that raises, exits or hangs fails the job in bounded time, naming rank and action.

A hang is bounded by the run's timeout, which also covers the ranks' start (Paddle's import, the
gloo world): 25 s, so a start slowed by another launch beside it (CI runs two groups of launches
at once) still reaches the hanging step, and below gloo's own 30 s timeout, so the healthy rank is
still waiting (not raising) when the run's bound ends it."""
import pytest

import fault_ranks as fr
from paddle_ext.errors import HarnessError
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
