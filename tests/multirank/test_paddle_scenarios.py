"""Paddle's own auto-parallel scenarios, re-written: never worse with paddle-ext than Paddle alone.

Every scenario of ``scenario_ranks_{reshard,ops,train}.py`` (each names the Paddle file of
``test/auto_parallel`` it stands for) runs on 2 CPU ranks in three modes -- Paddle alone,
``paddle_ext.install()``, ``install()`` + ``enable()`` -- one mode per launch series (install()
patches Paddle process-wide), many scenarios per launch, a launch of its own for each scenario
that crashes or hangs Paddle. The rule:

* alone: every scenario passes (global values equal dense) except those in ``FAILS_ALONE``, each
  failing with the error recorded there (if Paddle starts passing one, this says so);
* with paddle-ext: every scenario that passes alone passes, with Paddle alone's values
  (bit-identical for reshards); one that fails alone either fails or passes with dense values,
  never gives wrong values;
* docs/compatibility.md's "Paddle's scenarios" section is the table these runs generate.
"""
from __future__ import annotations

from pathlib import Path

import pytest

import scenario_ranks as sr

pytestmark = pytest.mark.multirank

NAMES = list(sr._registry())
DOC = Path(__file__).resolve().parents[2] / "docs" / "compatibility.md"

# What Paddle 3.3.1 alone cannot do on CPU, per scenario: a fragment of the first error line
# (or "crashes" for a rank that dies: segfault, gloo timeout). See the shared Paddle-on-CPU notes.
RS = "Unimplemented cpu kernel for CReduceScatterOp"
FAILS_ALONE = {
    "reshard_p_to_s[S0]": RS,
    "reshard_p_to_s[S1]": RS,
    "reshard_s_to_s[S0->S1]": "Unimplemented cpu kernel for all_to_all",
    "reshard_s_to_s[S1->S0]": "Unimplemented cpu kernel for all_to_all",
    "reshard_nd_mesh[P,R->S0,R]": RS,
    "reshard_nd_mesh_cross_mesh[P,P -> S0,S1]": RS,
    "reshard_same_status[1-D mesh [0]->[1]]": "crashes",
    "reshard_same_status[nd mesh S0,P]": "crashes",
    "reshard_s_to_r_cross_mesh[S0 on [0,1] -> R on [1,0]]": "crashes",
    "shard_optimizer[ShardingStage1]": RS,
    "shard_optimizer[ShardingStage1, mesh [[0,1]] (pp,dp)]": RS,
    "shard_optimizer[ShardingStage2]": RS,
    "shard_optimizer[ShardingStage2, mesh [[0,1]] (pp,dp)]": RS,
    "shard_optimizer[ShardingStage3]": RS,
    "shard_optimizer[ShardingStage3, mesh [[0,1]] (pp,dp)]": RS,
    "shard_optimizer[ShardingStage1, AMP O2 master_grad]": RS,
    "dist.parallelize[sp]": RS,
    "dist.parallelize[dp:1]": RS,
    "dist.parallelize[dp:2]": RS,
    "dist.parallelize[dp:3]": RS,
    "dist.parallelize[pp]": "crashes",
    "dist.to_static[dp]": "No CUDA device found",
    "dist.to_static[mp]": "No CUDA device found",
    "dist.to_static[stage1]": "No CUDA device found",
    "pipelining[1F1B]": "TIMEOUT",
    "checkpoint[save S0, load S1]": "No available device found",
    "checkpoint[save S1, load R]": "No available device found",
    "checkpoint[save R, load S0]": "No available device found",
}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    """Every scenario in every mode (module-scoped: the launches are shared by all tests)."""
    root = tmp_path_factory.mktemp("paddle_scenarios")
    return sr.run_modes(sr.MODES, NAMES, root)


def test_ledger_names_real_scenarios():
    unknown = sorted(set(FAILS_ALONE) - set(NAMES))
    assert not unknown, f"FAILS_ALONE names scenarios that do not exist: {unknown}"


@pytest.mark.parametrize("name", NAMES)
def test_alone(outcomes, name):
    o = outcomes["alone"][name]
    expected = FAILS_ALONE.get(name)
    if expected is None:
        assert o.status == "pass", f"Paddle alone: {o.status}: {o.detail}"
        return
    assert o.status != "pass", f"Paddle alone now passes {name}: remove it from FAILS_ALONE"
    if expected == "crashes":
        assert o.status == "crash", f"expected a crash, got {o.status}: {o.detail}"
    else:
        assert expected in o.detail, f"expected {expected!r}, got {o.status}: {o.detail}"


@pytest.mark.parametrize("mode", sr.MODES[1:])
@pytest.mark.parametrize("name", NAMES)
def test_with_paddle_ext(outcomes, mode, name):
    alone, o = outcomes["alone"][name], outcomes[mode][name]
    assert o.status != "wrong", f"{mode}: wrong values where Paddle alone {alone.status}: {o.detail}"
    if alone.status != "pass":
        return  # listed in the table: fails there too, or passes (against dense) only with paddle-ext
    assert o.status == "pass", f"regression: passes alone, {o.status} with {mode}: {o.detail}"
    diff = sr.same_as_alone(alone, o, exact=sr._registry()[name].exact)
    assert diff is None, f"{mode}: {diff}"


def test_compatibility_doc_is_current(outcomes):
    """docs/compatibility.md holds the table these runs generate (tools/compat_scenarios.py --write)."""
    doc = DOC.read_text() if DOC.exists() else ""
    current = sr.section_of(doc)
    assert current is not None, "docs/compatibility.md lacks the Paddle's scenarios section"
    assert current == sr.render(outcomes), \
        "docs/compatibility.md's Paddle's scenarios table is stale: run python tools/compat_scenarios.py --write"
