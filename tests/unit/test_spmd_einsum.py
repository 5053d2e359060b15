"""Table-driven rule units: one pytest.param per case, ids in notation."""
import pytest

from paddle_ext.placements import DistSpec
from paddle_ext.spmd import infer_backward, infer_forward, infer_grad
from paddle_ext.spmd.dimtrans import (Flatten, InputDim, Singleton, Split, expand_map, infer_dimtrans,
                                      tile_map, view_groups)
from paddle_ext.spmd.einsum import infer_einsum
from paddle_ext.spmd.onedim import infer_onedim


def D(shape, pls, mesh=(2,)):
    return DistSpec(shape, mesh, pls)


def _text(specs):
    return ",".join("[" + ",".join(map(str, s.placements)) + "]" for s in specs)


CASES = [
    # op, specs, attrs, required inputs, outputs
    pytest.param("matmul", [D((4, 8), "[S(0)]"), D((8, 6), "[R]")], {}, "[S(0)],[R]", "[S(0)]", id="mk[S0],kn[R]->mn[S0]"),
    pytest.param("matmul", [D((4, 8), "[S(1)]"), D((8, 6), "[R]")], {}, "[S(1)],[S(0)]", "[P(sum)]", id="mk[S1],kn[R]->mn[P]"),
    pytest.param("matmul", [D((4, 8), "[R]"), D((8, 6), "[S(1)]")], {}, "[R],[S(1)]", "[S(1)]", id="mk[R],kn[S1]->mn[S1]"),
    pytest.param("matmul", [D((4, 8), "[S(0)]"), D((8, 6), "[S(0)]")], {}, "[S(0)],[R]", "[S(0)]", id="m-beats-k-on-one-mesh-dim"),
    pytest.param("matmul", [D((8, 4), "[S(1)]"), D((6, 8), "[S(0)]")], {"trans_x": True, "trans_y": True},
                 "[R],[S(0)]", "[S(1)]", id="km[S1],nk[S0]->mn[S1]-trans"),
    pytest.param("matmul", [D((4, 8), "[S(0),S(1)]", (2, 2)), D((8, 6), "[R,R]", (2, 2))], {},
                 "[S(0),S(1)],[R,S(0)]", "[S(0),P(sum)]", id="2d-mk[S0,S1]->mn[S0,P]"),
    pytest.param("bmm", [D((2, 4, 8), "[S(0)]"), D((2, 8, 6), "[R]")], {}, "[S(0)],[S(0)]", "[S(0)]", id="bmk[S0]->bmn[S0]"),
    pytest.param("add", [D((4, 6), "[S(0)]"), D((6,), "[S(0)]")], {}, "[S(0)],[R]", "[S(0)]", id="add-follow-most-sharded"),
    pytest.param("add", [D((4, 1), "[R]"), D((4, 6), "[S(1)]")], {}, "[R],[S(1)]", "[S(1)]", id="add-broadcast-dim"),
    pytest.param("relu", [D((5, 7), "[P(sum)]")], {}, "[R]", "[R]", id="relu-partial-reshards"),
    pytest.param("sum", [D((5, 7), "[S(0)]")], {"axis": [0]}, "[S(0)]", "[P(sum)]", id="sum-uneven-ok"),
    pytest.param("max", [D((4, 7), "[S(0)]")], {"axis": [0], "keepdim": True}, "[S(0)]", "[P(max)]", id="max-keepdim"),
    pytest.param("mean", [D((4, 7), "[S(0)]")], {"axis": [0]}, "[S(0)]", "[P(avg)]", id="mean-even"),
    pytest.param("mean", [D((5, 7), "[S(0)]")], {"axis": [0]}, "[R]", "[R]", id="mean-uneven-reshards"),
    pytest.param("softmax", [D((4, 6), "[S(1)]")], {"axis": -1}, "[R]", "[R]", id="softmax-axis-replicated"),
    pytest.param("layer_norm", [D((4, 6), "[S(0)]"), D((6,), "[R]"), D((6,), "[R]")], {"begin_norm_axis": 1},
                 "[S(0)],[R],[R]", "[S(0)],[S(0)],[S(0)]", id="layer_norm-batch"),
    pytest.param("embedding", [D((4, 3), "[R]"), D((10, 8), "[S(0)]")], {}, "[R],[S(0)]", "[P(sum)]",
                 id="embedding-vocab-parallel"),
    pytest.param("transpose", [D((4, 6, 2), "[S(0)]")], {"perm": [2, 0, 1]}, "[S(0)]", "[S(1)]", id="transpose"),
    pytest.param("concat", [[D((4, 6), "[S(1)]"), D((3, 6), "[R]")]], {"axis": 0}, "[S(1)],[S(1)]", "[S(1)]",
                 id="concat-rows"),
    pytest.param("split", [D((4, 6), "[S(1)]")], {"sections": [2, 4], "axis": 1}, "[R]", "[R],[R]", id="split-axis"),
    pytest.param("cumsum", [D((4, 6), "[S(0)]")], {"axis": 0}, "[R]", "[R]", id="cumsum-axis"),
    pytest.param("reshape", [D((4, 6, 8), "[S(1)]")], {"shape": [24, 8]}, "[R]", "[R]", id="flatten-non-leftmost"),
    pytest.param("reshape", [D((24, 8), "[S(0)]")], {"shape": [4, -1, 8]}, "[S(0)]", "[S(0)]", id="split-leftmost-resolve"),
    pytest.param("reshape", [D((4, 6, 8), "[S(0)]")], {"shape": [0, -1]}, "[S(0)]", "[S(0)]", id="zero-copies-dim"),
    pytest.param("reshape", [D((24, 8), "[S(0)]")], {"shape": [3, 8, 8]}, "[R]", "[R]", id="split-indivisible"),
    pytest.param("reshape", [D((5, 4), "[S(0)]")], {"shape": [20]}, "[R]", "[R]", id="flatten-uneven-reshards"),
    pytest.param("squeeze", [D((4, 1, 6), "[S(2)]")], {"axis": [1]}, "[S(2)]", "[S(1)]", id="squeeze"),
    pytest.param("unsqueeze", [D((4, 6), "[S(1)]")], {"axis": [0]}, "[S(1)]", "[S(2)]", id="unsqueeze"),
    pytest.param("expand", [D((4, 1), "[S(0)]")], {"shape": [4, 6]}, "[S(0)]", "[S(0)]", id="expand"),
    pytest.param("tile", [D((4, 6), "[S(0)]")], {"repeat_times": [2, 1]}, "[R]", "[R]", id="tile-repeated-dim"),
    pytest.param("flatten", [D((4, 6, 2), "[S(0),P(sum)]", (2, 2))], {"start_axis": 0, "stop_axis": 1},
                 "[S(0),P(sum)]", "[S(0),P(sum)]", id="flatten-keeps-partial"),
]


