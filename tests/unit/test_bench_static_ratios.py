"""tools/bench_static.py's per-launch ratios: each schedule over FThenB within one launch (the
slower rank's median step after the first), kept per launch; a failed schedule adds none."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
import bench_static as bs  # noqa: E402

ROWS = [("FThenB", "FThenB", [0, 0, 1, 1], 1), ("ZBV", "ZBV", [0, 1, 1, 0], 2), ("VPP", "VPP", [0, 1, 0, 1], 2)]


def _rank(fthenb, zbv):
    # the first step (program build) is left out of the median
    return [{"step_seconds": [9.0] + fthenb}, {"step_seconds": [9.0] + zbv}, {"error": "RuntimeError: boom"}]


def test_ratio_is_within_the_launch_and_of_the_slower_rank():
    best: dict = {}
    bs._keep_ratios(best, [_rank([1.0, 1.0, 1.2], [0.9, 0.9, 0.9]), _rank([1.0, 1.1, 1.1], [0.8, 1.0, 1.0])], ROWS)
    bs._keep_ratios(best, [_rank([2.0, 2.0, 2.0], [2.2, 2.2, 2.2]), _rank([2.0, 2.0, 2.0], [2.0, 2.0, 2.0])], ROWS)
    # launch 1: FThenB's slower rank 1.1 (rank 1's median), ZBV's 1.0 (rank 1's); launch 2: 2.0 and 2.2
    assert best[("FThenB", "ratios")] == [1.0, 1.0]
    assert [round(r, 6) for r in best[("ZBV", "ratios")]] == [round(1.0 / 1.1, 6), 1.1]
    assert ("VPP", "ratios") not in best   # failed on a rank: no ratio


def test_rows_and_micro_batches_below_one_are_refused_before_any_launch(capsys):
    import pytest

    for argv in (["--rows", "0"], ["--acc", "0"]):
        with pytest.raises(SystemExit):
            bs.main(argv)
        assert "must be at least 1" in capsys.readouterr().err
