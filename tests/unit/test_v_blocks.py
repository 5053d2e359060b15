"""V-Min and V-Half from the controllable-memory paper's building block (passes/schedules/v_blocks.py)
and the generators that choose between it and the greedy (v_memory.py): valid, at the paper's
peak, never slower than the authors' published orders nor than before, 1F1B's span or better."""
import importlib.util
import itertools
import random
from pathlib import Path

import pytest

from paddle_ext.errors import ScheduleError
from paddle_ext.passes import Costs, generate_schedule, simulate_schedule, stage_to_rank_map, validate_schedule
from paddle_ext.passes.schedules.v_blocks import PERIOD, _cut, _kth, block_offsets, block_order, direct_order
from paddle_ext.passes.schedules.v_memory import memory_budget, v_half, v_min
from paddle_ext.passes.schedules.zb_auto_model import peak_memory, to_schedule

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("v_schedules_table", ROOT / "tools" / "v_schedules_table.py")
tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tool)
GENERATORS = {"VMin": v_min, "VHalf": v_half}


def simulate(schedule, costs=(1, 1, 1)):
    return simulate_schedule(schedule, Costs(*costs))


def check_valid(schedule, p, m):
    validate_schedule(schedule, 2 * p, m, stage_to_rank=stage_to_rank_map(p, 2, "v"))


@pytest.mark.parametrize("name", ["VMin", "VHalf"])
def test_a_block_fits_its_period_on_every_rank(name):
    for p in range(1, 65):
        for offsets in block_offsets(name, p):
            assert len({o % PERIOD for o in offsets}) == 4, (p, offsets)


@pytest.mark.parametrize("key", sorted(tool.AUTHORS), ids=lambda k: f"{k[0]}-p{k[1]}-m{k[2]}-{k[3]}")
def test_the_block_order_is_the_papers(key):
    """The construction times exactly as the authors' published orders (unit costs and 1,2,1)."""
    name, p, m, costs = key
    schedule = to_schedule(block_order(name, p, m))
    check_valid(schedule, p, m)
    assert simulate(schedule, costs).makespan == tool.AUTHORS[key]


@pytest.mark.parametrize("name", ["VMin", "VHalf"])
@pytest.mark.parametrize("p, m", tool.SIZES)
def test_generators_meet_the_papers_span_at_its_peak(name, p, m):
    schedule = GENERATORS[name](p, m)
    check_valid(schedule, p, m)
    result = simulate(schedule)
    assert max(result.peak_activations) == memory_budget(name, p)  # today's budget, not raised
    assert result.makespan <= tool.AUTHORS[name, p, m, (1, 1, 1)]
    assert result.makespan <= tool.BEFORE[name, p, m, (1, 1, 1)]
    # the paper: V-Min about 1F1B's throughput, V-Half better (1F1B's stages are two V chunks)
    assert result.makespan <= 2 * simulate(generate_schedule("1F1B", p, m)).makespan


@pytest.mark.parametrize("name", ["VMin", "VHalf"])
@pytest.mark.parametrize("p, m", tool.SIZES)
def test_costs_1_2_1(name, p, m):
    costs = (1, 2, 1)
    schedule = GENERATORS[name](p, m, costs=costs)
    check_valid(schedule, p, m)
    result = simulate(schedule, costs)
    assert max(result.peak_activations) == memory_budget(name, p)
    assert result.makespan <= tool.AUTHORS[name, p, m, costs]
    assert result.makespan <= tool.BEFORE[name, p, m, costs]


def test_v_half_at_1_2_1_is_no_longer_a_third_slower_than_the_paper():
    """The issue's case: 387 before, 298 with the authors' order (p = 4, m = 32)."""
    assert simulate(v_half(4, 32, costs=(1, 2, 1)), (1, 2, 1)).makespan == 296
    assert simulate(v_half(4, 32, costs=Costs(1, 2, 1)), (1, 2, 1)).makespan == 296


