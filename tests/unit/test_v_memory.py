"""V-Min, V-Half, V-ZB: valid V schedules whose peak memory is the stated budget."""
import re

import pytest

from paddle_ext.errors import ScheduleError
from paddle_ext.passes import (generate_schedule, get_schedule_info, simulate_schedule, stage_to_rank_map,
                               validate_schedule)
from paddle_ext.passes.schedules.v_memory import memory_budget, v_memory_schedule

NAMES = ("VMin", "VHalf", "VZB")
SIZES = [(p, m) for p in range(1, 7) for m in sorted({1, p, 2 * p, 3 * p + 1})]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("p, m", SIZES)
def test_valid_on_the_v_placement_with_the_stated_peak(name, p, m):
    schedule = generate_schedule(name, p, m)
    validate_schedule(schedule, 2 * p, m, stage_to_rank=stage_to_rank_map(p, 2, "v"))
    peak = max(simulate_schedule(schedule).peak_activations)
    assert peak <= memory_budget(name, p)
    if m >= p:  # enough microbatches to fill the budget
        assert peak == min(memory_budget(name, p), 2 * m)


def test_budgets_are_the_papers_fractions_of_1f1b():
    """The paper's table, in microbatches: V-Min (p+4)//3, V-Half (p+2)//2, V-ZB p (1F1B's)."""
    assert [memory_budget("VMin", p) // 2 for p in (2, 4, 8, 12)] == [2, 2, 4, 5]
    assert [memory_budget("VHalf", p) // 2 for p in (2, 4, 8, 12)] == [2, 3, 5, 7]
    assert [memory_budget("VZB", p) // 2 for p in (2, 4, 8, 12)] == [2, 4, 8, 12]
    big = 3000  # the fractions of 1F1B's 2p stage activations, for large p
    assert abs(memory_budget("VMin", big) / (2 * big) - 1 / 3) < 1e-3
    assert abs(memory_budget("VHalf", big) / (2 * big) - 1 / 2) < 1e-3


@pytest.mark.parametrize("p, m", [(p, m) for p in range(1, 9) for m in (2 * p - 1, 2 * p, 3 * p)])
def test_v_zb_is_zero_bubble_on_the_lower_bound_like_zbv(p, m):
    got = simulate_schedule(generate_schedule("VZB", p, m))
    assert got.makespan == 6 * m + p - 1 == simulate_schedule(generate_schedule("ZBV", p, m)).makespan


@pytest.mark.parametrize("p", [4, 6, 8])
def test_less_memory_costs_time_in_order(p):
    m = 3 * p
    spans = [simulate_schedule(generate_schedule(n, p, m)).makespan for n in NAMES]
    one_f_one_b = simulate_schedule(generate_schedule("1F1B", p, m)).makespan * 2  # chunk units: stage halves
    assert spans[0] >= spans[1] >= spans[2] == 6 * m + p - 1
    assert spans[1] < one_f_one_b  # V-Half beats 1F1B with half its memory


def test_info_states_the_memory_and_aliases():
    for name, alias, text in (("VMin", "V-Min", "1/3"), ("VHalf", "v-half", "1/2"), ("VZB", "V-ZB", "1F1B")):
        info = get_schedule_info(alias)
        assert info.name == name and info.placement == "v" and info.default_chunks == 2 and text in info.summary


def test_any_budget_from_two_stage_activations():
    for k in (2, 3, 5):
        schedule = v_memory_schedule(4, 8, k)
        validate_schedule(schedule, 8, 8, stage_to_rank=stage_to_rank_map(4, 2, "v"))
        assert max(simulate_schedule(schedule).peak_activations) <= k


@pytest.mark.parametrize("call, message", [
    (lambda: v_memory_schedule(4, 8, 1), "V schedule: memory_limit (--memory-limit) must be an int >= 2 (activations "
                                         "per rank, in stage activations (2 per microbatch on a V)); got 1: the least "
                                         "that works is 2"),
    (lambda: v_memory_schedule(4, 8, 0), "the least that works is 2"),
    (lambda: generate_schedule("VHalf", 4, 8, 1), "VHalf: n_chunks (--chunks, stages per rank) must be 2"),
    (lambda: generate_schedule("VMin", 0, 8), "VMin: n_ranks (--stages) must be an int >= 1, got 0"),
])
def test_bad_inputs_say_the_fix(call, message):
    with pytest.raises(ScheduleError, match=re.escape(message)):
        call()
