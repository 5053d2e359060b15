"""Paddle's own auto-parallel scenarios, re-written: never worse with paddle-ext than Paddle alone.

Every scenario of ``scenario_ranks_{reshard,ops,train}.py`` (each names the Paddle file of
``test/auto_parallel`` it stands for) runs on 2 CPU ranks in three modes -- Paddle alone,
``paddle_ext.install()``, ``install()`` + ``enable()`` -- one mode per launch series (install()
patches Paddle process-wide), many scenarios per launch, a launch of its own for each scenario
that crashes or hangs Paddle. The rule:

* alone: every scenario passes (global values equal dense) except those in ``FAILS_ALONE``, each
  failing with the error recorded there (if Paddle starts passing one, this says so);
* with paddle-ext: every scenario that passes alone passes, with Paddle alone's values
  (bit-identical for reshards); of those that fail alone, exactly ``PASSES_ONLY_WITH_EXT`` pass
  with paddle-ext (against dense) and the rest still fail; none gives wrong values;
* every training scenario of ``GRADIENT_CHECKED`` that passes was checked on gradients: each
  parameter's initial weight bit for bit, its first-step gradient and its SGD update against the
  dense model (max relative error and norm ratio; ``scenario_ranks.classify``); the pipelining
  schedules on gradients only, dist.to_static on updates only;
* sharing a launch cannot change a result: the batched scenarios, run again in the reverse
  order, give the same outcomes and bit-identical values;
* docs/compatibility.md's "Paddle's scenarios" section is the table these runs generate.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
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


# The scenarios that fail with Paddle alone and pass, against dense, with paddle-ext, in both
# install() and install() + enable(). Pinned here (not only in the generated docs table): a
# scenario leaving this set, or one of FAILS_ALONE joining it, fails test_only_with_paddle_ext.
PASSES_ONLY_WITH_EXT = {
    "reshard_p_to_s[S0]", "reshard_p_to_s[S1]", "reshard_s_to_s[S0->S1]", "reshard_s_to_s[S1->S0]",
    "reshard_nd_mesh[P,R->S0,R]",
    "shard_optimizer[ShardingStage1]", "shard_optimizer[ShardingStage1, mesh [[0,1]] (pp,dp)]",
    "shard_optimizer[ShardingStage2]", "shard_optimizer[ShardingStage2, mesh [[0,1]] (pp,dp)]",
    "shard_optimizer[ShardingStage3]", "shard_optimizer[ShardingStage3, mesh [[0,1]] (pp,dp)]",
    "shard_optimizer[ShardingStage1, AMP O2 master_grad]",
    "dist.to_static[dp]", "dist.to_static[mp]", "dist.to_static[stage1]",
    "dist.parallelize[sp]", "dist.parallelize[dp:1]", "dist.parallelize[dp:2]", "dist.parallelize[dp:3]",
    "pipelining[1F1B]",
    "checkpoint[save S0, load S1]", "checkpoint[save S1, load R]", "checkpoint[save R, load S0]",
}

# The scenarios that crash in every mode of the table (Paddle alone, install(), enable()): a rank
# outside a mesh, or Paddle's C++ cross-mesh move, which makes its empty output at
# GetDefaultPlace (no custom device on this wheel: SIGSEGV) and then calls p_send/p_recv (no CPU
# kernel; paddle-ext's cpu-collectives serves them on gloo). With the documented switch,
# install(pipeline_by_annotation=True), each passes against dense; the pipeline-parallel
# dist.parallelize with its gradients and updates checked per parameter.
PASS_WITH_PIPELINE_SWITCH = [
    "reshard_same_status[1-D mesh [0]->[1]]", "reshard_same_status[nd mesh S0,P]",
    "reshard_s_to_r_cross_mesh[S0 on [0,1] -> R on [1,0]]", "dist.parallelize[pp]",
]

# Training scenarios whose result includes the per-parameter gradient check (init:/grad:/step1:
# keys, scenario_ranks_train.sgd_probe): shard_optimizer with ShardingStage1/2/3 (1-D and
# multi-dim mesh) and dist.parallelize's mp, sp and dp/sharding-level plans. The pipelining
# schedules (no optimizer in their file) check each layer's gradient, without an update;
# dist.to_static (its gradients live in the static program) checks each parameter's first SGD
# update, without the gradient. Left out: the AMP O2 case (bfloat16 gradients cannot meet 1e-5),
# dist.parallelize[pp] (crashes in every mode of the table; checked with the pipeline switch,
# test_crashing_scenarios_pass_with_the_pipeline_switch), checkpoint (no training).
GRADIENT_CHECKED = [n for n in NAMES
                    if (n.startswith("shard_optimizer[") and "AMP" not in n)
                    or (n.startswith("dist.parallelize[") and n != "dist.parallelize[pp]")]
GRADIENT_ONLY = [n for n in NAMES if n.startswith("pipelining[")]
UPDATE_ONLY = [n for n in NAMES if n.startswith("dist.to_static[")]


def test_a_deadlock_is_its_timeout_even_when_the_silent_peer_aborts():
    # both ranks of a deadlock wait in gloo; the first to time out exits, and its peer either
    # times out too or ends in gloo's I/O thread (SIGABRT) first: either way the outcome is the timeout
    line = ("RuntimeError: [/paddle/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:133] TIMEOUT "
            "self_rank = -1 pair_rank = none peer_str = none")
    crash = "the rank's process exited without a result (exit code -6; a signal or a crash; see its log)"
    both = sr.classify([("error", line, None), ("error", line, None)])
    for per_rank in ([("error", line, None), None], [None, ("error", line, None)]):
        got = sr.without_result(per_rank, crash)
        assert (got.status, got.detail) == (both.status, both.detail) == ("error", line)
    assert sr.without_result([("error", "ValueError: bad shape", None), None], crash).status == "crash"
    assert sr.without_result([None, None], crash).detail == crash


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


def test_pinned_sets_name_real_scenarios():
    unknown = sorted((PASSES_ONLY_WITH_EXT - set(FAILS_ALONE)) | (PASSES_ONLY_WITH_EXT - set(NAMES)))
    assert not unknown, f"PASSES_ONLY_WITH_EXT names scenarios not in FAILS_ALONE: {unknown}"
    assert len(GRADIENT_CHECKED) == 12, GRADIENT_CHECKED   # 6 shard_optimizer + 6 parallelize (pp left out)
    assert len(GRADIENT_ONLY) == 2 and len(UPDATE_ONLY) == 3, (GRADIENT_ONLY, UPDATE_ONLY)


@pytest.mark.parametrize("mode", sr.MODES[1:])
@pytest.mark.parametrize("name", sorted(FAILS_ALONE))
def test_only_with_paddle_ext(outcomes, mode, name):
    o = outcomes[mode][name]
    if name in PASSES_ONLY_WITH_EXT:
        assert o.status == "pass", f"{mode}: expected to pass with paddle-ext, got {o.status}: {o.detail}"
    else:
        assert o.status != "pass", f"{mode}: {name} now passes with paddle-ext: add it to PASSES_ONLY_WITH_EXT"


@pytest.mark.parametrize("mode", sr.MODES)
@pytest.mark.parametrize("name", GRADIENT_CHECKED + GRADIENT_ONLY + UPDATE_ONLY)
def test_gradients_were_checked(outcomes, mode, name):
    """A pass of a training scenario includes, for every parameter, its gradient and its update
    against the dense model (classify fails the scenario otherwise); here: that they were there."""
    o = outcomes[mode][name]
    if o.status != "pass":
        assert name in FAILS_ALONE and mode == "alone", f"{mode}: {o.status}: {o.detail}"
        return
    params = sorted(k.split(":", 1)[1] for k in o.values if k.startswith("init:"))
    kinds = ("grad",) if name in GRADIENT_ONLY else ("update",) if name in UPDATE_ONLY else ("grad", "update")
    assert len(params) >= 2, f"{mode}: no per-parameter gradient records: {sorted(o.values)[:6]}"
    assert sorted(o.grads) == sorted(f"{kind}:{p}" for p in params for kind in kinds)
    for label, (rel, ratio) in o.grads.items():
        assert sr.grad_ok(rel, ratio), f"{mode}: {label}: max rel err {rel:.2e}, norm ratio {ratio:.7f}"


def _batched(names):
    table = sr._registry()
    return [n for n in names if table[n].group != "isolated"]


@pytest.fixture(scope="module")
def reordered(tmp_path_factory):
    """The batched scenarios (those sharing launches) in reverse order, in every mode: one more
    launch series per mode (about 10 s each)."""
    root = tmp_path_factory.mktemp("reordered")
    return {m: sr.run_mode(m, list(reversed(_batched(NAMES))), root / m) for m in sr.MODES}


@pytest.mark.long_tail   # one more launch series per mode (about 37 s in all): README's long tail
@pytest.mark.parametrize("mode", sr.MODES)
def test_sharing_a_launch_changes_no_result(outcomes, reordered, mode):
    """Scenario isolation: each batched scenario gives the same outcome (the same error) and
    bit-identical values whether it runs early or late in its launch (in reverse order, every
    scenario that ran after another now runs before it)."""
    changed = []
    for name in _batched(NAMES):
        a, b = outcomes[mode][name], reordered[mode][name]
        same_error = a.status == "crash" or sr.stable_detail(a.detail) == sr.stable_detail(b.detail)
        if a.status != b.status or not same_error:
            changed.append(f"{name}: {a.status} -> {b.status} ({b.detail[:120]})")
        elif set(a.values) != set(b.values) or any(not np.array_equal(a.values[k], b.values[k]) for k in a.values):
            changed.append(f"{name}: values differ")
    assert not changed, "results depend on the order in the launch:\n" + "\n".join(changed)


def test_compatibility_doc_is_current(outcomes):
    """docs/compatibility.md holds the table these runs generate (tools/compat_scenarios.py --write)."""
    doc = DOC.read_text() if DOC.exists() else ""
    current = sr.section_of(doc)
    assert current is not None, "docs/compatibility.md lacks the Paddle's scenarios section"
    assert current == sr.render(outcomes), \
        "docs/compatibility.md's Paddle's scenarios table is stale: run python tools/compat_scenarios.py --write"


@pytest.fixture(scope="module")
def with_pipeline_switch(tmp_path_factory):
    return sr.run_mode(sr.PIPELINE_MODE, PASS_WITH_PIPELINE_SWITCH, tmp_path_factory.mktemp("pipeline_switch"))


@pytest.mark.parametrize("name", PASS_WITH_PIPELINE_SWITCH)
def test_crashing_scenarios_pass_with_the_pipeline_switch(outcomes, with_pipeline_switch, name):
    for mode in sr.MODES:   # what the switch changes: a crash in every mode of the table
        assert outcomes[mode][name].status != "pass", f"{name} passes in {mode}: drop it from the list"
    o = with_pipeline_switch[name]
    assert o.status == "pass", f"install(pipeline_by_annotation=True): {o.status}: {o.detail}"
    if name.startswith("dist.parallelize["):
        params = sorted(k.split(":", 1)[1] for k in o.values if k.startswith("init:"))
        assert len(params) >= 2 and sorted(o.grads) == sorted(f"{kind}:{p}" for p in params
                                                             for kind in ("grad", "update"))
        for label, (rel, ratio) in o.grads.items():
            assert sr.grad_ok(rel, ratio), f"{label}: max rel err {rel:.2e}, norm ratio {ratio:.7f}"
