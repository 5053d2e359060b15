"""The transition registry is the one place that knows each reshard step.

Every step the planner emits has exactly one entry, whose placement change, bytes and executor
are the ones the plan and the per-rank runner use; each entry's bytes agree with the closed forms
of anchors.md §3.2; and no other module keys a step by its name.
"""
import ast
import inspect
import itertools
import math
from pathlib import Path

import pytest

from paddle_ext.errors import ReshardPlanError
from paddle_ext.placements import DistSpec, Partial, Replicate, Shard
from paddle_ext.reshard import per_rank, planner, step_executors
from paddle_ext.reshard.layout import CROSS, DST, SRC, Geometry
from paddle_ext.reshard.planner import ReshardStep, plan_reshard
from paddle_ext.reshard.transitions import TRANSITIONS, Move, Transition, _registry, for_move, kind

ONE_D = ["[R]", "[S(0)]", "[S(1)]", "[P(sum)]", "[P(avg)]", "[P(max)]", "[P(min)]"]
TWO_D = ["[" + ",".join(c) + "]" for c in itertools.product(["R", "S(0)", "S(1)", "P(sum)", "P(max)"], repeat=2)]
CROSS_MESHES = [((2,), (0, 1), (2,), (2, 3)), ((2,), (0, 1), (2,), (1, 0)), ((2,), (0, 1), (2, 2), (0, 1, 2, 3)),
                ((2, 2), (0, 1, 2, 3), (3,), (1, 2, 3))]


def _plans():
    """Plans on 1-D meshes of 2 and 3 ranks, a 2x2 mesh and across meshes; even, uneven, empty."""
    for shape, n in itertools.product([(4, 6), (5, 7), (1, 6)], [2, 3]):
        for a, b in itertools.product(ONE_D, repeat=2):
            src, dst = DistSpec(shape, (n,), a), DistSpec(shape, (n,), b)
            yield src, dst, None, None, plan_reshard(src, dst)
    for a, b in itertools.product(TWO_D, repeat=2):
        src, dst = DistSpec((5, 7), (2, 2), a), DistSpec((5, 7), (2, 2), b)
        yield src, dst, None, None, plan_reshard(src, dst, dtype="float32")
    for sm, sr, dm, dr in CROSS_MESHES:
        for a in (ONE_D if len(sm) == 1 else TWO_D[:8]):
            for b in (ONE_D if len(dm) == 1 else TWO_D[:8]):
                src, dst = DistSpec((4, 6), sm, a), DistSpec((4, 6), dm, b)
                yield src, dst, sr, dr, plan_reshard(src, dst, src_ranks=sr, dst_ranks=dr)


def test_every_kind_pair_on_one_mesh_dim_has_exactly_one_transition():
    samples = [Shard(0), Shard(1), Replicate(), Partial("sum"), Partial("avg")]
    changes = [(p, q) for p in samples for q in samples if p != q]
    pairs = {(kind(p), kind(q)) for p, q in changes}
    assert len(pairs) == 8                                   # every pair but R -> R
    claimed = [mv for t in TRANSITIONS.values() for mv in t.moves]
    assert sorted(claimed) == sorted(pairs)                  # each claimed once, none unclaimed
    for p, q in changes:
        assert (kind(p), kind(q)) in for_move(p, q).moves


def test_every_step_the_planner_emits_is_one_entry_with_its_bytes():
    seen = set()
    for src, dst, sr, dr, plan in _plans():
        n_src = math.prod(src.mesh_shape)
        s_ranks = tuple(sr or range(n_src))
        d_ranks = tuple(dr or (s_ranks if src.mesh_shape == dst.mesh_shape else range(math.prod(dst.mesh_shape))))
        geo = Geometry(src.shape, src.mesh_shape, s_ranks, dst.mesh_shape, d_ranks)
        for step in plan:
            t = TRANSITIONS[step.collective]
            seen.add(t.name)
            if step.mesh_dim is None:
                assert t.moves == ()
                a_side, b_side = (SRC, DST) if step.mesh == CROSS else (step.mesh, step.mesh)
                before, after = geo.spec(a_side, step.src), geo.spec(b_side, step.dst)
                a_r, b_r = geo.ranks(a_side), geo.ranks(b_side)
            else:
                m = step.mesh_dim
                assert (kind(step.src[m]), kind(step.dst[m])) in t.moves
                assert t.legal(step.src, step.dst, m, geo.mesh(step.mesh)[m])
                before, after = geo.spec(step.mesh, step.src), geo.spec(step.mesh, step.dst)
                a_r = b_r = geo.ranks(step.mesh)
            elems = t.elements(Move(before, after, step.mesh_dim, a_r, b_r)) if t.communicates else 0
            assert step.bytes == 4 * elems, step
    assert seen == set(TRANSITIONS)  # the sweep reaches every entry


