"""paddle_ext.reshard on real gloo ranks, bit-exact against dense; two launches in all.

* 2 ranks: every 1-D pair of R/S(0)/S(1)/P(sum|avg|max|min) on even, uneven and empty-shard
  shapes; gradients through the reverse plan; named errors before any data moves; and
  shard_optimizer with ShardingStage1/2/3 training on CPU with loss parity.
* 4 ranks: every 2x2 pair of R/S(0)/S(1)/P(sum) on an uneven shape plus Paddle's failing cases
  (co-shard to R on uneven/empty, P(avg) on 2-D), and cross-mesh pairs ([0,1]->[2,3], ->[1,0],
  ->[0,2], 1-D -> 2x2, 2x2 -> [2,3]).

Each rank also counts the bytes it received: never more than the plan's.
"""
import re

import numpy as np
import pytest

import reshard_ranks as rr
from paddle_ext.reshard.checks import assemble_case, expected_bytes
from paddle_ext.reshard.exact import dense_for
from paddle_ext.testing import run_ranks

pytestmark = pytest.mark.multirank


def _check_cases(cases, per_rank):
    failures = []
    for c in cases:
        ok, why = assemble_case(c, [r[c.id] for r in per_rank])
        received = max(r[c.id].received for r in per_rank)
        if not ok:
            failures.append(f"{c.id}: {why}")
        elif received > expected_bytes(c):
            failures.append(f"{c.id}: received {received} B > plan {expected_bytes(c)} B")
    assert not failures, f"{len(failures)} of {len(cases)} failed:\n" + "\n".join(failures[:20])


@pytest.fixture(scope="module")
def two_ranks():
    cases = rr.one_d_cases(2)
    return cases, run_ranks(rr.suite_2ranks, nproc=2, args=(cases,), timeout=240)


def test_every_1d_pair_on_2_ranks_is_bit_exact(two_ranks):
    cases, res = two_ranks
    _check_cases(cases, [r["cases"] for r in res])
    # one-step plans move exactly what the plan says
    s_to_r = "uneven:[S(0)]->[R]"
    assert max(r["cases"][s_to_r].received for r in res) == expected_bytes(
        next(c for c in cases if c.id == s_to_r))


def test_gradient_flows_back_through_the_reverse_plan(two_ranks):
    _, res = two_ranks
    for case_id, (grad, placements) in res[0]["grads"].items():
        shape = tuple(int(v) for v in case_id.split(":")[1].strip("()").split(","))
        assert np.array_equal(grad, 2 * dense_for(shape)), case_id
        # x.grad keeps x's layout, a Partial dim made Replicate (Paddle's own reshard does the same)
        source = case_id.split(":")[2].split("->")[0]
        assert placements == re.sub(r"P\([a-z]+\)", "R", source), case_id


def test_bad_requests_raise_named_errors_before_moving_data(two_ranks):
    _, res = two_ranks
    for rank, (errors, untouched, after) in enumerate(r["errors"] for r in res):
        assert "one placement per mesh dim" in errors["too many placements"]
        assert "has rank 2" in errors["shard dim beyond rank"]
        assert "not in this job" in errors["rank outside job"]
        assert "different global shape" in errors["shape mismatch"]
        assert untouched, f"rank {rank}: the source tensor changed"
        assert np.array_equal(after, dense_for((4, 6))), "ranks out of step after the errors"


def test_sharding_stages_train_on_cpu_with_loss_parity(two_ranks):
    _, res = two_ranks
    for rank, (ref, stages) in enumerate(r["sharding"] for r in res):
        for name, got in stages.items():
            np.testing.assert_allclose(got["losses"], ref, rtol=1e-5, atol=1e-6, err_msg=f"{name} rank {rank}")
        full = stages["ShardingStage1"]["full_bytes"]
        assert stages["ShardingStage2"]["grad_bytes"] == full // 2, stages["ShardingStage2"]
        assert stages["ShardingStage2"]["grad_placements"] == ["[S(0)]"]
        assert stages["ShardingStage3"]["param_bytes"] == full // 2, stages["ShardingStage3"]
        assert stages["ShardingStage3"]["param_placements"] == ["[S(0)]"]


def test_2x2_and_cross_mesh_on_4_ranks_are_bit_exact():
    cases = rr.two_d_cases() + rr.cross_cases()
    res = run_ranks(rr.ext_cases, nproc=4, args=(cases,), timeout=300)
    _check_cases(cases, res)
