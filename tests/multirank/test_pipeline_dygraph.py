"""Every schedule on real gloo ranks against the single-process reference (one launch per size).

Each rank returns, per configuration, the max relative error of its per-microbatch losses,
of every gradient it holds and of its parameters after two SGD steps. A configuration whose
constraints do not hold must fail at setup, on every rank, with the generator's message.
"""
import pytest

import pipeline_ranks as pr
from paddle_ext.errors import ScheduleError
from paddle_ext.passes.schedules import generate_schedule, get_schedule_info, schedule_names
from paddle_ext.testing import run_ranks

pytestmark = pytest.mark.multirank

TOL = 1e-5
NAMES = schedule_names()
CHUNKS = {n: get_schedule_info(n).default_chunks for n in NAMES}
# the schedules that place several stages per rank by default but also run with one (the looped ones)
LOOPED = tuple(n for n in NAMES if CHUNKS[n] > 1 and get_schedule_info(n).valid_sizes(2, 4, 1))


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


def test_a_stage_output_that_is_a_strided_view_is_sent(tmp_path):
    """A stage may return a view (here a transpose); point-to-point sends need contiguous memory
    (gloo and NCCL both refuse a strided tensor: "The tensor must be contiguous")."""
    configs = [("1F1B", "transposing", 2, 1), ("ZBV", "transposing", 4, 2)]
    per_rank = run_ranks(pr.run_grid, nproc=2, args=(configs,), timeout=240, log_dir=tmp_path / "log")
    assert _check(per_rank, 2) == {("1F1B", "transposing"), ("ZBV", "transposing")}


@pytest.mark.long_tail   # every schedule runs on 2 ranks in CI, and 1F1B x tensor parallel on 4
def test_every_schedule_on_4_ranks_matches_single_process(tmp_path):
    configs = _grid(4, (4, 8), (8,))
    per_rank = run_ranks(pr.run_grid, nproc=4, args=(configs,), timeout=300, log_dir=tmp_path / "log")
    passed = _check(per_rank, 4)
    assert passed == {(n, k) for n in NAMES for k in ("mlp", "transformer")}


def test_pipeline_times_tensor_parallel_on_4_ranks(tmp_path):
    """pp2 x tp2: DistTensor parameters on each stage's tp sub-mesh, split backward and V shape included."""
    names = ["1F1B", "ZBH1", "ZBV"]
    per_rank = run_ranks(pr.run_pp_tp, nproc=4, args=(names,), timeout=240, log_dir=tmp_path / "log")
    for results in per_rank:
        assert [r["name"] for r in results] == names
        for r in results:
            assert r["dist_params"], r
            assert r["loss"] < TOL and r["grad"] < TOL and r["param"] < TOL, r


def test_bad_inputs_raise_on_every_rank_without_hanging_and_the_doc_snippet_runs(tmp_path):
    from pathlib import Path

    doc = Path(__file__).resolve().parents[2] / "docs" / "pipeline_dygraph.md"
    # no rank hangs: a rank that waited on a peer that gave up would fail the run at its timeout
    both = run_ranks(pr.run_bad_inputs_and_doc, nproc=2, args=(str(doc),), timeout=120, log_dir=tmp_path / "log")
    assert [b["doc_blocks"] for b in both] == [1, 1]
    per_rank = [b["bad"] for b in both]
    expected = {
        "split": "the model is split into 3 stages, but 2 pipeline ranks x 1 stage(s) on this rank make 2",
        "placement": "VPP places stages [0, 2] on pipeline rank 0",
        "constraint_zbv": "ZBV: n_chunks (--chunks, stages per rank) must be 2",
        "constraint_dualpipev": "DualPipeV: n_microbatches (--microbatches) must be >= 4",
        "mismatch": "differs from another rank's",
        "batch": "has 6 rows (dim 0), which does not split into 4 equal microbatches",
        "target": "holds the last stage and a loss_fn: call step(..., target=y, losses=[]) there",
    }
    for rank, out in enumerate(per_rank):
        for case, text in expected.items():
            assert text in out[case], (rank, case, out[case])
            assert "no rank started" in out[case], (rank, case, out[case])
    assert len(per_rank[1]["after"]) == 4  # the pipeline still works after the errors