def _even_1d(n: int, rows: int, cols: int):
    return lambda pl: DistSpec((rows, cols), (n,), pl)


@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("rows,cols", [(12, 24), (7, 5), (2, 9), (0, 4)])
def test_each_entry_s_bytes_are_the_closed_form(n, rows, cols):
    spec = _even_1d(n, rows, cols)
    L = rows * cols
    ranks = tuple(range(n))
    chunk = math.ceil(rows / n) * cols            # the largest ceil-first row block
    flat_chunks = [max(0, min(math.ceil(L / n), L - k * math.ceil(L / n))) for k in range(n)] if L else [0] * n
    shards = [max(0, min(math.ceil(rows / n), rows - k * math.ceil(rows / n))) * cols for k in range(n)]

    def elems(name, a, b, m=0, a_ranks=ranks, b_ranks=ranks):
        return TRANSITIONS[name].elements(Move(spec(a), spec(b), m, a_ranks, b_ranks))

    assert elems("all_gather", "[S(0)]", "[R]") == max(L - c for c in shards)          # L - c_k
    assert elems("all_reduce", "[P(sum)]", "[R]") == max((n - 1) * c + L - c for c in flat_chunks)
    assert elems("reduce_scatter", "[P(sum)]", "[S(0)]") == (n - 1) * chunk             # (n-1) c_k
    if rows % n == 0 and cols % n == 0:                                                 # the even case
        assert elems("all_gather", "[S(0)]", "[R]") == (n - 1) * L // n
        assert elems("all_reduce", "[P(sum)]", "[R]") == 2 * (n - 1) * L // n
        assert elems("reduce_scatter", "[P(sum)]", "[S(0)]") == (n - 1) * L // n
        assert elems("all_to_all", "[S(0)]", "[S(1)]") == (n - 1) * L // (n * n)
        assert elems("p2p", "[S(0)]", "[S(1)]", None) == (n - 1) * L // (n * n)
    other = tuple(range(n, 2 * n))
    assert elems("transfer", "[S(0)]", "[S(0)]", None, ranks, other) == chunk          # the local block
    for name in ("slice", "to_partial", "rescale"):
        assert not TRANSITIONS[name].communicates


def test_no_other_module_keys_a_step_by_its_name():
    """Planner, runner and executors take names, legality and bytes from the registry only."""
    names = set(TRANSITIONS)
    for module in (planner, per_rank, step_executors):
        tree = ast.parse(Path(inspect.getsourcefile(module)).read_text())
        literals = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)}
        assert not literals & names, (module.__name__, literals & names)


def test_every_executor_is_a_step_executor_and_a_second_claim_is_refused():
    for t in TRANSITIONS.values():  # in step_executors, or next to its entry in a transition_kinds module
        assert t.executor.__module__ in (step_executors.__name__, f"paddle_ext.reshard.transition_kinds.{t.name}")
        assert list(inspect.signature(t.executor).parameters) == ["be", "geo", "step", "local"]
    gather = TRANSITIONS["all_gather"]
    with pytest.raises(ValueError, match="both claim S -> R"):
        _registry(gather, Transition("gather_again", (("S", "R"),), gather.legal, gather.elements, gather.executor))


def test_a_step_with_no_transition_is_a_named_error():
    step = ReshardStep(0, (Shard(0),), (Replicate(),), "broadcast", 4)
    geo = Geometry((4,), (2,), (0, 1), (2,), (0, 1))
    with pytest.raises(ReshardPlanError, match="no executor for step kind 'broadcast'.*known kinds: all_gather"):
        per_rank.execute(object(), geo, [step], None)