def test_the_greedy_is_kept_only_where_strictly_faster():
    assert v_min(4, 8) == to_schedule(block_order("VMin", 4, 8))  # block 59, greedy slower
    assert simulate(to_schedule(block_order("VHalf", 4, 4))).makespan == 34
    assert simulate(v_half(4, 4)).makespan == 32  # the greedy's, at the same peak
    assert max(simulate(v_half(4, 4)).peak_activations) == memory_budget("VHalf", 4)


@pytest.mark.parametrize("name", ["VMin", "VHalf"])
def test_block_is_valid_for_any_m_with_the_budget_as_peak(name):
    for p in range(1, 11):
        for m in range(1, 3 * p + 2):
            schedule = to_schedule(block_order(name, p, m))
            check_valid(schedule, p, m)
            assert max(simulate(schedule).peak_activations) == min(memory_budget(name, p), 2 * m), (p, m)


@pytest.mark.parametrize("name", ["VMin", "VHalf"])
def test_block_peak_is_the_papers_budget_exactly(name):
    """(p+4)//3 and (p+2)//2 microbatches are this block's memory for every p, not a bound."""
    for p in range(1, 41):
        order = block_order(name, p, p + 2)
        assert max(peak_memory(None, order)) == memory_budget(name, p), p


@pytest.mark.parametrize("name", ["VMin", "VHalf"])
def test_spliced_rows_are_the_full_construction(name):
    """Beyond the cut size the order is spliced from a smaller one; it must be the same order."""
    for p in list(range(1, 13)) + [16, 24]:
        few = _cut(p)[1]
        for m in sorted({few, few + 1, few + 2, few + 7, 2 * few + 3}):
            assert block_order(name, p, m) == direct_order(name, p, m), (p, m)
    assert block_order(name, 32, 160) == direct_order(name, 32, 160)


@pytest.mark.parametrize("name", ["VMin", "VHalf"])
def test_large_sizes_stay_valid_at_the_budget(name):
    p, m = 64, 512
    schedule = GENERATORS[name](p, m)
    check_valid(schedule, p, m)
    result = simulate(schedule)
    assert max(result.peak_activations) == memory_budget(name, p)
    assert result.makespan < 2 * simulate(generate_schedule("1F1B", p, m)).makespan


def test_kth_of_two_sorted_lists():
    rng = random.Random(38)
    for _ in range(500):
        values = rng.sample(range(200), rng.randint(1, 40))
        cut = rng.randint(0, len(values))
        a, b = sorted(values[:cut]), sorted(values[cut:])
        assert [_kth(a, b, k) for k in range(len(values))] == sorted(values)


def test_unknown_block_is_refused():
    with pytest.raises(ValueError, match="no building block named 'VZB'; known: VMin, VHalf"):
        block_offsets("VZB", 4)


@pytest.mark.parametrize("call, message", [
    (lambda: generate_schedule("VMin", 4, 0), "VMin: n_microbatches (--microbatches) must be an int >= 1, got 0"),
    (lambda: v_half(4, -3), "VHalf: n_microbatches (--microbatches) must be an int >= 1, got -3"),
    (lambda: v_min(4, 8, costs=(1, 0, 1)), "VMin: costs (--costs) F,B,W must all be > 0"),
    (lambda: v_half(4, 8, costs=(1, 2)), "VHalf: costs (--costs) must be three numbers F,B,W"),
])
def test_too_small_m_and_bad_costs_name_the_fix(call, message):
    """The construction takes every m >= 1 (test above), so the smallest feasible m is 1."""
    with pytest.raises(ScheduleError) as err:
        call()
    assert message in str(err.value)


def test_docs_table_is_the_tools():
    assert tool.main(["--check", str(ROOT / "docs" / "schedules.md")]) == 0


def test_recorded_figures_cover_the_grid():
    keys = {(n, p, m, c) for n in ("VMin", "VHalf") for p, m in tool.SIZES for c in ((1, 1, 1), (1, 2, 1))}
    assert set(tool.AUTHORS) == keys == set(tool.BEFORE)
    assert all(isinstance(v, int) for v in itertools.chain(tool.AUTHORS.values(), tool.BEFORE.values()))
