"""The demo: every documented plan matches the single-process run, in losses and in gradients;
bad requests fail cleanly.

Gradients: per plan, one SGD step of its layout (``demo_ranks._probe``) against the same GPT
dense in this process (initial weights bit for bit; each parameter's gradient and applied update
to 1e-5 max relative error, norm ratio within 1e-5 of 1: ``scenario_ranks.classify``). AdamW,
the demo's optimizer, cannot see a gradient's scale; the losses stay as the second check.
"""
import functools
import subprocess
import sys

import numpy as np
import pytest

import demo_ranks
import scenario_ranks as sr
from paddle_ext.demo.plans import PLANS, parse_plan
from paddle_ext.demo.train import RunConfig, reference_losses
from paddle_ext.testing import run_ranks

pytestmark = pytest.mark.multirank
STEPS = 3
# the 4-rank plans are the long tail (the default demo, a 4-rank plan, runs in CI end to end)
WORLDS = [pytest.param(w, marks=pytest.mark.long_tail) if w == 4 else w
          for w in sorted({parse_plan(p).world_size for p in PLANS})]


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """world -> every plan of that world size, run in one launch (cached per module)."""
    @functools.lru_cache(maxsize=None)
    def run(world):
        plans = [p for p in PLANS if parse_plan(p).world_size == world]
        results = run_ranks(demo_ranks.run_plans, nproc=world, args=(plans, STEPS, "ZBV"), timeout=600,
                            log_dir=tmp_path_factory.mktemp(f"demo{world}") / "log")
        return plans, results
    return run


def _plan_results(launched, world):
    plans, results = launched(world)
    for plan in plans:
        for rank, per_rank in enumerate(results):
            assert not isinstance(per_rank[plan], str), f"{plan} on rank {rank}: {per_rank[plan]}"
    return plans, results


@pytest.mark.parametrize("world", WORLDS)
def test_every_documented_plan_matches_dense(launched, world):
    plans, results = _plan_results(launched, world)
    ref = reference_losses(RunConfig(steps=STEPS))
    for plan in plans:
        for rank, per_rank in enumerate(results):
            np.testing.assert_allclose(per_rank[plan]["losses"], ref, rtol=1e-4, err_msg=f"{plan} on rank {rank}")


@functools.lru_cache(maxsize=None)
def _dense_probe(plan_name):
    """One SGD step of the same GPT on the whole batch in this process: no mesh, no paddle-ext."""
    import paddle

    from paddle_ext.demo.data import make_batches
    from paddle_ext.demo.model import build_model, lm_loss
    from paddle_ext.demo.train import model_for
    from scenario_ranks_train import sgd_probe

    cfg, mcfg = RunConfig(plan=plan_name), model_for(parse_plan(plan_name))
    x, y = make_batches(1, cfg.batch, mcfg.seq_len, mcfg.vocab, cfg.seed)[0]
    model = build_model(mcfg, cfg.seed)
    opt = paddle.optimizer.SGD(demo_ranks.PROBE_LR, parameters=model.parameters())
    return sgd_probe(model.named_parameters(),
                     lambda: lm_loss(model(paddle.to_tensor(x)), paddle.to_tensor(y)).backward(), opt, False)


def _classify(results, plan, which):
    dense = _dense_probe(plan)
    per_rank = sr.fill_missing([r[plan][which] for r in results])
    assert set(per_rank[0]) == set(dense), f"{plan}: parameters differ from dense: {set(per_rank[0]) ^ set(dense)}"
    return sr.classify([("ok", d, dense) for d in per_rank])


@pytest.mark.parametrize("world", WORLDS)
def test_every_documented_plan_has_dense_gradients(launched, world):
    """Per plan and parameter: the initial weight bit for bit, the first step's gradient and the
    SGD update, assembled from every rank by their placements, against the dense model."""
    plans, results = _plan_results(launched, world)
    bad = []
    for plan in plans:
        o = _classify(results, plan, "probe")
        n = sum(1 for k in o.grads if k.startswith("grad:"))
        if o.status != "pass" or n != len(_dense_probe(plan)) // 3:
            bad.append(f"{plan}: {o.status} ({n} parameters measured): {o.detail[:600]}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("plan", sorted(demo_ranks.MUTATE))
def test_a_scaled_gradient_fails_the_demo_checks(launched, plan):
    """The test of the tests: one gradient x2 and one x0.5 (before it is recorded, or only in the
    step) fail exactly those parameters' checks; every other parameter still passes."""
    _, results = _plan_results(launched, parse_plan(plan).world_size)
    o = _classify(results, plan, "mutated")
    assert o.status == "wrong", f"{plan}: a x2 and a x0.5 gradient passed"
    failing = {label: ratio for label, (rel, ratio) in o.grads.items() if not sr.grad_ok(rel, ratio)}
    want = {f"{kind}:{n}": factor for n, (factor, when) in demo_ranks.MUTATE[plan].items()
            for kind in (("grad", "update") if when == "grad" else ("update",))}
    assert set(failing) == set(want), (plan, failing)
    for label, ratio in failing.items():
        assert ratio == pytest.approx(want[label], rel=1e-4), (plan, label, ratio)


def test_an_odd_world_plan_matches_dense(tmp_path):
    """sp3-tp3 on 3 ranks: odd groups and the model sized so every width splits in three."""
    proc = _demo("--plan", "sp3-tp3", "--steps", "3", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "on 3 CPU ranks" in proc.stdout
    assert float(proc.stdout.strip().splitlines()[-1].split("=")[1]) <= 1e-6


def _demo(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "paddle_ext", "demo", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_default_demo_cli_end_to_end(tmp_path):
    out = tmp_path / "out"
    proc = _demo("--steps", "3", "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("max_rel_loss_diff=") and float(last.split("=")[1]) <= 1e-4
    assert "replication audit: 0 op call(s)" in proc.stdout
    for name in ("results.json", "audit.txt", "schedule_ZBV.png", "logs"):
        assert (out / name).exists(), name


@pytest.mark.parametrize("args, needle", [
    (["--plan", "dp2-tp3x"], "cannot read 'tp3x'"),
    (["--plan", "dp2-tp2", "--nproc", "8"], "runs on exactly 4 ranks"),
    (["--plan", "pp2", "--schedule", "NoSuchSchedule"], "NoSuchSchedule"),
    (["--plan", "pp2", "--microbatches", "3"], "does not divide the batch"),
])
def test_bad_requests_fail_before_launch(args, needle, tmp_path):
    proc = _demo(*args, "--out", str(tmp_path), timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert needle in proc.stderr, proc.stderr
    assert not (tmp_path / "logs").exists()  # refused before any rank was launched


def test_failing_rank_ends_the_demo(tmp_path):
    proc = _demo("--plan", "tp2", "--steps", "2", "--inject-fault", "1", "--timeout", "120", "--out", str(tmp_path))
    assert proc.returncode == 1
    assert "rank 1 raised" in proc.stderr and "injected fault on rank 1" in proc.stderr, proc.stderr[-2000:]
    assert "rank 0 timeout" not in proc.stderr and "rank 1 timeout" not in proc.stderr  # bounded by the fault