@pytest.mark.parametrize("op,specs,attrs,want_in,want_out", CASES)
def test_spmd_rule_units(op, specs, attrs, want_in, want_out):
    res = infer_forward(op, specs, attrs)
    assert _text(res.inputs) == want_in
    assert _text(res.outputs) == want_out
    flat = [s for x in specs for s in (x if isinstance(x, list) else [x])]
    assert [r.index for r in res.reshards] == [i for i, (g, r) in enumerate(zip(flat, res.inputs))
                                               if g.placements != r.placements]


def test_spmd_reshard_is_explicit_and_named():
    res = infer_forward("softmax", [D((4, 8), "[P(sum)]")], {"axis": -1})   # softmax is not linear
    (r,) = res.reshards
    assert (r.index, str(r)) == (0, "in0: [P(sum)] -> [R] (all-reduce(sum)@0)")
    assert str(res) == "softmax: [P(sum)] -> [R] = [R]"
    res = infer_forward("matmul", [D((4, 8), "[P(sum)]"), D((8, 6), "[P(sum)]")])  # linear in one operand
    assert [str(r) for r in res.reshards] == ["in1: [P(sum)] -> [R] (all-reduce(sum)@0)"]
    assert str(res) == "matmul: [P(sum)],[P(sum)] -> [P(sum)],[R] = [P(sum)]"


def test_spmd_reverse_and_grad_from_same_notation():
    x, y = D((4, 8), "[R]"), D((8, 6), "[R]")
    rev = infer_backward("matmul", [x, y], [D((4, 6), "[S(0)]")])
    assert _text(rev.inputs) == "[S(0)],[R]"
    grad = infer_grad("matmul", [D((4, 8), "[S(1)]"), D((8, 6), "[R]")], [D((4, 6), "[R]")])
    # dx = dy @ y^T keeps x's layout; dy = x^T @ dy contracts m -> no partial; k sharded on y's grad
    assert _text(grad.outputs) == "[S(1)],[S(0)]"
    bgrad = infer_grad("add", [D((4, 6), "[S(0)]"), D((6,), "[R]")], [D((4, 6), "[S(0)]")])
    assert _text(bgrad.outputs) == "[S(0)],[P(sum)]"  # the broadcast operand's gradient is a partial sum


def test_spmd_conflict_prefers_output_factor_then_size():
    res = infer_einsum("m k, k n -> m n", [D((4, 8), "[S(1)]"), D((8, 6), "[S(1)]")], op="matmul")
    assert _text(res.inputs) == "[R],[S(1)]" and _text(res.outputs) == "[S(1)]"
    res = infer_einsum("a, b -> a b", [D((4,), "[S(0)]"), D((6,), "[S(0)]")], op="outer")
    assert _text(res.outputs) == "[S(1)]"  # larger factor wins the mesh dim


def test_spmd_dimtrans_maps():
    assert view_groups((4, 6), (24,)) == (Flatten((InputDim(0), InputDim(1))),)
    assert view_groups((24,), (4, 6))[0] == Split(InputDim(0), (4, 6), 0)
    assert view_groups((1, 4), (4, 1)) == (InputDim(1), Singleton())
    assert expand_map((4, 1), (2, 4, 6))[0].size == 2
    res = infer_dimtrans(D((4, 6), "[S(1)]"), tile_map(2, [1, 3]), op="tile")
    assert _text(res.inputs) == "[R]"


def test_spmd_onedim_expansion_to_2d_and_coshard():
    rows = [("S(0)", "S(0)"), ("P(sum)", "P(sum)")]
    res = infer_onedim(rows, [D((8, 3), "[S(0),S(0)]", (2, 2))], op="rowop")
    assert _text(res.outputs) == "[S(0),S(0)]" and not res.reshards
    res = infer_onedim(rows, [D((8, 3), "[S(1),P(sum)]", (2, 2))], op="rowop")
    assert _text(res.inputs) == "[R,P(sum)]"  # no S(1) row: all-Replicate fallback on mesh dim 0
