"""Predicted against measured (pure): Spearman's rank correlation and relative errors.

>>> spearman([1, 2, 3, 4], [10, 20, 30, 40]), spearman([1, 2, 3], [3, 2, 1])
(1.0, -1.0)
>>> spearman([1, 2, 2, 3], [1, 3, 2, 4])   # ties take their average rank
0.948683298051
"""
from __future__ import annotations

from typing import List, Optional, Sequence


def ranks(values: Sequence[float]) -> List[float]:
    """1-based ranks, ties sharing the average of their positions."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(x: Sequence[float], y: Sequence[float]) -> Optional[float]:
    """Pearson correlation of the ranks of ``x`` and ``y`` (None with fewer than 2 pairs or no spread)."""
    if len(x) != len(y) or len(x) < 2:
        return None
    rx, ry = ranks(x), ranks(y)
    n = len(x)
    mx, my = sum(rx) / n, sum(ry) / n
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    vx = sum((a - mx) ** 2 for a in rx) ** 0.5
    vy = sum((b - my) ** 2 for b in ry) ** 0.5
    return round(cov / (vx * vy), 12) if vx and vy else None


def relative_error(predicted: float, measured: float) -> Optional[float]:
    """``(predicted - measured) / measured``; None without a measurement."""
    if measured is None or not measured:
        return None
    return (predicted - measured) / measured


def summary(plans: Sequence[dict]) -> dict:
    """Over the plans that were run: Spearman of step times, how the plan predicted fastest
    measures against the fastest measured, and the memory error of each."""
    run = [p for p in plans if p.get("measured_step_s") is not None]
    if not run:
        return {"run": 0}
    pred = [p["predicted_step_s"] for p in run]
    meas = [p["measured_step_s"] for p in run]
    fastest_pred = min(run, key=lambda p: p["predicted_step_s"])
    fastest_meas = min(run, key=lambda p: p["measured_step_s"])
    mem = {p["name"]: relative_error(p["predicted_peak_bytes"], p["measured_peak_bytes"]) for p in run}
    return {"run": len(run), "spearman_step": spearman(pred, meas),
            "fastest_predicted": fastest_pred["name"], "fastest_measured": fastest_meas["name"],
            "fastest_predicted_vs_fastest_measured": fastest_pred["measured_step_s"] / fastest_meas["measured_step_s"] - 1,
            "memory_relative_error": mem,
            "max_abs_memory_error": max(abs(v) for v in mem.values() if v is not None)}


__all__ = ["ranks", "spearman", "relative_error", "summary"]
