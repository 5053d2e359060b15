"""ZBAuto: the searched schedule fits the memory limit, is never slower than the fixed schedules
that fit, beats ZBH1 where the lower bound leaves room, and the exact search is exact."""
import itertools
import math
import re
import time

import pytest

from paddle_ext.errors import ScheduleError
from paddle_ext.passes import Costs, generate_schedule, simulate_schedule, validate_schedule
from paddle_ext.passes.schedules.zb_auto import search_zb_auto, zb_auto
from paddle_ext.passes.schedules.zb_auto_exact import exact_search
from paddle_ext.passes.schedules.zb_auto_model import Problem, evaluate, peak_memory

COSTS = [(1, 1, 1), (2, 2, 1), (1, 1.5, 0.5)]
GRID = [(p, m, c, k) for p in (3, 4, 6) for m in (2 * p, 3 * p) for c in COSTS
        for k in sorted({p, math.ceil(1.5 * p), 2 * p - 1})]


def lower_bound(p, m, costs, latency=0.0):
    """The last rank starts after (p-1)(F+L) and then runs m (F+B+W)."""
    return (p - 1) * (costs[0] + latency) + m * sum(costs)


def simulate(schedule, costs, latency=0.0):
    return simulate_schedule(schedule, Costs(*costs), latency)


@pytest.mark.parametrize("p, m, costs, k", GRID, ids=[f"p{p}-m{m}-c{'_'.join(map(str, c))}-K{k}" for p, m, c, k in GRID])
def test_acceptance_grid(p, m, costs, k):
    schedule = zb_auto(p, m, costs=costs, memory_limit=k)
    validate_schedule(schedule, p, m)
    got = simulate(schedule, costs)
    assert max(got.peak_activations) <= k
    fixed = {}
    for name in ("FThenB", "1F1B", "ZBH1", "ZBH2"):
        r = simulate(generate_schedule(name, p, m), costs)
        if max(r.peak_activations) <= k:
            fixed[name] = r.makespan
    assert got.makespan <= min(fixed.values())
    assert got.makespan >= lower_bound(p, m, costs) - 1e-9
    zbh1 = fixed["ZBH1"]
    if p < k < 2 * p - 1:
        if zbh1 > lower_bound(p, m, costs):
            assert got.makespan < zbh1
        else:  # F = B = W: ZBH1 already sits on the lower bound, so nothing can be strictly faster
            assert costs[1] == costs[2] and got.makespan == zbh1 == lower_bound(p, m, costs)


def test_strictly_faster_than_zbh1_on_every_grid_point_with_b_above_w():
    wins = [(p, m, c, k) for p, m, c, k in GRID if p < k < 2 * p - 1 and c[1] > c[2]]
    assert wins and all(
        simulate(zb_auto(p, m, costs=c, memory_limit=k), c).makespan
        < simulate(generate_schedule("ZBH1", p, m), c).makespan for p, m, c, k in wins)


def test_search_times_agree_with_the_simulator_and_latency_counts():
    for latency in (0.0, 0.5):
        res = search_zb_auto(4, 8, (1, 1.5, 0.5), 6, latency)
        r = simulate(res.schedule, (1, 1.5, 0.5), latency)
        assert (res.makespan, res.peak_activations) == (r.makespan, r.peak_activations)
        assert res.makespan >= lower_bound(4, 8, (1, 1.5, 0.5), latency)
        zbh1 = simulate(generate_schedule("ZBH1", 4, 8), (1, 1.5, 0.5), latency).makespan
        assert res.makespan < zbh1


def test_p16_m64_under_5_seconds():
    start = time.process_time()
    res = search_zb_auto(16, 64, (2, 2, 1), 24)
    spent = time.process_time() - start
    assert spent < 5.0, spent
    assert max(res.peak_activations) <= 24
    assert res.makespan < simulate(generate_schedule("ZBH1", 16, 64), (2, 2, 1)).makespan


def test_by_name_uses_the_default_costs_and_limit_and_is_deterministic():
    a, b = generate_schedule("ZBAuto", 4, 8), generate_schedule("zb-auto", 4, 8)
    assert a == b and a is not b and a[0] is not b[0]
    assert a == zb_auto(4, 8, costs=(1, 1, 1), memory_limit=6)
    assert max(simulate(a, (1, 1, 1)).peak_activations) <= 6


def _all_orders(p, m):
    """Every order of one rank's F, I, W (F before I before W per microbatch)."""
    acts = [(k, j) for j in range(m) for k in "FIW"]
    for perm in itertools.permutations(acts):
        seen, ok = set(), True
        for k, j in perm:
            if (k == "I" and ("F", j) not in seen) or (k == "W" and ("I", j) not in seen):
                ok = False
                break
            seen.add((k, j))
        if ok:
            yield perm


@pytest.mark.parametrize("p, m, costs, k", [(2, 2, (1, 1, 1), 1), (2, 2, (2, 2, 1), 2), (3, 2, (1, 1.5, 0.5), 1),
                                            (3, 2, (2, 2, 1), 2), (2, 2, (1, 2, 1), 1)])
def test_exact_search_equals_brute_force(p, m, costs, k):
    pb = Problem.one_stage_per_rank(p, m, costs, 0.0, k)
    per_rank = [list(_all_orders(p, m)) for _ in range(p)]
    best = math.inf
    for combo in itertools.product(*per_rank):
        order = [[(kind, r, j) for kind, j in combo[r]] for r in range(p)]
        if max(peak_memory(pb, order)) > k:
            continue
        t = evaluate(pb, order)
        if t is not None:
            best = min(best, t.makespan)
    res = exact_search(pb, time_limit_s=30)
    assert res.proved and res.makespan == best
    assert evaluate(pb, res.order).makespan == best


@pytest.mark.parametrize("p, m, costs, k", [(2, 4, (1, 1, 1), 2), (3, 6, (1, 1, 1), 3), (3, 6, (2, 2, 1), 5),
                                            (4, 8, (2, 2, 1), 7)])
def test_zb_auto_reaches_the_exact_optimum_on_small_sizes(p, m, costs, k):
    res = exact_search(Problem.one_stage_per_rank(p, m, costs, 0.0, k), time_limit_s=20)
    assert res.proved
    assert search_zb_auto(p, m, costs, k).makespan == res.makespan


@pytest.mark.parametrize("kwargs, message", [
    ({"memory_limit": 0}, "ZBAuto: memory_limit (--memory-limit) must be an int >= 1 (activations per rank, in "
                          "microbatches); got 0: the least that works is 1"),
    ({"memory_limit": 2.5}, "must be an int >= 1"),
    ({"costs": (1, 0, 1)}, "ZBAuto: costs (--costs) F,B,W must all be > 0 (a split backward needs a W), got 1,0,1"),
    ({"costs": (1, 1, -1)}, "must all be > 0"),
    ({"costs": (1, 1)}, "must be three numbers F,B,W"),
    ({"latency": -1}, "latency (--latency) must be a number >= 0"),
])
def test_bad_inputs_name_the_least_that_works(kwargs, message):
    with pytest.raises(ScheduleError, match=re.escape(message)):
        zb_auto(4, 8, **kwargs)


def test_two_stages_per_rank_is_refused_with_the_fix():
    with pytest.raises(ScheduleError, match="must be 1 because ZBAuto places one stage per rank"):
        generate_schedule("ZBAuto", 4, 8, 2)
