"""dist.to_static under plain ``paddle_ext.install()`` (no ``static_engine=True``) on a 2x2
[dp, mp] mesh: the program's collectives use two rings (mp [0, 1] and dp [0, 2] on rank 0).

Paddle 3.3.1's CPU collective kernels all take the communicator the process bound first, so
without the ``static-gloo-rings`` fix the dp gradient all_reduce ran on the mp ring: SGD
updates differed from the dense run from step 1 on (PaddleNLP's GPT on dp2 x mp2: each rank
returned its own dp shard's loss, steps 1-2 off by 0.4%). A program on one ring (DP over 4
ranks) keeps Paddle's kernels.

The same launch runs ZeRO through dist.to_static (``shard_optimizer`` with ShardingStage1/2 on
"dp", AdamW): Paddle's static reshard turns the Partial gradients into dp shards with
``reduce_scatter``, which has no CPU kernel ("Unimplemented cpu kernel for CReduceScatterOp");
paddle-ext runs it on its gloo op (all_reduce, then this rank's block), with plain ``install()``
(also on one ring, DP4) and with ``install(static_engine=True)``.
"""
import numpy as np

import pytest

import static_ranks as sr
from paddle_ext.testing import run_ranks

pytestmark = pytest.mark.multirank

STEPS = 4
ONE_STAGE = {"layer_meshes": [0, 0], "steps": STEPS, "no_static": True}
LOWERED = "static-gloo-rings"
ADAMW = {**ONE_STAGE, "optimizer": "adamw"}
ZERO = {"ZeRO1 DP+TP": {**ADAMW, "dp": 2, "tp": 2, "zero": 1},
        "ZeRO2 DP4": {**ADAMW, "dp": 4, "zero": 2},
        # last: install_static() stays applied in the ranks' processes
        "ZeRO2 DP+TP static_engine": {**ADAMW, "dp": 2, "tp": 2, "zero": 2, "no_static": False}}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    cfgs = {"DP+TP mlp": {**ONE_STAGE, "dp": 2, "tp": 2},
            "DP+TP transformer": {**ONE_STAGE, "dp": 2, "tp": 2, "model": "transformer"},
            "DP4 mlp": {**ONE_STAGE, "dp": 4},
            **ZERO}
    names = list(cfgs)
    results = run_ranks(sr.train_many, nproc=4, args=([cfgs[n] for n in names],), timeout=300,
                        log_dir=tmp_path_factory.mktemp("static_two_rings"))
    return names, cfgs, results


def _relative_errors(run, name):
    names, cfgs, results = run
    i = names.index(name)
    per_rank = [r[i] for r in results]
    errors = [r["error"] for r in per_rank if "error" in r]
    assert not errors, f"{name}: {errors[0]}"
    # each dp rank reports its own shard's mean loss; equal shards: their mean is the batch mean
    got = np.mean([[float(np.mean(step)) for step in r["losses"]] for r in per_rank], axis=0)
    want, want_params = sr.dense_run(cfgs[name])
    if cfgs[name].get("optimizer", "sgd") == "sgd":   # each parameter's SGD update, against dense
        sr.check_updates(name, per_rank, cfgs[name], want_params)
    return np.abs(got - np.array(want)) / np.abs(want), per_rank


@pytest.mark.parametrize("name", ["DP+TP mlp", "DP+TP transformer"])
def test_dp_tp_under_plain_install_matches_dense(run, name):
    err, per_rank = _relative_errors(run, name)
    assert np.max(err) < 1e-5, f"{name}: relative loss error per step {err.tolist()}"
    # the two rings were lowered to paddle-ext's gloo ops, on every rank
    assert all(any(LOWERED in line for line in r["log"]) for r in per_rank), per_rank[0]["log"]


def test_one_ring_keeps_paddles_kernels(run):
    err, per_rank = _relative_errors(run, "DP4 mlp")
    assert np.max(err) < 1e-5, f"DP4: relative loss error per step {err.tolist()}"
    assert not any(LOWERED in line for r in per_rank for line in r["log"])


@pytest.mark.parametrize("name", list(ZERO))
def test_zero_through_to_static_matches_dense(run, name):
    err, per_rank = _relative_errors(run, name)
    assert np.max(err) < 1e-5, f"{name}: relative loss error per step {err.tolist()}"
    if ZERO[name]["no_static"]:  # plain install(): the reduce_scatter is why this program is lowered
        assert all(any(LOWERED in line and "pd_op.reduce_scatter" in line for line in r["log"])
                   for r in per_rank), per_rank[0]["log"]
