"""Planner: plan shapes, byte counts against the anchor formulas, minimality, errors."""
import dataclasses
import itertools

import pytest

from paddle_ext.errors import PlacementError, ReshardPlanError
from paddle_ext.placements import DistSpec
from paddle_ext.reshard.planner import ReshardStep, format_plan, plan_bytes, plan_reshard

S4x8 = (4, 8)  # 32 float32 = 128 bytes


def plan(a, b, shape=S4x8, mesh=(2,), **kw):
    return plan_reshard(DistSpec(shape, mesh, a), DistSpec(shape, mesh, b), **kw)


@pytest.mark.parametrize("a,b,collective,expected", [
    # one mesh axis of n ranks, S = 128 bytes (anchors.md §3.2)
    ("[S(0)]", "[R]", "all_gather", lambda n: (n - 1) * 128 // n),
    ("[R]", "[S(1)]", "slice", lambda n: 0),
    ("[P(sum)]", "[R]", "all_reduce", lambda n: 2 * (n - 1) * 128 // n),
    ("[P(sum)]", "[S(0)]", "reduce_scatter", lambda n: (n - 1) * 128 // n),
    ("[S(0)]", "[S(1)]", "all_to_all", lambda n: (n - 1) * 128 // (n * n)),
    ("[S(0)]", "[P(sum)]", "to_partial", lambda n: 0),
    ("[R]", "[P(sum)]", "to_partial", lambda n: 0),
    ("[R]", "[P(max)]", "to_partial", lambda n: 0),
    ("[S(1)]", "[P(avg)]", "to_partial", lambda n: 0),
    ("[P(sum)]", "[P(avg)]", "rescale", lambda n: 0),
])
@pytest.mark.parametrize("n", [2, 4])
def test_single_transition_bytes_match_anchor(a, b, collective, expected, n):
    p = plan(a, b, mesh=(n,))
    assert [s.collective for s in p] == [collective]
    assert p[0].bytes == expected(n)
    assert p[0].mesh_dim == 0


def test_format_plan_and_steps_are_frozen_values():
    p = plan("[S(0),R]", "[R,S(1)]", mesh=(2, 2))
    assert format_plan(p).startswith("[S(0),R] -> ") and format_plan(p).endswith("[R,S(1)]")
    with pytest.raises(dataclasses.FrozenInstanceError):
        p[0].bytes = 0
    assert format_plan(()) == "(no-op)"
    assert plan("[S(0)]", "[S(0)]") == ()
    assert "B/rank" in str(p[0])


def test_s_to_p_moves_nothing_where_paddle_all_gathers():
    # Paddle's S->P = S->R + R->P = (n-1)/n * S bytes; ours is local
    assert plan_bytes(plan("[S(0)]", "[P(sum)]", mesh=(4,))) == 0
    assert plan_bytes(plan("[S(0),S(1)]", "[P(sum),P(sum)]", mesh=(2, 2))) == 0


def test_partial_avg_on_non_power_of_two_goes_through_replicate():
    # x3 then /3 is not exact in floating point, so no local rescale on a mesh dim of 3
    p = plan("[S(0)]", "[P(avg)]", shape=(6, 4), mesh=(3,))
    assert [s.collective for s in p] == ["all_gather", "to_partial"]


def test_mixed_partials_reduce_inner_mesh_dim_first():
    # logical value = min over mesh dim 0 of (max over mesh dim 1): max must be reduced first
    p = plan("[P(min),P(max)]", "[R,R]", mesh=(2, 2))
    reduced = [s.mesh_dim for s in p if s.collective in ("all_reduce", "reduce_scatter")]
    assert reduced and reduced[0] == 1


def test_cross_mesh_uses_point_to_point_and_keeps_partial_with_transfer():
    src, dst = DistSpec(S4x8, (2,), "[P(sum)]"), DistSpec(S4x8, (2,), "[P(sum)]")
    p = plan_reshard(src, dst, src_ranks=[0, 1], dst_ranks=[2, 3])
    assert [(s.collective, s.mesh, s.bytes) for s in p] == [("transfer", "src->dst", 128)]
    assert format_plan(p) == "[P(sum)] => [P(sum)]"
    # same ranks in another order: a rank already holding its target block receives nothing
    p = plan_reshard(DistSpec(S4x8, (2,), "[R]"), DistSpec(S4x8, (2,), "[R]"),
                     src_ranks=[0, 1], dst_ranks=[1, 0])
    assert plan_bytes(p) == 0


def test_pipeline_stage_transfer_between_meshes_of_different_shape():
    src, dst = DistSpec(S4x8, (2, 2), "[S(0),R]"), DistSpec(S4x8, (2,), "[S(0)]")
    p = plan_reshard(src, dst, src_ranks=[0, 1, 2, 3], dst_ranks=[4, 5])
    assert p[-1].mesh == "src->dst" or any(s.mesh == "src->dst" for s in p)
    assert plan_bytes(p) <= 64  # each destination rank needs half the tensor


def _via_replicate_bytes(a, b, shape, mesh):
    """Bytes of the naive path: reduce/gather every mesh dim to R, then slice/partial locally."""
    src, rep, dst = (DistSpec(shape, mesh, a), DistSpec(shape, mesh, ["R"] * len(mesh)),
                     DistSpec(shape, mesh, b))
    return plan_bytes(plan_reshard(src, rep)) + plan_bytes(plan_reshard(rep, dst))


PLACEMENTS_1D = ["R", "S(0)", "S(1)", "P(sum)", "P(avg)", "P(max)"]


@pytest.mark.parametrize("shape", [(4, 6), (5, 7), (3, 6)])
@pytest.mark.parametrize("mesh", [(2,), (2, 2)])
def test_plan_never_costs_more_than_going_through_replicate(shape, mesh):
    for combo in itertools.product(PLACEMENTS_1D, repeat=2 * len(mesh)):
        a, b = list(combo[:len(mesh)]), list(combo[len(mesh):])
        if mesh == (2, 2) and (sum(p.startswith("P") for p in a + b) > 2):
            continue
        assert plan_bytes(plan(a, b, shape=shape, mesh=mesh)) <= _via_replicate_bytes(a, b, shape, mesh)


def test_itemsize_scales_bytes():
    assert plan("[S(0)]", "[R]", itemsize=2)[0].bytes == 32


@pytest.mark.parametrize("call,match", [
    (lambda: plan_reshard(DistSpec((4,), (2,), "[S(0)]"), DistSpec((5,), (2,), "[R]")), "global shape"),
    (lambda: plan_reshard(DistSpec((4,), (2,), "[S(0)]"), DistSpec((4,), (2,), "[R]"), src_ranks=[0, 0]),
     "distinct"),
    (lambda: plan_reshard("[S(0)]", DistSpec((4,), (2,), "[R]")), "DistSpec"),
    (lambda: plan("[S(0)]", "[R]", itemsize=0), "itemsize"),
])
def test_named_errors(call, match):
    with pytest.raises(ReshardPlanError, match=match):
        call()


def test_bad_placements_are_placement_errors_with_the_fix():
    with pytest.raises(PlacementError, match="one placement per mesh dim"):
        DistSpec((4,), (2,), "[S(0),R]")
    with pytest.raises(PlacementError, match="has rank 1"):
        DistSpec((4,), (2,), "[S(3)]")


def test_step_is_hashable_value():
    s = ReshardStep(0, ("R",), ("R",), "slice", 0)
    assert hash(s) == hash(ReshardStep(0, ("R",), ("R",), "slice", 0))
