"""ZBAuto's two objectives (issue #38): makespan and longest stage span, either one leading.

On the zero-bubble paper's Table 5 settings (Table 9's costs, K = 2p) both orders reach the lower
bounds of both figures, so the span is below ZB-H2's and the makespan is no worse than before;
the bounds themselves are checked against every schedule of tiny problems.
"""
import itertools
import math
import re

import pytest

from paddle_ext.errors import ScheduleError
from paddle_ext.passes import Costs, generate_schedule, simulate_schedule, validate_schedule
from paddle_ext.passes.schedules.zb_auto import search_zb_auto, zb_auto, zb_auto_result
from paddle_ext.passes.schedules.zb_auto_model import Problem, evaluate, peak_memory
from paddle_ext.passes.schedules.zb_auto_paper import TABLE5_BUBBLE_RATES, TABLE9
from paddle_ext.passes.schedules.zb_auto_tune import lower_bounds, tuned_orders

ROWS = [pytest.param(row, id=f"{row.model}-p{row.p}-m{row.m}") for row in TABLE9]
# ZBAuto before #38 (commit a14ce6f) at K = 2p on these rows: (makespan, longest stage span)
BEFORE = {("1.5B", 24): (1236.541, 1227.295), ("1.5B", 32): (1603.733, 1595.348), ("1.5B", 64): (3076.852, 3069.626),
          ("6.2B", 24): (2109.851, 2020.743), ("6.2B", 32): (2732.973, 2669.588), ("6.2B", 64): (5265.706, 5205.366),
          ("14.6B", 48): (1650.756, 1581.171), ("14.6B", 64): (2137.658, 2069.123),
          ("14.6B", 128): (4110.521, 4042.541), ("28.3B", 96): (3056.373, 2907.108),
          ("28.3B", 128): (3959.616, 3811.002), ("28.3B", 256): (7593.810, 7448.482)}
TOL = 1e-6


def rate(span, row):
    return (span - row.m * sum(row.costs)) / span


@pytest.mark.parametrize("row", ROWS)
def test_table9_costs_reproduce_table5_zbh2_bubble_rates(row):
    """Checks the transcribed data and the cost model at once: ZBH2 simulated with Table 9's
    costs gives Table 5's ZB-H2 column to the paper's four digits."""
    r = simulate_schedule(generate_schedule("ZBH2", row.p, row.m), Costs(*row.costs), row.latency)
    assert round(rate(max(r.spans), row), 4) == TABLE5_BUBBLE_RATES[(row.model, row.m)]["ZBH2"]


@pytest.mark.parametrize("objective", ["makespan", "span"])
@pytest.mark.parametrize("row", ROWS)
def test_table5_settings_meet_both_bounds_at_2p(row, objective):
    k = 2 * row.p
    res = search_zb_auto(row.p, row.m, row.costs, k, row.latency, objective=objective)
    validate_schedule(res.schedule, row.p, row.m)
    sim = simulate_schedule(res.schedule, Costs(*row.costs), row.latency)
    assert max(sim.peak_activations) <= k and res.peak_activations == sim.peak_activations
    assert (res.makespan, res.max_span) == (sim.makespan, max(sim.spans))
    h2 = simulate_schedule(generate_schedule("ZBH2", row.p, row.m), Costs(*row.costs), row.latency)
    before_makespan, before_span = BEFORE[(row.model, row.m)]
    assert res.max_span < max(h2.spans) - 1.0  # below ZB-H2 by at least a W (W >= 7.7 here)
    assert res.max_span <= before_span + 1e-3 and res.makespan <= before_makespan + 1e-3
    assert res.makespan <= h2.makespan + TOL
    # on both bounds: optimal in both figures, whichever leads
    assert res.makespan == pytest.approx(res.lower_bounds[0], abs=TOL)
    assert res.max_span == pytest.approx(res.lower_bounds[1], abs=TOL)
    assert res.objective == objective and res.bubble_rate == pytest.approx(rate(res.max_span, row))


