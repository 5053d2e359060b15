"""tools/bench_dispatch.py's paired ratio: per block of calls the dispatched median over the
native median timed just before, so a machine that switches between a fast and a slow state
during the run weighs on both sides of every ratio alike."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
import bench_dispatch as bd  # noqa: E402


def test_a_slow_state_over_half_the_run_leaves_the_paired_ratio_alone(monkeypatch):
    # a fake clock: native calls take 26 us, dispatched 30 us (1.154x), both 1.8x longer while the
    # machine is in its slow state, which here starts after block 0's native calls and ends after
    # block 20's dispatched ones: 20 of 41 native blocks slow, 21 of 41 dispatched ones
    clock, count = [0.0], [0]
    warm, per = 40, 5                      # _timed's 20 warm-up pairs, then 5 calls a side a block
    slow = range(warm + per, warm + 20 * 2 * per + 2 * per)

    def call(us):
        def fn():
            clock[0] += us * 1e-6 * (1.8 if count[0] in slow else 1.0)
            count[0] += 1
        return fn

    monkeypatch.setattr(bd.time, "perf_counter", lambda: clock[0])
    n_us, d_us, paired = bd._timed(call(26.0), call(30.0), calls=41 * per, rounds=41)
    assert d_us / n_us > 2.0   # the two run medians fall on either side of the switch
    ratio, low, high = bd.paired_ratio([paired])
    assert np.isclose(ratio, 30.0 / 26.0) and low <= ratio <= high


def test_the_row_is_the_rank_with_the_larger_median():
    fast, slow = [1.10, 1.12, 1.11, 1.13, 1.09] * 8, [1.18, 1.21, 1.19, 1.20, 1.22] * 8
    ratio, low, high = bd.paired_ratio([fast, slow])
    assert ratio == np.median(slow) and low <= 1.20 <= high
    assert bd.paired_ratio([slow, fast])[0] == ratio


def test_timed_returns_one_paired_ratio_per_block():
    ticks = iter(range(10 ** 6))
    n_us, d_us, paired = bd._timed(lambda: next(ticks), lambda: next(ticks), calls=40, rounds=8)
    assert len(paired) == 8 and all(r > 0 for r in paired)
    assert n_us > 0 and d_us > 0
