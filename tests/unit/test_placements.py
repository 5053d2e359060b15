"""The pure placement model: text round trips, validation errors, ceil-first local shards."""
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paddle_ext import errors
from paddle_ext.placements import (DistSpec, Partial, Replicate, Shard, coord_of_rank,
                                   format_placements, parse_placement, parse_placements,
                                   rank_of_coord, split_offsets, split_sizes)

placement_st = st.one_of(
    st.just(Replicate()),
    st.builds(Shard, st.integers(0, 5)),
    st.builds(Partial, st.sampled_from(["sum", "avg", "max", "min"])),
)


@given(st.lists(placement_st, min_size=1, max_size=4))
def test_text_round_trip(pls):
    text = format_placements(pls)
    assert parse_placements(text) == tuple(pls)
    for p in pls:
        assert parse_placement(str(p)) == p
        assert eval(repr(p)) == p  # the exact repr rebuilds the value


def test_terse_forms():
    assert [str(p) for p in (Replicate(), Shard(1), Partial(), Partial("max"))] == ["R", "S(1)", "P(sum)", "P(max)"]
    assert parse_placements("[ S( 0 ) , R , P ]") == (Shard(0), Replicate(), Partial("sum"))
    assert parse_placements(["S(1)", Replicate()]) == (Shard(1), Replicate())


@pytest.mark.parametrize("text, needle", [
    ("X", "unknown placement 'X'"),
    ("S(a)", "unknown placement"),
    ("P(prod)", "unknown reduce op; use one of sum, avg, max, min"),
    ("S(-1)", "dim must be >= 0"),
    ("[S(0),R", "unbalanced brackets"),
    ("[]", "empty placement list"),
])
def test_bad_placement_text(text, needle):
    with pytest.raises(errors.PlacementError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        parse_placements(text)


def test_bad_values_are_named_errors():
    with pytest.raises(errors.PlacementError, match="Partial.op='prod'.: unknown reduce op"):
        Partial("prod")
    with pytest.raises(errors.PlacementError, match="dim must be an int"):
        Shard("0")
    with pytest.raises(errors.PaddleExtError):  # the common base class
        parse_placements([object()])


@pytest.mark.parametrize("shape, mesh, pls, needle", [
    ((4, 6), (2,), "[S(2)]", "shards tensor dim 2, but the tensor \\[4, 6\\] has rank 2"),
    ((4, 6), (2, 2), "[S(0)]", "has 1 placements but the mesh \\[2, 2\\] has 2 dims"),
    ((4, 6), (2, 0), "[R,R]", "has size 0; every mesh dim must be a positive int"),
    ((4, 6), (-2,), "[R]", "has size -2"),
    ((4, 6), (), "[R]", "mesh shape is empty"),
    ((4, -6), (2,), "[R]", "negative size"),
])
def test_spec_validation(shape, mesh, pls, needle):
    with pytest.raises(errors.PlacementError, match=needle):
        DistSpec(shape, mesh, pls)


def test_ceil_first_sizes_match_paddle_measurements():
    # measured on Paddle 3.3.1: [5,7] S(0) on 2 ranks -> 3/2 rows; S(1) -> 4/3 columns;
    # on 4 ranks [5,7] -> 2,2,1,0 rows; [3,6] -> 1,1,1,0
    assert split_sizes(5, 2) == (3, 2)
    assert split_sizes(7, 2) == (4, 3)
    assert split_sizes(5, 4) == (2, 2, 1, 0)
    assert split_sizes(3, 4) == (1, 1, 1, 0)
    spec = DistSpec((5, 7), (2, 2), "[S(0),S(1)]")
    assert [spec.local_shape(c) for c in spec.coords()] == [(3, 4), (3, 3), (2, 4), (2, 3)]


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 40), st.integers(1, 9))
def test_split_partitions_the_dim(n, parts):
    sizes, offs = split_sizes(n, parts), split_offsets(n, parts)
    assert sum(sizes) == n and len(sizes) == parts
    chunk = math.ceil(n / parts) if n else 0
    short = [s for s in sizes if 0 < s < chunk]
    assert len(short) <= 1  # full shards, at most one short one, then empty ones
    for i in range(parts - 1):
        assert offs[i] + sizes[i] == offs[i + 1]
    assert sorted(sizes, reverse=True) == list(sizes)  # ceil-first: full shards, then short, then empty


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=3), st.data())
def test_local_slices_tile_the_tensor(shape, data):
    mesh = tuple(data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=3)))
    pls = [data.draw(st.one_of(st.just(Replicate()), st.builds(Shard, st.integers(0, len(shape) - 1)),
                               st.just(Partial()))) for _ in mesh]
    spec = DistSpec(shape, mesh, pls)
    # every element is covered exactly once by the ranks that differ only on shard mesh dims
    shard_dims = [m for m, p in enumerate(pls) if isinstance(p, Shard)]
    covered = {}
    for c in spec.coords():
        if any(c[m] != 0 for m in range(len(mesh)) if m not in shard_dims):
            continue
        box = spec.local_slices(c)
        for idx in _cells(box):
            covered[idx] = covered.get(idx, 0) + 1
    assert len(covered) == math.prod(shape) and set(covered.values()) <= {1}


def _cells(box):
    import itertools
    return itertools.product(*(range(o, o + n) for o, n in box))


def test_rank_coord_round_trip():
    mesh = (2, 3, 2)
    for r in range(12):
        assert rank_of_coord(coord_of_rank(r, mesh), mesh) == r
    assert coord_of_rank(5, (2, 3)) == (1, 2)


def test_spec_text_and_helpers():
    spec = DistSpec((5, 7), (2, 2), "[S(0),P(avg)]")
    assert str(spec) == "[5,7] on mesh 2x2 as [S(0),P(avg)]"
    assert spec.dims_mapping() == [[0], []]
    assert spec.partial_mesh_dims() == (1,)
    assert spec.with_placements("[R,R]").placements == (Replicate(), Replicate())
    with pytest.raises(errors.PlacementError, match="outside the mesh"):
        spec.local_shape((2, 0))