def test_span_first_trades_makespan_for_span_below_2p():
    """14.6B, m = 48 at K = 24 (1.5p): each order wins its own leading figure, and the default
    (also by zb_auto's keyword) is the makespan first."""
    row = TABLE9[6]
    args = dict(costs=row.costs, memory_limit=24, latency=row.latency)
    by_makespan, by_span = zb_auto_result(row.p, row.m, **args), zb_auto_result(row.p, row.m, **args, objective="span")
    assert by_span.max_span < by_makespan.max_span - 5
    assert by_makespan.makespan < by_span.makespan
    for res in (by_makespan, by_span):
        assert max(res.peak_activations) <= 24
        assert res.makespan >= res.lower_bounds[0] - TOL and res.max_span >= res.lower_bounds[1] - TOL
    default = zb_auto(row.p, row.m, **args)
    assert default == zb_auto(row.p, row.m, **args, objective="makespan") != zb_auto(row.p, row.m, **args,
                                                                                      objective="span")
    assert by_makespan.objective == search_zb_auto(2, 2).objective == "makespan"


def _rank_orders(m):
    """Every order of one rank's F, I, W (F before I before W per microbatch)."""
    acts = [(k, j) for j in range(m) for k in "FIW"]
    for perm in itertools.permutations(acts):
        seen = set()
        if all((k == "F" or (("F" if k == "I" else "I"), j) in seen) and not seen.add((k, j)) for k, j in perm):
            yield perm


@pytest.mark.parametrize("p, costs, latency", [(2, (1, 1, 1), 0.0), (2, (2, 2, 1), 0.5), (2, (1, 2, 3), 0.5),
                                               (2, (3, 1, 1), 0.0), (3, (2, 2, 1), 0.5), (3, (1, 1.5, 0.5), 0.0)])
def test_lower_bounds_hold_for_every_schedule_and_are_tight(p, costs, latency):
    """m = 2: every order of every rank (memory 1 and 2); the least makespan and the least span
    are >= the bounds, and at K = 2 the span bound is reached."""
    per_rank = sorted(set(_rank_orders(2)))
    for k in (1, 2):
        pb = Problem.one_stage_per_rank(p, 2, costs, latency, k)
        best_makespan = best_span = math.inf
        for combo in itertools.product(per_rank, repeat=p):
            order = [[(kind, r, j) for kind, j in combo[r]] for r in range(p)]
            if max(peak_memory(pb, order)) > k:
                continue
            t = evaluate(pb, order)
            if t is not None:
                best_makespan, best_span = min(best_makespan, t.makespan), min(best_span, t.max_span)
        bound_makespan, bound_span = lower_bounds(pb)
        assert best_makespan >= bound_makespan - TOL and best_span >= bound_span - TOL
        if k == 2:
            assert best_span == pytest.approx(bound_span)


@pytest.mark.parametrize("p, m", [(1, 3), (2, 1), (3, 2), (4, 8), (5, 7)])
def test_tuned_orders_fit_the_limit_and_repeat(p, m):
    for k in sorted({1, 2, p, 2 * p - 1, 2 * p, 3 * p}):
        pb = Problem.one_stage_per_rank(p, m, (2, 2, 1), 0.5, k)
        found = tuned_orders(pb)
        assert found, (p, m, k)
        for _, timing, order in found:
            assert max(peak_memory(pb, order)) <= k and evaluate(pb, order) == timing
        assert [f[0] for f in tuned_orders(pb)] == [f[0] for f in found]


def test_result_reports_both_figures_per_candidate():
    """6.2B, m = 32, K = 16, span first: the tuned shape is on both bounds, so the greedy and the
    local search are skipped ("search" is absent); FThenB's peak (32) does not fit."""
    row = TABLE9[4]
    res = search_zb_auto(row.p, row.m, row.costs, 16, row.latency, objective="span")
    assert set(res.candidates) == set(res.candidate_spans) == {"FThenB", "1F1B", "ZBH1", "ZBH2", "tuned"}
    assert res.candidates["FThenB"] is None and res.candidate_spans["FThenB"] is None
    h2 = simulate_schedule(generate_schedule("ZBH2", row.p, row.m), Costs(*row.costs), row.latency)
    assert (res.candidates["ZBH2"], res.candidate_spans["ZBH2"]) == (h2.makespan, max(h2.spans))
    assert res.source == "tuned" and (res.candidates["tuned"], res.candidate_spans["tuned"]) == pytest.approx(
        (res.makespan, res.max_span))
    assert res.ideal == pytest.approx(row.m * sum(row.costs))
    assert round(res.bubble_rate, 4) == 0.0490 < TABLE5_BUBBLE_RATES[(row.model, row.m)]["ZBH2"]


def test_an_unknown_objective_names_both():
    with pytest.raises(ScheduleError, match=re.escape("ZBAuto: objective (--objective) must be 'makespan' (least "
                                                      "makespan, then least longest stage span) or 'span' (the "
                                                      "reverse); got 'bubble'")):
        zb_auto(4, 8, objective="bubble")
