"""``paddle-ext profile --static``: the static Engine's cost per job, per message and per hand-off,
measured on two gloo ranks (paddle_ext/plan/profile_static.py), and read back by the planner."""
import json

import pytest

from paddle_ext.plan.profile_data import Profile
from paddle_ext.plan.profile_static import job_times, measure_static_engine
from paddle_ext.plan.static_engine_cost import static_runtime

pytestmark = pytest.mark.multirank


def test_the_static_engine_section_is_measured_and_read_back(tmp_path):
    section = measure_static_engine(timeout=300, log_dir=str(tmp_path / "logs"), hidden=128, steps=6)
    runtime = static_runtime(Profile.from_json({"source": "test", "static_engine": section}))
    # a job's fixed cost, a send's copy and a message's hand-off on this machine: positive, and
    # below what one step of the profiled model takes (tens of milliseconds)
    for name, value in (("job", runtime.job_s), ("message", runtime.message_s), ("latency", runtime.latency_s)):
        assert 0.0 < value < 0.02, (name, value)
    assert "ZBV, 2 ranks, 4 blocks of hidden 128" in section["measured"]
    assert runtime.recv == "ahead"  # the default transport: receives posted ahead


def test_job_times_take_the_jobs_inside_the_profiled_steps_only(tmp_path):
    """Events outside the profiled-step window (set-up, the profiler's own) are not counted."""
    def event(name, ts, dur):
        return {"ph": "X", "name": name, "ts": ts, "dur": dur}

    trace = [event("profiled_step:ZBV[1]", 0, 100), event("forward0-0[3]", 10, 40),
             event("pd_op.matmul[4]", 15, 30), event("custom_op.pe_gloo_send[5]", 60, 5),
             event("forward0-1[6]", 200, 40), event("pd_op.matmul[7]", 205, 30)]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": trace}))
    got = job_times(str(path), "profiled_step:ZBV")
    assert got[("forward", 0)] == [(40, 30)]
    assert got["send"] == [5]
