"""Every schedule on real gloo ranks against the single-process reference (one launch per size).

Each rank returns, per configuration, the max relative error of its per-microbatch losses,
of every gradient it holds and of its parameters after two SGD steps. A configuration whose
constraints do not hold must fail at setup, on every rank, with the generator's message.
"""
import pytest

import pipeline_ranks as pr
from paddle_ext.errors import ScheduleError
from paddle_ext.passes.schedules import generate_schedule, schedule_names
from paddle_ext.testing import run_ranks

pytestmark = pytest.mark.multirank

TOL = 1e-5
NAMES = schedule_names()
CHUNKS = {"FThenB": 1, "1F1B": 1, "ZBH1": 1, "ZBH2": 1, "VPP": 2, "LoopedBFS": 2, "InterleavedZB": 2, "ZBV": 2,
          "DualPipeV": 2}
LOOPED = ("VPP", "LoopedBFS", "InterleavedZB")


def _grid(p, mlp_mbs, transformer_mbs):
    configs = [(n, "mlp", m, CHUNKS[n]) for n in NAMES for m in mlp_mbs]
    configs += [(n, "transformer", m, CHUNKS[n]) for n in NAMES for m in transformer_mbs]
    configs += [(n, "mlp", 2 * p, 1) for n in LOOPED]  # looped schedules with one stage per rank
    return configs


def _expected_setup_error(name, p, m, v):
    try:
        generate_schedule(name, p, m, v)
    except ScheduleError as exc:
        return str(exc)
    return None


def _check(per_rank, p):
    passed = set()
    for rank, results in enumerate(per_rank):
        for r in results:
            name, model, m, v = r["config"]
            expected = _expected_setup_error(name, p, m, v)
            if expected is not None:
                assert expected in r.get("setup_error", ""), (rank, r)
                continue
            assert "setup_error" not in r, (rank, r)
            assert r["loss"] < TOL and r["grad"] < TOL and r["param"] < TOL, (rank, r)
            if (n_stages := p * v) and (n_stages - 1) in pr_stages(name, rank, p, v):
                assert r["n_losses"] == m, (rank, r)
            passed.add((name, model))
    return passed


def pr_stages(name, rank, p, v):
    from paddle_ext.passes.runtime import stage_indices

    return stage_indices(name, rank, p, v)


def test_every_schedule_on_2_ranks_matches_single_process(tmp_path):
    configs = _grid(2, (2, 4, 6), (4,))
    per_rank = run_ranks(pr.run_grid, nproc=2, args=(configs,), timeout=240, log_dir=tmp_path / "log")
    passed = _check(per_rank, 2)
    assert passed == {(n, k) for n in NAMES for k in ("mlp", "transformer")}


def test_every_schedule_on_4_ranks_matches_single_process(tmp_path):
    configs = _grid(4, (4, 8), (8,))
    per_rank = run_ranks(pr.run_grid, nproc=4, args=(configs,), timeout=300, log_dir=tmp_path / "log")
    passed = _check(per_rank, 4)
    assert passed == {(n, k) for n in NAMES for k in ("mlp", "transformer")}
