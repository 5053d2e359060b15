"""A plan's measured step from its passes: each pass's pace, then the median paced pass.

``plan --run`` runs every chosen plan once per pass, pass after pass. On a shared machine the pace
of a whole pass moves by more than the best plans differ: the geometric mean of the demo's eight
best plans' steps moved by as much as 31% within one run of three passes, while the eight lie
within 20% of each other (docs/measurements/plan_rounds.md, "Run rules and what the model leaves
out"). A pass's **pace** is that geometric mean over the plans measured in every pass, divided
by the mean of all passes' (1.0: the run's mean pace); a plan's **paced** step in a pass is its
step divided by the pass's pace, i.e. what it would have measured at the run's mean pace. A
plan's figure is the median (lower middle) of its paced passes, leaving out passes during which
the host took more than ``steal_limit`` of the CPU while a cleaner one remains.

With fewer than :data:`MIN_PLANS_TO_PACE` plans a pass's mean is mostly the plans themselves, so
every pace is 1.0 and the figure is the plain median pass.

>>> [round(p, 4) for p in pass_paces({"a": [1.0, 2.0], "b": [2.0, 4.0], "c": [3.0, 6.0], "d": [4.0, 8.0]})]
[0.7071, 1.4142]
>>> median_pass([0.05, 0.09, 0.06], [None, 0.2, 0.0], steal_limit=0.05)
(0, [0, 2])
"""
from __future__ import annotations

import math
from typing import List, Mapping, Optional, Sequence, Tuple

__all__ = ["MIN_PLANS_TO_PACE", "median_pass", "pass_paces"]

MIN_PLANS_TO_PACE = 4


def pass_paces(steps: Mapping[str, Sequence[float]]) -> List[float]:
    """Each pass's pace (module docstring) from ``{plan: [step in pass 0, pass 1, ...]}``; plans
    missing a pass (a failed run) do not count. 1.0 for every pass with fewer than
    :data:`MIN_PLANS_TO_PACE` plans measured in all of them."""
    n_passes = max((len(v) for v in steps.values()), default=0)
    full = [v for v in steps.values() if len(v) == n_passes and all(s > 0 for s in v)]
    if n_passes < 2 or len(full) < MIN_PLANS_TO_PACE:
        return [1.0] * n_passes
    log_mean = [sum(math.log(v[j]) for v in full) / len(full) for j in range(n_passes)]
    centre = sum(log_mean) / n_passes
    return [math.exp(m - centre) for m in log_mean]


def median_pass(values: Sequence[float], steal: Sequence[Optional[float]],
                steal_limit: float) -> Tuple[int, List[int]]:
    """``(index of the median pass, indices of the passes it was chosen from)``: the lower middle of
    ``values`` over the passes whose ``steal`` (share of the CPU the host took; None: not measured)
    is within ``steal_limit``, or over all passes when none is."""
    used = [i for i in range(len(values)) if (steal[i] or 0) <= steal_limit] or list(range(len(values)))
    ranked = sorted(used, key=lambda i: values[i])
    return ranked[(len(ranked) - 1) // 2], used
