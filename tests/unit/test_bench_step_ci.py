"""tools/bench_step.py's confidence interval of a median ratio: order statistics at the
binomial ranks, so that a run says whether it can tell a ratio from 1.03 at all."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
import bench_step as bs  # noqa: E402


def test_ranks_are_the_binomial_ones():
    # n = 100: k = floor((100 - 1.96 * 10) / 2) = 40, so the 41st and the 60th smallest (1-based)
    values = np.arange(1, 101)[::-1]   # order does not matter
    assert bs.median_ci(values) == (41.0, 60.0)


def test_covers_the_true_median_about_95_percent_of_the_time():
    rng = np.random.default_rng(0)
    hits = sum(lo <= 1.0 <= hi for lo, hi in (bs.median_ci(rng.normal(1.0, 0.1, 50)) for _ in range(2000)))
    assert 0.93 <= hits / 2000 <= 0.98


def test_narrows_with_more_rounds_and_falls_back_to_the_range():
    rng = np.random.default_rng(1)
    few, many = rng.normal(1.0, 0.1, 24), rng.normal(1.0, 0.1, 400)
    assert np.subtract(*bs.median_ci(many)[::-1]) < np.subtract(*bs.median_ci(few)[::-1])
    assert bs.median_ci([3.0, 1.0, 2.0]) == (1.0, 3.0)   # too few for the ranks: the whole range
    with pytest.raises(ValueError, match="no values"):
        bs.median_ci([])
