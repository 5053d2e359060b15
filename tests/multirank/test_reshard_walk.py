"""The walk of one ``dist.reshard`` after ``install()`` (issue 40: "opens <= 10 modules").

On 2 gloo ranks, S(0) -> R of a 32x32 float32 is traced with ``sys.setprofile``: the distinct
paddle_ext modules whose Python code runs during (a) the first call (full path: the request
converted and validated once, the route, the plan, the runner built and run) and (b) the same
call repeated (the fast path: one cache lookup and the runner). Both results equal the dense
tensor. The lists are printed (``pytest -s``) so a reader sees the walk.
"""
import numpy as np
import pytest

import walk_ranks as wr
from paddle_ext.testing import run_ranks

pytestmark = pytest.mark.multirank

FIRST_MAX, AGAIN_MAX = 10, 4


def test_a_dist_reshard_after_install_opens_at_most_10_modules(tmp_path):
    res = run_ranks(wr.walk_s0_to_r, nproc=2, timeout=200, log_dir=tmp_path)
    for rank, r in enumerate(res):
        print(f"rank {rank}, first call ({len(r['first'])}):", *r["first"], sep="\n  ")
        print(f"rank {rank}, repeated call ({len(r['again'])}):", *r["again"], sep="\n  ")
        for y in r["values"]:
            assert np.array_equal(y, r["dense"]), rank
        assert r["placements"][0] == r["placements"][1] and "replicate" in r["placements"][0].lower()
        # the trace saw the full path the first time and only the fast path after
        assert {"paddle_ext.reshard.planner", "paddle_ext.reshard.fast"} <= set(r["first"]), r["first"]
        assert "paddle_ext.reshard.planner" not in r["again"] and "paddle_ext.reshard.fast" in r["again"]
        assert len(r["first"]) <= FIRST_MAX, r["first"]
        assert len(r["again"]) <= AGAIN_MAX, r["again"]
    assert res[0]["first"] == res[1]["first"] and res[0]["again"] == res[1]["again"]
