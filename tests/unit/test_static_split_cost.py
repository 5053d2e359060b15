"""tools/static_profile.py reads the profile of two schedules stepped in turn in one launch: each
schedule's jobs and ops are the events inside its own steps' profiler events."""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
import static_profile as sp  # noqa: E402


def _event(name, ts, dur):
    return {"ph": "X", "name": f"{name}[{dur / 1000:.3f} ms]", "ts": ts, "dur": dur, "tid": 1}


def _trace(tmp_path):
    """ZBV's step at 0-100 us, IR_VPP's at 200-300, ZBV's again at 400-500 (one W job each)."""
    events = [_event("ProfileStep#0", 0, 600)]
    for start, cfg, job, op, op_us in ((0, "ZBV", "backward_w0-0", "pd_op.addmm_", 30),
                                       (200, "IR_VPP", "backward0-0", "pd_op.matmul_grad", 70),
                                       (400, "ZBV", "backward_w0-1", "pd_op.addmm_", 40)):
        events += [_event(sp.window({"schedule": cfg}), start, 100), _event(job, start + 10, 80),
                   _event(op, start + 20, op_us)]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return str(path)


def test_each_schedule_gets_the_jobs_of_its_own_steps(tmp_path):
    path = _trace(tmp_path)
    zbv = sp.job_times(path, sp.window({"schedule": "ZBV"}))
    vpp = sp.job_times(path, sp.window({"schedule": "IR_VPP"}))
    assert zbv[("backward_w", 0)] == [(80, 30), (80, 40)] and ("backward", 0) not in zbv
    assert vpp[("backward", 0)] == [(80, 70)] and ("backward_w", 0) not in vpp
    everything = sp.job_times(path)
    assert set(everything) >= {("backward_w", 0), ("backward", 0)}


def test_a_trace_without_the_steps_event_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="profiled_step:ZB-H2"):
        sp.job_times(_trace(tmp_path), sp.window({"schedule": "ZB-H2"}))
