"""Checkpoints across plans: Paddle's save/load_state_dict on CPU ranks, bit-exact, training continues."""
import functools

import numpy as np
import pytest

import checkpoint_ranks as cr
from paddle_ext.demo.plans import parse_plan
from paddle_ext.demo.train import RunConfig, reference_losses
from paddle_ext.testing import run_ranks

pytestmark = pytest.mark.multirank

BEFORE, AFTER = 2, 2

# (saved under, loaded under): a chain that changes the layout of every sharded parameter and
# of the optimizer state, across world sizes (2 -> 4 -> 2 ranks) and back to where it started
CHAIN = [("tp2", "dp2"), ("dp2", "pp2"), ("pp2", "tp2"), ("tp2", "zero3"), ("zero3", "dp2-tp2"),
         ("dp2-tp2", "tp2")]


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


@pytest.mark.parametrize("src, dst", CHAIN, ids=[f"{a}->{b}" for a, b in CHAIN])
def test_checkpoint_across_plans(src, dst, tmp_path):
    path = str(tmp_path / "ckpt")
    saved = run_ranks(cr.train_save_continue, nproc=parse_plan(src).world_size, args=(src, BEFORE, AFTER, path),
                      timeout=240, log_dir=tmp_path / "log_save")
    loaded = run_ranks(cr.load_continue, nproc=parse_plan(dst).world_size, args=(dst, BEFORE, AFTER, path),
                       timeout=240, log_dir=tmp_path / "log_load")
    _assert_same_state(_union(saved), _union(loaded), f"{src}->{dst}")
    dense = _dense_losses()
    # both runs against the dense single-process training: the saving plan all along, and the
    # loading plan for the steps after the checkpoint (its own init and first step overwritten)
    np.testing.assert_allclose(saved[0]["before"] + saved[0]["after"], dense, rtol=1e-5)
    np.testing.assert_allclose(loaded[0]["after"], dense[BEFORE:], rtol=1e-5)


def test_loader_needs_the_cpu_fix(tmp_path):
    path = str(tmp_path / "ckpt")
    run_ranks(cr.train_save_continue, nproc=2, args=("tp2", 1, 0, path), timeout=240, log_dir=tmp_path / "log_save")
    outcome = run_ranks(cr.load_without_cpu_fix, nproc=2, args=("dp2", path), timeout=240,
                        log_dir=tmp_path / "log_load")
    assert all("No available device found" in o for o in outcome), outcome
