"""Checkpoints across plans: Paddle's save/load_state_dict on CPU ranks, bit-exact, training continues.

Training continues on gradients, not only on losses: the first step of the saving plan (from the
seed's weights) and the first step of every loading plan after its load (from the loaded weights
and AdamW state) are recorded on the ranks (``checkpoint_ranks._record_next_step``) and checked,
per parameter, against the same step of the GPT dense in this process with the same weights and
optimizer state: the gradient, and the update AdamW applied (against the dense AdamW applying
the run's gradient from that state: see ``_dense_step``), max relative error and norm ratio
(``scenario_ranks.classify``).
"""
import functools

import numpy as np
import pytest

import checkpoint_ranks as cr
import scenario_ranks as sr
from paddle_ext.demo.data import make_batches
from paddle_ext.demo.plans import parse_plan
from paddle_ext.demo.train import RunConfig, reference_losses
from paddle_ext.errors import HarnessError
from paddle_ext.testing import run_ranks

pytestmark = pytest.mark.multirank

BEFORE, AFTER = 2, 2

# Plans in the order a checkpoint travels: trained and saved under the first, then each plan
# loads what the one before it wrote and saves it again under its own layout. Every link changes
# the layout of every sharded parameter and of the optimizer state, across world sizes
# (2 -> 4 -> 2 ranks), and the chain ends where it started.
CHAIN = ["tp2", "dp2", "pp2", "tp2", "zero3", "dp2-tp2", "tp2"]
LINKS = list(zip(CHAIN, CHAIN[1:]))


@functools.lru_cache(maxsize=1)
def _dense_losses() -> tuple:
    """The same GPT, seed, batches and AdamW trained dense in this one process, no checkpoint."""
    return tuple(reference_losses(RunConfig(steps=BEFORE + AFTER, batch=8, seed=0, lr=cr.LR), cr.CFG))


def _union(per_rank):
    """Every rank's (model, optimizer) states merged: a pipeline rank holds only its stages."""
    model, opt = {}, {}
    for result in per_rank:
        model.update(result["state"][0])
        opt.update(result["state"][1])
    return model, opt


def _assert_same_state(saved, loaded, label):
    for part in ("model", "optimizer"):
        s, l = saved[0 if part == "model" else 1], loaded[0 if part == "model" else 1]
        assert set(s) == set(l), f"{label}: {part} keys differ: {sorted(set(s) ^ set(l))[:5]}"
        for key in s:
            assert s[key].dtype == l[key].dtype and s[key].shape == l[key].shape, (label, key)
            assert np.array_equal(s[key], l[key]), f"{label}: {part} state {key} differs after the round trip"


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """One launch per plan of CHAIN: [(checkpoint dir, per-rank results) or (None, the failure)]."""
    root = tmp_path_factory.mktemp("checkpoint_chain")
    first = str(root / "0-ckpt")
    runs = [(first, run_ranks(cr.train_save_continue, nproc=parse_plan(CHAIN[0]).world_size,
                              args=(CHAIN[0], BEFORE, AFTER, first), timeout=240, log_dir=root / "0-log"))]
    for i, plan in enumerate(CHAIN[1:], start=1):
        load_from, save_to = runs[-1][0], str(root / f"{i}-ckpt")
        if load_from is None:
            runs.append((None, f"not run: the link before it failed ({runs[-1][1]})"))
            continue
        try:   # the first link also tries Paddle's own loader first (test_loader_needs_the_cpu_fix)
            runs.append((save_to, run_ranks(cr.load_continue, nproc=parse_plan(plan).world_size,
                                            args=(plan, BEFORE, AFTER, load_from, save_to, i == 1), timeout=240,
                                            log_dir=root / f"{i}-log")))
        except HarnessError as exc:
            runs.append((None, str(exc)))
    return runs


def test_saving_plan_trains_like_dense(chain):
    saved = chain[0][1]
    np.testing.assert_allclose(saved[0]["before"] + saved[0]["after"], _dense_losses(), rtol=1e-5)


@pytest.mark.parametrize("link", range(len(LINKS)), ids=[f"{a}->{b}" for a, b in LINKS])
def test_checkpoint_across_plans(chain, link):
    (src, dst), (_, saved), (where, loaded) = LINKS[link], chain[link], chain[link + 1]
    assert where is not None, f"{src}->{dst}: {loaded}"
    # what the loading plan holds after the load equals what the saving plan held when it saved
    # (the first plan's trained state; later plans re-save the state they loaded)
    _assert_same_state(_union(saved), _union(loaded), f"{src}->{dst}")
    # and it trains on like the dense single-process run from the checkpoint's step (its own
    # init and first step were overwritten by the load)
    np.testing.assert_allclose(loaded[0]["after"], _dense_losses()[BEFORE:], rtol=1e-5)


def _assembled(per_rank: list) -> dict:
    """Every record of the ranks' ``first_step``, assembled to its global value by placements."""
    filled = sr.fill_missing([r["first_step"] for r in per_rank])
    return {k: sr.assemble([d[k] for d in filled]) for k in filled[0]}


