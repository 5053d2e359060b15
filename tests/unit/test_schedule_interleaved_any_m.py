"""Interleaved schedules (VPP / Interleaved1F1B, InterleavedZB) for any number of microbatches,
m not a multiple of p included (torch accepts such m too): valid, deadlock-free, F before B, and
within the documented activation bound, over a grid of p, m, v."""
import pytest

from paddle_ext.passes import generate_schedule, get_schedule_info, simulate_schedule, validate_schedule
from paddle_ext.passes.schedules import interleaved_1f1b, interleaved_zb
from paddle_ext.passes.schedules.interleaved_1f1b import rounds, warmup_forwards

GRID = [(p, m, v) for p in range(1, 7) for m in range(1, 3 * p + 2) for v in (1, 2, 3)]


@pytest.mark.parametrize("p, m, v", GRID, ids=[f"p{p}-m{m}-v{v}" for p, m, v in GRID])
def test_any_m_is_valid_and_within_its_memory_bound(p, m, v):
    for name, generate, extra in (("VPP", interleaved_1f1b, 0), ("InterleavedZB", interleaved_zb, 1)):
        assert get_schedule_info(name).valid_sizes(p, m, v)
        schedule = generate(p, m, v)
        # counts, F before its B (I before W), stage order on a rank, and progress across ranks
        shape = validate_schedule(schedule, p * v, m)
        assert shape.stage_to_rank == {s: s % p for s in range(p * v)}
        result = simulate_schedule(schedule)
        for i, rank in enumerate(result.ranks):
            # warm-up forwards + 1 live; InterleavedZB defers each W by `rank` backwards
            bound = min(warmup_forwards(p, m, v, rank) + 1 + extra * rank, v * m)
            assert result.peak_activations[i] <= bound, (name, rank)
        if v > 1:  # the bound is reached on rank 0
            assert result.peak_activations[0] == min(warmup_forwards(p, m, v, 0) + 1, v * m)


@pytest.mark.parametrize("p, m", [(4, 10), (4, 9), (3, 7), (5, 12), (2, 3)])
def test_rounds_have_p_to_2p_minus_1_microbatches(p, m):
    sizes = [len(r) for r in rounds(p, m)]
    assert sum(sizes) == m and len(sizes) == m // p
    assert all(p <= s < 2 * p for s in sizes) and sizes == sorted(sizes, reverse=True)
    assert [mb for r in rounds(p, m) for mb in r] == list(range(m))


@pytest.mark.parametrize("p, m", [(4, 6), (4, 10), (3, 12), (2, 5)])
def test_torch_accepted_sizes_use_torch_rounds(p, m):
    # torch: rounds = max(1, m // p), microbatches_per_round = m // rounds, when rounds divides m
    n_rounds = max(1, m // p)
    if m % n_rounds == 0:
        assert [len(r) for r in rounds(p, m)] == [m // n_rounds] * n_rounds
        assert warmup_forwards(p, m, 2, 0) == min((2 - 1) * (m // n_rounds) + 2 * (p - 1), 2 * m)


@pytest.mark.parametrize("p", [2, 3, 4])
def test_interleaving_still_beats_one_chunk_when_m_is_not_a_multiple(p):
    for m in range(p + 1, 3 * p):
        if m % p:
            one = simulate_schedule(generate_schedule("1F1B", p, m))
            two = simulate_schedule(generate_schedule("VPP", p, m, 2), costs={"F": 0.5, "I": 0.5, "W": 0.5})
            assert two.makespan < one.makespan, m  # same total work per rank, half as much per chunk


def test_multiples_of_p_keep_the_published_bubble():
    for p, m, v in ((4, 8, 2), (3, 9, 3), (2, 6, 2)):
        r = simulate_schedule(interleaved_1f1b(p, m, v), costs={"F": 1, "I": 1, "W": 1})
        assert r.makespan == 3 * (v * m + p - 1)
