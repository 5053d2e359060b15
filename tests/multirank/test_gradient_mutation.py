"""Tests of the tests (issue #37): the scenarios' gradient checks fail when a gradient is wrong.

AdamW cannot see a gradient's scale, so a loss comparison passes a gradient halved or doubled by
a wrong reduction. Here the rank code of the training scenarios (``scenario_ranks_train``)
scales named parameters' gradients on the ranks (``GRAD_SCALE_ENV``), and the checks of
``scenario_ranks.classify`` must fail on exactly those parameters, on dp (``dist.parallelize``
dp), mp (column and row parallel) and ZeRO plans (ShardingStage1/2/3 through shard_optimizer,
sharding level 3 through ``dist.parallelize``):

* scaled before it is recorded and applied: the gradient and the update checks both fail;
* scaled after it is recorded, just before the optimizer's step: only the update check fails
  (what the optimizer applied is checked on its own, not inferred from the gradient).

Every other parameter of the same run still passes: the checks name the wrong parameter.
Two launches in the install() mode (ShardingStage* fail with Paddle alone on CPU).
"""
from __future__ import annotations

import pytest

import scenario_ranks as sr
from scenario_ranks_train import GRAD_SCALE_ENV

pytestmark = pytest.mark.multirank

PLANS = {
    "dp": "dist.parallelize[dp:0]",
    "mp": "dist.parallelize[mp]",
    "ZeRO-1": "shard_optimizer[ShardingStage1]",
    "ZeRO-2": "shard_optimizer[ShardingStage2]",
    "ZeRO-3": "shard_optimizer[ShardingStage3]",
    "ZeRO-3 (parallelize)": "dist.parallelize[dp:3]",
}
# parameter -> factor; the Linear scenarios' "weight"/"bias", the LM's (column-parallel
# mlp.up and lm_head, row-parallel mlp.down, the embedding under mp)
BEFORE_RECORD = {"weight": 2.0, "bias": 0.5, "layers.0.mlp.up.weight": 2.0, "lm_head.weight": 0.5}
BEFORE_STEP = {"weight": 0.5, "bias": 2.0, "embed.weight": 2.0, "layers.1.mlp.down.weight": 0.5}


def _run(tmp_path, scales: dict, when: str):
    spec = ",".join(f"{n}={f}" + ("@step" if when == "step" else "") for n, f in scales.items())
    return sr.run_mode("install", list(PLANS.values()), tmp_path, env={GRAD_SCALE_ENV: spec})


def _failing(o) -> dict:
    return {label: ratio for label, (rel, ratio) in o.grads.items() if not sr.grad_ok(rel, ratio)}


def _mutated(o, scales) -> dict:
    params = {k.split(":", 1)[1] for k in o.values if k.startswith("init:")}
    return {n: f for n, f in scales.items() if n in params}


@pytest.fixture(scope="module")
def before_record(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("mut_grad"), BEFORE_RECORD, "grad")


@pytest.fixture(scope="module")
def before_step(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("mut_step"), BEFORE_STEP, "step")


def _only_the_scaled_fail(o, mutation, kinds, plan):
    """The run is judged wrong, and exactly the scaled parameters' ``kinds`` checks fail, each
    with its norm ratio at the scale."""
    assert o.status == "wrong", f"{plan}: a x2 and a x0.5 gradient passed: {o.status} {o.detail}"
    scaled = _mutated(o, mutation)
    assert sorted(scaled.values()) == [0.5, 2.0], (plan, scaled)
    failing = _failing(o)
    assert set(failing) == {f"{kind}:{n}" for n in scaled for kind in kinds}, (plan, failing)
    for label, ratio in failing.items():   # the norm ratio measures the scale
        assert ratio == pytest.approx(scaled[label.split(":", 1)[1]], rel=1e-4), (plan, label, ratio)


@pytest.mark.parametrize("plan", PLANS)
def test_a_scaled_gradient_fails_the_gradient_and_update_checks(before_record, plan):
    _only_the_scaled_fail(before_record[PLANS[plan]], BEFORE_RECORD, ("grad", "update"), plan)


@pytest.mark.parametrize("plan", PLANS)
def test_a_gradient_scaled_only_in_the_step_fails_the_update_check(before_step, plan):
    _only_the_scaled_fail(before_step[PLANS[plan]], BEFORE_STEP, ("update",), plan)