def _dense_step(step: int, start: dict | None, run_grads: dict) -> dict:
    """Step ``step`` of the GPT dense in this process with AdamW: from the seed's weights (``start``
    None) or from ``start``'s ``init:`` weights and ``opt:`` AdamW state. Returns per parameter
    ``init:`` (the weights it starts from), ``grad:`` (its own gradient) and ``step1:``: the
    weights after AdamW applied ``run_grads`` (the run's gradients, assembled) from that state.

    The update is checked from the run's gradient, which ``grad:`` checks against the dense one on
    its own: AdamW's step divides by ``sqrt(v) + eps``, so from two gradients equal to 1e-7 the
    updates of near-zero elements differ by far more; from the same gradient and state any
    difference is the optimizer's (its sharded states, ZeRO's reshards, a rescaled gradient)."""
    import paddle

    from paddle_ext.checkpoint import optimizer_state
    from paddle_ext.demo.model import build_model, lm_loss

    model = build_model(cr.CFG, seed=0)
    named = list(model.named_parameters())
    opt = paddle.optimizer.AdamW(cr.LR, parameters=model.parameters())
    if start is not None:
        for name, p in named:
            p.set_value(start[f"init:{name}"])
        # the run's optimizer state, under the dense optimizer's own keys (internal names)
        kinds = {k.rsplit("/", 1)[1] for k in start if k.startswith("opt:")}
        keys = optimizer_state(dict(named), {f"{p.name}_{kind}": f"{p.name}_{kind}"
                                             for p in model.parameters() for kind in kinds})
        opt.set_state_dict({keys[k[4:]]: paddle.to_tensor(v) for k, v in start.items() if k.startswith("opt:")})
    out = {f"init:{n}": np.array(p.numpy(), copy=True) for n, p in named}
    x, y = make_batches(BEFORE + AFTER, 8, cr.CFG.seq_len, cr.CFG.vocab, seed=0)[step]
    lm_loss(model(paddle.to_tensor(x)), paddle.to_tensor(y)).backward()
    for n, p in named:
        out[f"grad:{n}"] = np.array(p.grad.numpy(), copy=True)
        p.grad.set_value(paddle.to_tensor(run_grads[f"grad:{n}"]))
    opt.step()
    out.update({f"step1:{n}": np.array(p.numpy(), copy=True) for n, p in named})
    if start is not None:   # every optimizer state the run had was used
        assert not opt._accumulators_holder, sorted(opt._accumulators_holder)[:5]
    return out


def _check_step(per_rank, dense, label):
    dense_names = {k.split(":", 1)[1] for k in dense if k.startswith("init:")}
    run_names = {k.split(":", 1)[1] for r in per_rank for k in r["first_step"] if k.startswith("init:")}
    assert run_names == dense_names, f"{label}: parameters differ from dense: {sorted(run_names ^ dense_names)[:5]}"
    filled = sr.fill_missing([r["first_step"] for r in per_rank])
    o = sr.classify([("ok", d, dense) for d in filled])
    assert o.status == "pass", f"{label}: {o.detail[:800]}"
    assert len(o.grads) == 2 * len(dense_names), sorted(o.grads)[:4]


def test_saving_plan_first_step_matches_dense(chain):
    """The saving plan's first step from the seed's weights (bit for bit the dense model's):
    every parameter's gradient and AdamW update."""
    run = _assembled(chain[0][1])
    _check_step(chain[0][1], _dense_step(0, None, run), CHAIN[0])


@pytest.mark.parametrize("link", range(len(LINKS)), ids=[f"{a}->{b}" for a, b in LINKS])
def test_training_continues_with_dense_gradients(chain, link):
    """The loading plan's first step after the load, from the loaded weights and AdamW state:
    every parameter's gradient and update against the dense model's same step from that state."""
    (src, dst), (where, loaded) = LINKS[link], chain[link + 1]
    assert where is not None, f"{src}->{dst}: {loaded}"
    start = _assembled(loaded)
    assert any(k.startswith("opt:") for k in start), "no optimizer state recorded"
    _check_step(loaded, _dense_step(BEFORE, start, start), f"{src}->{dst}")


def test_the_continuation_checks_see_a_scaled_gradient(chain):
    """The test of the tests, on the records of the first link (no launch): the dense AdamW
    applying a gradient x2 from the loaded state no longer gives the run's update, and a
    recorded gradient x0.5 no longer matches the dense one; every other parameter still passes."""
    loaded = chain[1][1]
    start = _assembled(loaded)
    doubled, halved = "blocks.1.mlp.up.weight", "head.proj.weight"
    run_grads = dict(start, **{f"grad:{doubled}": start[f"grad:{doubled}"] * 2})
    dense = _dense_step(BEFORE, start, run_grads)
    filled = sr.fill_missing([r["first_step"] for r in loaded])
    for d in filled:
        rec = d[f"grad:{halved}"]
        if rec[1] is not None:
            d[f"grad:{halved}"] = rec[:1] + (rec[1] * 0.5,) + rec[2:]
    o = sr.classify([("ok", d, dense) for d in filled])
    failing = {label for label, (rel, ratio) in o.grads.items() if not sr.grad_ok(rel, ratio)}
    assert failing == {f"update:{doubled}", f"grad:{halved}"}, failing


def test_loader_needs_the_cpu_fix(chain):
    where, loaded = chain[1]   # dp2 loading the tp2 checkpoint, first with Paddle's own loader
    assert where is not None, loaded
    assert all("No available device found" in str(r["without_fix"]) for r in loaded), \
        [r["without_fix"] for r in loaded]
