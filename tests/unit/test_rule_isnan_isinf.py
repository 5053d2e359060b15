"""isnan and isinf: rules for two ops Paddle 3.3.1 computes replicated (no SPMD rule of its own).

The rules keep every dim's sharding (``... -> ...``) and need every partial input reduced first;
checked here against Paddle's own kernels on the shards the rule claims, and by the validator
against numpy on simulated ranks with NaN and infinities in the data.
"""
from __future__ import annotations

import numpy as np
import pytest

import paddle  # noqa: F401 - required: a broken install fails here, never skips
import paddle_ext.spmd_rules  # noqa: F401  (registers the rule families)
from paddle_ext.compat.ports.spmd import has_phi_rule
from paddle_ext.placements import DistSpec, Partial, Replicate, Shard
from paddle_ext.spmd.lookup import get_spmd_rule
from paddle_ext.spmd.validator import check_op
from paddle_ext.spmd_rules.gaps import OWNED

OPS = {"isnan": (paddle.isnan, np.isnan), "isinf": (paddle.isinf, np.isinf)}


@pytest.mark.parametrize("op", sorted(OPS))
def test_paddle_has_no_rule_and_ours_is_a_gap_rule(op):
    assert not has_phi_rule(op)
    assert op in OWNED


@pytest.mark.parametrize("op", sorted(OPS))
def test_every_sharding_is_kept_and_partials_are_reduced(op):
    rule = get_spmd_rule(op, "ext")
    for placements in [(Shard(0),), (Shard(1),), (Replicate(),), (Shard(1), Shard(0))]:
        spec = DistSpec((4, 6), (2,) * len(placements), placements)
        text = ",".join(map(str, placements))
        assert str(rule.infer([spec], {})) == f"{op}: [{text}] = [{text}]"
    assert str(rule.infer([DistSpec((4, 6), (2,), (Partial("sum"),))], {})) == f"{op}: [P(sum)] -> [R] = [R]"


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("dim", [0, 1])
def test_paddle_kernel_on_the_claimed_shards_equals_it_on_the_whole(op, dim):
    paddle_op, _ = OPS[op]
    x = np.array([[0.5, np.nan, np.inf, -1.0, -np.inf, 2.0],
                  [np.nan, 1.0, 3.0, np.inf, 0.0, -np.inf],
                  [1.0, 2.0, np.nan, np.nan, -np.inf, 4.0],
                  [np.inf, 0.0, 1.0, -2.0, np.nan, 5.0]], dtype="float32")
    out = get_spmd_rule(op, "ext").infer([DistSpec(x.shape, (2,), (Shard(dim),))], {}).outputs[0]
    assert out.placements == (Shard(dim),)
    shards = [paddle_op(paddle.to_tensor(s)).numpy() for s in np.split(x, 2, axis=dim)]
    whole = paddle_op(paddle.to_tensor(x)).numpy()
    np.testing.assert_array_equal(np.concatenate(shards, axis=dim), whole)
    assert whole.any() and not whole.all()  # the data has both answers


@pytest.mark.parametrize("op", sorted(OPS))
def test_validator_on_simulated_ranks_finds_no_false_positive(op):
    report = check_op(op, "ext")
    assert report.cases >= 10
    assert report.false_positives == [] and report.errors == []
