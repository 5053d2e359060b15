"""ZBAuto and the V-memory schedules as static pipeline passes (``schedule_mode``) on 2 gloo
ranks: every step's loss equals the single-process run, as for the other schedules
(test_static_engine.py), and the job lists are the generators' orders."""
import pytest

from paddle_ext.passes.schedules import generate_schedule
from test_static_engine import PP2, V2, _check, _launch

pytestmark = pytest.mark.multirank


@pytest.fixture(scope="module")
def searched_run(tmp_path_factory):
    cfgs = {"ZBAuto": {**PP2, "schedule": "ZBAuto"},
            "VMin": {**V2, "schedule": "VMin"},
            "VHalf": {**V2, "schedule": "VHalf"},
            "VZB": {**V2, "schedule": "VZB"}}
    return _launch(cfgs, 2, tmp_path_factory.mktemp("static_searched"), timeout=300)


def test_searched_and_v_memory_schedules_match_dense(searched_run):
    names, cfgs, results = searched_run
    _check(results, names, cfgs)


def test_job_lists_follow_the_generated_orders(searched_run):
    names, _, results = searched_run
    for name, n_chunks in (("ZBAuto", 1), ("VHalf", 2)):
        schedule = generate_schedule(name, 2, 4)
        for rank in (0, 1):
            jobs = [(m, mb) for t, mb in results[rank][names.index(name)]["jobs"] for m in t.split("+")
                    if m.startswith(("forward", "backward"))]  # merged jobs run their members in order
            local = sorted({a.stage for a in schedule[rank]})
            want = [({"F": "forward", "I": "backward_b", "W": "backward_w", "B": "backward"}[a.kind.value]
                     + str(local.index(a.stage)), a.microbatch) for a in schedule[rank]]
            assert jobs == want, (name, rank, jobs, want)
