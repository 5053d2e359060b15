"""paddle-ext's rules called the way Paddle calls core.get_phi_spmd_rule(op).

The scenarios follow Paddle's own spmd_rules unit tests (softmax, layer_norm, matmul, reduction,
elementwise, embedding): the expected answer is Paddle's C++ rule, called live on the same
DistTensorSpecs, and paddle-ext's answer must match it -- forward and backward. Where the
arguments are ones Paddle's rule mishandles (-1 sizes), the reference is Paddle's rule on the
same spec with the unknown size replaced by an evenly divisible one. Specs whose dims_mapping
does not fit the shape are accepted where Paddle accepts them (backward inputs) and refused where
Paddle refuses them (issue #39); where Paddle's own tests expect another answer, paddle-ext's is
checked on simulated ranks against the dense result.
"""
import pytest

from paddle_ext.compat.ports import spmd as spmd_compat
from paddle_ext.errors import PaddleExtError, PlacementError, ShardingRuleError
from paddle_ext.placements import DistSpec
from paddle_ext.spmd.lookup import get_spmd_rule
from paddle_ext.spmd.validator import check_claim

import paddle  # noqa: E402 - required: a broken install fails, never skips
from paddle.base import core  # noqa: E402
from paddle.distributed.auto_parallel.static.dist_attribute import DistTensorSpec, TensorDistAttr  # noqa: E402

MESH_2X3 = paddle.distributed.ProcessMesh([[0, 1, 2], [3, 4, 5]], dim_names=["x", "y"])
MESH_2X4 = paddle.distributed.ProcessMesh([[0, 1, 2, 3], [4, 5, 6, 7]], dim_names=["x", "y"])


def spec(shape, mapping, mesh=MESH_2X3):
    attr = TensorDistAttr()
    attr.process_mesh = mesh
    attr.dims_mapping = mapping
    return DistTensorSpec(list(shape), attr)


def absent():
    """Paddle's way of passing an absent optional input."""
    return DistTensorSpec([0], TensorDistAttr())


def _view(attr):
    if isinstance(attr, list):
        return [_view(a) for a in attr]
    mesh = None if attr.process_mesh is None else list(attr.process_mesh.shape)
    return list(attr.dims_mapping), sorted(attr._partial_dims()) if attr._is_partial() else [], mesh


def answer(rule, args, backward):
    ins, outs = (rule.infer_backward if backward else rule.infer_forward)(*args)
    return [_view(a) for a in ins], [_view(a) for a in outs]


def paddle_answer(op, *args, backward=False):
    return answer(core.get_phi_spmd_rule(op), args, backward)


def ours(op, *args, backward=False):
    return answer(get_spmd_rule(op, "ext"), args, backward)


def same_as_paddle(op, *args, backward=False):
    expected = paddle_answer(op, *args, backward=backward)
    got = ours(op, *args, backward=backward)
    assert got == expected, f"{op}{' backward' if backward else ''}: ours {got} vs Paddle {expected}"
    return got


def mappings(part):
    return [m for m, _, _ in part]


# -- softmax ------------------------------------------------------------------------------------
@pytest.mark.parametrize("mapping,axis", [([1, -1, -1], -1), ([-1, 1, -1], -1), ([1, -1, 0], -1),
                                          ([-1, 1, 0], 1), ([-1, 1, 0], -2), ([0, 1, -1], 0)])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_forward_matches_paddle(op, mapping, axis):
    same_as_paddle(op, spec([8, 16, 48], mapping, MESH_2X4), axis)


@pytest.mark.parametrize("out_mapping,axis", [([1, -1, 0], -1), ([-1, 1, 0], 1), ([1, 0, -1], -1),
                                              ([0, -1, 1], 0)])
def test_softmax_backward_returns_the_outputs_softmax_produces(out_mapping, axis):
    x = spec([8, 16, 48], [-1, -1, -1], MESH_2X4)
    got = same_as_paddle("softmax", x, spec([8, 16, 48], out_mapping, MESH_2X4), axis, backward=True)
    ins, outs = got
    assert mappings(outs)[0][axis] == -1          # the softmax axis cannot stay sharded
    assert mappings(outs) == mappings(ins)        # the output the op produces from those inputs


# -- layer_norm ---------------------------------------------------------------------------------
LN_X = [64, 32, 1024]


@pytest.mark.parametrize("x_map,scale_map,bias_map,begin", [
    ([1, -1, -1], [-1], [-1], 2), ([1, 0, -1], [0], [0], 2), ([0, -1, -1], [-1], [1], 1),
    ([-1, 1, 0], [0], [-1], 2)])
def test_layer_norm_forward_matches_paddle(x_map, scale_map, bias_map, begin):
    n = 1024 if begin == 2 else 32 * 1024
    same_as_paddle("layer_norm", spec(LN_X, x_map), spec([n], scale_map), spec([n], bias_map), 1e-3, begin)


@pytest.mark.parametrize("which", ["bias", "scale", "both"])
def test_layer_norm_absent_optional_inputs_match_paddle(which):
    scale = absent() if which in ("scale", "both") else spec([1024], [-1])
    bias = absent() if which in ("bias", "both") else spec([1024], [0])
    ins, _ = same_as_paddle("layer_norm", spec(LN_X, [1, 0, -1]), scale, bias, 1e-3, 2)
    if which == "bias":
        assert ins[2] == ([-1], [], None)  # Paddle's answer for an absent input: no mesh


@pytest.mark.parametrize("out_map,mean_map,var_map", [
    ([1, -1, -1], [1, -1], [1, -1]), ([0, -1, -1], [0, -1], [0, -1]), ([-1, -1, -1], [0, -1], [-1, 1]),
    ([-1, 1, -1], [-1, -1], [-1, -1]), ([-1, 1, -1], [0, -1], [-1, -1]), ([0, 1, -1], [-1, -1], [-1, -1]),
    ([0, -1, -1], [-1, 1], [-1, -1])])
def test_layer_norm_backward_merges_out_mean_var_as_paddle(out_map, mean_map, var_map):
    x, scale, bias = spec(LN_X, [-1, -1, -1]), spec([1024], [-1]), spec([1024], [-1])
    ins, outs = same_as_paddle("layer_norm", x, scale, bias, spec(LN_X, out_map), spec([64, 32], mean_map),
                               spec([64, 32], var_map), 1e-3, 2, backward=True)
    batch = mappings(ins)[0][:2]
    assert mappings(outs) == [batch + [-1], batch, batch]   # one layout for out, mean and var


def test_layer_norm_backward_without_bias_matches_paddle():
    same_as_paddle("layer_norm", spec(LN_X, [-1, -1, -1]), spec([1024], [-1]), absent(),
                   spec(LN_X, [0, 1, -1]), spec([64, 32], [0, 1]), spec([64, 32], [0, 1]), 1e-3, 2, backward=True)


def test_layer_norm_backward_conflict_is_resolved_where_paddle_raises():
    args = (spec(LN_X, [-1, -1, -1]), spec([1024], [-1]), spec([1024], [-1]), spec(LN_X, [1, -1, -1]),
            spec([64, 32], [0, -1]), spec([64, 32], [-1, -1]), 1e-3, 2)
    with pytest.raises(NotImplementedError):
        paddle_answer("layer_norm", *args, backward=True)
    ins, outs = ours("layer_norm", *args, backward=True)
    x_map = mappings(ins)[0]
    # forward inference on the inputs we ask for reproduces the outputs we claim
    assert ours("layer_norm", spec(LN_X, x_map), spec([1024], [-1]), spec([1024], [-1]), 1e-3, 2)[1] == outs


# -- matmul -------------------------------------------------------------------------------------
# Paddle's tests use [64, 32] x [32, 48] on a 2x3 mesh; sizes here divide by 2 and 3 so that
# Paddle 3.3's rule keeps every sharding (it drops uneven ones: the documented "uneven" category)
@pytest.mark.parametrize("x_shape,x_map,y_map,tx,ty", [
    ([96, 48], [1, 0], [0, -1], False, False), ([96, 48], [1, -1], [-1, -1], False, False),
    ([96, 48], [-1, -1], [-1, 0], False, False), ([96, 48], [1, 0], [-1, -1], False, False),
    ([96, 48], [-1, -1], [1, 0], False, False), ([24, 48, 96, 48], [0, 1, -1, -1], [-1, -1], False, False),
    ([24, 48, 96, 48], [1, -1, -1, 0], [-1, -1], False, False),
    ([24, 48, 48, 96], [1, -1, -1, 0], [-1, -1], True, False),
    ([24, 48, 96, 48], [-1, -1, -1, -1], [1, 0], False, True)])
def test_matmul_forward_matches_paddle(x_shape, x_map, y_map, tx, ty):
    y_shape = [72, 48] if ty else [48, 72]
    same_as_paddle("matmul", spec(x_shape, x_map), spec(y_shape, y_map), tx, ty)


@pytest.mark.parametrize("out_map,tx,ty", [([1, 0], False, False), ([-1, 1], False, False),
                                           ([0, -1], True, False), ([1, -1], False, True)])
def test_matmul_backward_matches_paddle(out_map, tx, ty):
    x = spec([48, 96] if tx else [96, 48], [-1, -1])
    y = spec([72, 48] if ty else [48, 72], [-1, -1])
    same_as_paddle("matmul", x, y, spec([96, 72], out_map), tx, ty, backward=True)


# -- reduction ----------------------------------------------------------------------------------
@pytest.mark.parametrize("x_map,axis,keepdim", [
    ([0, -1, -1], [0], False), ([0, -1, -1], [0], True), ([-1, 0, -1], [0], False), ([0, -1, 1], [1, 2], False),
    ([0, 1, -1], [], False), ([-1, 0, 1], [-1], True)])
def test_sum_forward_matches_paddle(x_map, axis, keepdim):
    same_as_paddle("sum", spec([64, 36, 48], x_map), axis, keepdim)


@pytest.mark.parametrize("x_map,axis,keepdim", [([-1, 0, -1], [0], False), ([0, -1, 1], [1], True),
                                                ([-1, -1, 1], [0, 1], False)])
def test_max_forward_matches_paddle_when_the_reduced_dims_are_whole(x_map, axis, keepdim):
    same_as_paddle("max", spec([64, 36, 48], x_map), axis, keepdim)


def test_max_over_a_sharded_dim_cannot_be_told_to_paddle():
    # the output is P(max); a TensorDistAttr built from Python can only say P(sum) (Paddle's own
    # rule claims P(sum): wrong values), so the bridge refuses with a named error
    with pytest.raises(PaddleExtError, match="can only carry Partial\\(sum\\)"):
        ours("max", spec([64, 36, 48], [0, -1, -1]), [0], False)


@pytest.mark.parametrize("out_shape,out_map,axis,keepdim", [
    ([36, 48], [-1, 1], [0], False), ([1, 36, 48], [-1, 0, 1], [0], True), ([64], [1], [1, 2], False),
    ([64, 1, 1], [0, -1, -1], [1, 2], True)])
def test_reduction_backward_matches_paddle(out_shape, out_map, axis, keepdim):
    same_as_paddle("sum", spec([64, 36, 48], [-1, -1, -1]), spec(out_shape, out_map), axis, keepdim,
                   backward=True)


# -- elementwise --------------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["add", "multiply"])
@pytest.mark.parametrize("x_shape,x_map,y_shape,y_map", [
    ([64, 36, 48], [0, -1, -1], [64, 36, 48], [-1, -1, -1]), ([64, 36, 48], [0, -1, 1], [64, 36, 48], [0, 1, -1]),
    ([64, 36, 48], [0, -1, -1], [36, 48], [-1, 1]), ([64, 36, 48], [-1, -1, -1], [48], [1]),
    ([64, 1, 48], [0, -1, 1], [64, 36, 48], [-1, 1, -1])])
def test_elementwise_forward_matches_paddle(op, x_shape, x_map, y_shape, y_map):
    same_as_paddle(op, spec(x_shape, x_map), spec(y_shape, y_map))


@pytest.mark.parametrize("out_map", [[0, -1, 1], [-1, 1, -1], [1, 0, -1]])
def test_elementwise_backward_matches_paddle(out_map):
    x, y = spec([64, 36, 48], [-1, -1, -1]), spec([36, 48], [-1, -1])
    same_as_paddle("add", x, y, spec([64, 36, 48], out_map), backward=True)


def test_unary_backward_matches_paddle():
    same_as_paddle("relu", spec([96, 36], [-1, -1]), spec([96, 36], [1, 0]), backward=True)


# -- embedding ----------------------------------------------------------------------------------
@pytest.mark.parametrize("ids_map,w_map", [([1, -1], [-1, -1]), ([-1, -1], [-1, 1]), ([-1, -1], [0, -1]),
                                           ([1, -1], [0, -1]), ([0, -1], [-1, 1])])
def test_embedding_forward_matches_paddle(ids_map, w_map):
    same_as_paddle("embedding", spec([16, 32], ids_map), spec([516, 768], w_map), -1, False)


@pytest.mark.parametrize("out_map", [[1, -1, -1], [-1, -1, 1], [1, 0, -1], [0, -1, 1]])
def test_embedding_backward_matches_paddle(out_map):
    same_as_paddle("embedding", spec([16, 32], [-1, -1]), spec([516, 768], [-1, -1]),
                   spec([16, 32, 768], out_map), -1, False, backward=True)


# -- -1 (unknown) sizes -------------------------------------------------------------------------
def _known(args, size):
    """The same arguments with every -1 size replaced by ``size`` (Paddle's reference)."""
    out = []
    for a in args:
        if isinstance(a, DistTensorSpec) and list(a.shape):
            shape = [size if s == -1 else s for s in a.shape]
            pm = a.process_mesh()
            out.append(spec(shape, list(a.dims_mapping()), pm) if pm is not None and len(pm.shape) else a)
        else:
            out.append(a)
    return out


@pytest.mark.parametrize("op,args", [
    ("matmul", lambda: (spec([-1, 1024], [0, -1]), spec([1024, 4096], [-1, 1]), False, False)),
    ("matmul", lambda: (spec([-1, 1024], [1, 0]), spec([1024, -1], [0, -1]), False, False)),
    ("softmax", lambda: (spec([-1, 16, 48], [1, -1, -1]), -1)),
    ("softmax", lambda: (spec([-1, 16, 48], [1, -1, 0]), -1)),
    ("layer_norm", lambda: (spec([-1, 32, 1024], [1, 0, -1]), spec([1024], [-1]), absent(), 1e-5, 2)),
    ("sum", lambda: (spec([-1, 48], [1, 0], MESH_2X3), [0], False)),
    ("add", lambda: (spec([-1, 36], [0, 1]), spec([36], [-1]))),
    ("add", lambda: (spec([-1, 36], [0, -1]), spec([64, 36], [-1, 1]))),
    ("embedding", lambda: (spec([-1, 32], [1, -1]), spec([516, 768], [0, -1]), -1, False)),
])
def test_unknown_sizes_are_accepted_and_may_be_sharded(op, args):
    args = args()
    got = ours(op, *args)
    # -1 is an unknown size: no divisibility check applies, so the answer is Paddle's on an evenly
    # divisible size (mesh dims 2 and 3 divide 96)
    assert got == paddle_answer(op, *_known(args, 96))


def test_unknown_size_in_backward():
    args = (spec([-1, 16, 48], [-1, -1, -1], MESH_2X4), spec([-1, 16, 48], [1, -1, 0], MESH_2X4), -1)
    assert ours("softmax", *args, backward=True) == paddle_answer("softmax", *_known(args, 96), backward=True)


# -- malformed specs ----------------------------------------------------------------------------
def _mapping_unchecked(shape, mapping, mesh=MESH_2X3):
    attr = TensorDistAttr()
    attr.process_mesh = mesh
    attr.dims_mapping = mapping  # Paddle does not check it against the mesh or the shape
    return DistTensorSpec(list(shape), attr)


@pytest.mark.parametrize("x,fix,fix_as_output", [
    (lambda: _mapping_unchecked([8, 16], [1, -1, 0]), "give one entry per tensor dim", None),
    (lambda: _mapping_unchecked([8, 16], [2, -1]), "mesh dims 0..1; use one of those or -1", None),
    (lambda: _mapping_unchecked([8, 16], [-2, -1]), "mesh dims 0..1; use one of those or -1", None),
    (lambda: _mapping_unchecked([8, 16], [0, 0]), "set one of them to -1", None),
    (lambda: _mapping_unchecked([8, -2], [0, -1]), "or -1 for an unknown size", None),
    # a requested output is read on the inputs' mesh: what is wrong with this one is its empty mapping
    (lambda: DistTensorSpec([8, 16], TensorDistAttr()), "only an absent optional input may be",
     "has 0 entries for a tensor of rank 2; give one entry per tensor dim"),
])
def test_malformed_specs_are_named_errors_that_say_the_fix(x, fix, fix_as_output):
    with pytest.raises(PlacementError, match=fix):
        ours("softmax", x(), -1)
    with pytest.raises(PlacementError, match=fix_as_output or fix):  # the same spec as a requested output
        ours("softmax", spec([8, 16], [-1, -1]), x(), -1, backward=True)


def test_absent_required_input_and_mixed_meshes_are_named_errors():
    with pytest.raises(ShardingRuleError, match="'x' is required.*pass a DistTensorSpec"):
        ours("matmul", absent(), spec([32, 48], [-1, -1]), False, False)
    other = paddle.distributed.ProcessMesh([[6, 7, 8], [9, 10, 11]], dim_names=["x", "y"])
    with pytest.raises(ShardingRuleError, match="same ProcessMesh"):
        ours("add", spec([4, 6], [0, -1]), spec([4, 6], [0, -1], other))
    assert issubclass(PlacementError, PaddleExtError) and issubclass(ShardingRuleError, PaddleExtError)


# -- a dims_mapping that does not fit the shape (issue #39) -------------------------------------
# Measured on Paddle 3.3.1 (docs/spmd_rules.md, "The bridge"): infer_forward refuses an input
# whose dims_mapping length is not its rank; infer_backward reads the inputs' shape and mesh but
# never their dims_mapping, and refuses a requested output whose dims_mapping length is not its rank.
def _mutated(mapping, how):
    return {"short": mapping[:-1], "empty": [], "long": mapping + [-1], "absent mesh dim": [5] + mapping[1:],
            "mesh dim twice": [0] * len(mapping)}[how]


FORWARD_CALLS = {   # op: (first input's shape, a valid mapping, its mesh, the call around it)
    "softmax": ([8, 16, 48], [1, -1, -1], MESH_2X4, lambda x: (x, -1)),
    "transpose": ([64, 36], [0, -1], MESH_2X3, lambda x: (x, [1, 0])),
    "cumsum": ([64, 32, 48], [-1, 0, 1], MESH_2X4, lambda x: (x, 1, False, False, False)),
    "relu": ([64, 36], [0, -1], MESH_2X3, lambda x: (x,)),
    "add": ([64, 36], [0, -1], MESH_2X3, lambda x: (x, spec([64, 36], [-1, -1]))),
    "max": ([64, 36], [-1, 0], MESH_2X3, lambda x: (x, [0], False)),
    "reshape": ([6, 12, 48, 24], [0, -1, 1, -1], MESH_2X3, lambda x: (x, [1, 72, 48, 4, 6])),
    "matmul": ([96, 48], [1, 0], MESH_2X3, lambda x: (x, spec([48, 72], [0, -1]), False, False)),
}


@pytest.mark.parametrize("how", ["short", "empty", "long"])
@pytest.mark.parametrize("op", sorted(FORWARD_CALLS))
def test_forward_refuses_an_input_mapping_of_another_length_as_paddle_does(op, how):
    shape, mapping, mesh, call = FORWARD_CALLS[op]
    x = _mapping_unchecked(shape, _mutated(mapping, how), mesh)
    with pytest.raises(ValueError, match="dims_mapping size"):
        paddle_answer(op, *call(x))
    with pytest.raises(PlacementError, match="give one entry per tensor dim"):   # a ValueError too
        ours(op, *call(x))


def test_layer_norm_forward_refuses_what_paddle_does_not_check():
    # Paddle's layer_norm rule skips the length check: a short x mapping comes back short (an
    # attr its tensor cannot hold), an empty one crashes the process, so Paddle is not called here
    with pytest.raises(PlacementError, match="has 2 entries for a tensor of rank 3"):
        ours("layer_norm", spec(LN_X, [1, -1]), spec([1024], [-1]), spec([1024], [-1]), 1e-3, 2)


BACKWARD_CALLS = {  # op: (first input's shape, the call around it; the requested outputs are valid)
    "softmax": ([8, 16, 48], lambda x: (x, spec([8, 16, 48], [1, -1, 0], MESH_2X4), -1)),
    "transpose": ([64, 48, 36, 24], lambda x: (x, spec([64, 36, 24, 48], [-1, 1, -1, 0]), [0, 2, 3, 1])),
    "relu": ([64, 36], lambda x: (x, spec([64, 36], [-1, 0]))),
    "add": ([64, 36, 12], lambda x: (x, spec([12], [-1]), spec([64, 36, 12], [-1, -1, 0]))),
    "layer_norm": (LN_X, lambda x: (x, spec([1024], [-1]), spec([1024], [-1]), spec(LN_X, [1, -1, -1]),
                                    spec([64, 32], [1, -1]), spec([64, 32], [1, -1]), 1e-3, 2)),
    "max": ([96, 24, 48], lambda x: (x, spec([96], [1]), [1, 2], False)),
    "reshape": ([6, 12, 48, 24], lambda x: (x, spec([1, 72, 48, 4, 6], [-1, 0, 1, -1, -1]), [1, 72, 48, 4, 6])),
    "matmul": ([512, 48, 64, 32], lambda x: (x, spec([512, 1, 32, 48], [-1] * 4), spec([512, 48, 64, 48],
                                                                                        [-1, 0, -1, 1]), False, False)),
}


@pytest.mark.parametrize("how", ["short", "empty", "long", "absent mesh dim", "mesh dim twice"])
@pytest.mark.parametrize("op", sorted(BACKWARD_CALLS))
def test_backward_reads_inputs_by_shape_and_mesh_as_paddle_does(op, how):
    shape, call = BACKWARD_CALLS[op]
    mesh = MESH_2X4 if op == "softmax" else MESH_2X3
    x = _mapping_unchecked(shape, _mutated([-1, 0] + [-1] * (len(shape) - 2), how), mesh)
    ins, outs = same_as_paddle(op, *call(x), backward=True)
    # the answer is the one for a well-formed x: its mapping was never read
    well_formed = _mapping_unchecked(shape, [-1] * len(shape), mesh)
    assert (ins, outs) == ours(op, *call(well_formed), backward=True)


def test_cumsum_backward_reads_its_input_by_shape_where_paddle_checks_the_length():
    out = spec([64, 32, 48], [-1, -1, 1], MESH_2X4)
    short = _mapping_unchecked([64, 32, 48], [-1, 0], MESH_2X4)
    with pytest.raises(ValueError, match="dims_mapping size"):
        paddle_answer("cumsum", short, out, 1, False, False, False, backward=True)
    expected = paddle_answer("cumsum", spec([64, 32, 48], [-1, -1, -1], MESH_2X4), out, 1, False, False, False,
                             backward=True)
    assert ours("cumsum", short, out, 1, False, False, False, backward=True) == expected


def test_backward_reads_requested_outputs_on_the_inputs_mesh():
    # the output spec kept a 1-D mesh while the inputs moved to 2x3 (as one of Paddle's tests does):
    # Paddle reads only its dims_mapping, and so does the bridge, on the mesh the op runs on
    stale = _mapping_unchecked([96, 24, 48], [0, 1, -1], paddle.distributed.ProcessMesh([0, 1, 2, 3]))
    x, y = _mapping_unchecked([96, 24, 48], [1, 0], MESH_2X3), _mapping_unchecked([96, 24, 48], [1, 0], MESH_2X3)
    ins, outs = ours("add", x, y, stale, backward=True)
    expected_ins, expected_outs = paddle_answer("add", x, y, stale, backward=True)
    assert mappings(ins) == mappings(expected_ins) == [[0, 1, -1], [0, 1, -1]]
    assert mappings(outs) == mappings(expected_outs) == [[0, 1, -1]]
    assert all(mesh == [2, 3] for _, _, mesh in ins + outs)   # Paddle leaves the output on the stale mesh


OUTPUT_CALLS = {    # op: (requested output's shape, a valid mapping, its mesh, the call around it)
    "softmax": ([8, 16, 48], [1, -1, 0], MESH_2X4, lambda o: (spec([8, 16, 48], [-1, -1, -1], MESH_2X4), o, -1)),
    "transpose": ([36, 64], [-1, 0], MESH_2X3, lambda o: (spec([64, 36], [-1, -1]), o, [1, 0])),
    "add": ([64, 36], [0, -1], MESH_2X3, lambda o: (spec([64, 36], [-1, -1]), spec([64, 36], [-1, -1]), o)),
    "max": ([96, 24], [1, -1], MESH_2X3, lambda o: (spec([96, 24, 48], [-1, -1, -1]), o, [2], False)),
    "reshape": ([1, 72, 48, 4, 6], [-1, 0, 1, -1, -1], MESH_2X3,
                lambda o: (spec([6, 12, 48, 24], [-1] * 4), o, [1, 72, 48, 4, 6])),
}


@pytest.mark.parametrize("how", ["short", "empty", "long"])
@pytest.mark.parametrize("op", sorted(OUTPUT_CALLS))
def test_backward_refuses_an_output_mapping_of_another_length_as_paddle_does(op, how):
    shape, mapping, mesh, call = OUTPUT_CALLS[op]
    out = _mapping_unchecked(shape, _mutated(mapping, how), mesh)
    with pytest.raises(ValueError, match="dims_mapping size"):
        paddle_answer(op, *call(out), backward=True)
    with pytest.raises(PlacementError, match="give one entry per tensor dim"):
        ours(op, *call(out), backward=True)


def test_one_mesh_dim_on_two_output_dims_is_refused_by_both():
    args = (spec([512, 48, 32, 64], [-1] * 4), spec([512, 1, 48, 32], [-1] * 4),
            _mapping_unchecked([512, 48, 64, 48], [-1, 1, 0, 1]), True, True)
    with pytest.raises(RuntimeError, match="sharded by same mesh dimension"):
        paddle_answer("matmul", *args, backward=True)
    with pytest.raises(PlacementError, match="uses mesh dim 1 for tensor dims 1 and 3.*set one of them to -1"):
        ours("matmul", *args, backward=True)


@pytest.mark.parametrize("x_shape,out_shape,out_map,attr", [
    ([6, 12, 48, 24], [3, 24, 6, 8, 24], [1, -1, -1, -1, 0], [1, 72, 48, 4, 6]),     # attribute disagrees
    ([6, 12, 48, 24], [6, 12, 48, 24], [-1, -1, 0, 1], [1, 72, 48, 4, 6]),          # and has another rank
    ([6, 12, 48, 24], [72, 3, 16, 24], [0, 1, -1, -1], [1, 72, 48, 4, 6]),
    ([8, 1024, 3072], [0, 0, -1, 192], [0, 1, -1, -1], [0, 0, -1, 192]),            # 0 and -1 as in the attribute
    ([-1, -1, 3072], [0, 0, -1, 192], [0, 1, -1, -1], [0, 0, -1, 192]),
])
def test_reshape_backward_reads_its_target_from_the_output_spec_as_paddle_does(x_shape, out_shape, out_map, attr):
    same_as_paddle("reshape", spec(x_shape, [-1] * len(x_shape)), _mapping_unchecked(out_shape, out_map), attr,
                   backward=True)


def test_a_matmul_whose_contracted_sizes_differ_is_refused_by_both():
    # one of Paddle's tests sets trans_x without transposing x's shape: k is 64 in x and 32 in y
    args = (spec([512, 48, 64, 32], [1, -1, -1, 0]), spec([32, 48], [-1, -1]), True, False)
    with pytest.raises(RuntimeError, match="Shape Conflict"):
        paddle_answer("matmul", *args)
    with pytest.raises(ShardingRuleError, match="factor 'k' has size 64 .* but size 32 .*make the sizes equal"):
        ours("matmul", *args)


# -- where Paddle's own tests expect another answer, ours is right by the dense check ----------
def _raw(rule, args, backward=False):
    return (rule.infer_backward if backward else rule.infer_forward)(*args)


def _dense_verdict(op, answer, in_shapes, out_shapes, attrs):
    """'' when the answer's layouts rebuild the dense result on simulated ranks, else why not."""
    claim = [[spmd_compat.spec_from_dist_attr(a, s) for a, s in zip(part, shapes)]
             for part, shapes in zip(answer, (in_shapes, out_shapes))]
    return check_claim(op, in_shapes, attrs, *claim)


def test_elementwise_merge_differs_from_paddle_and_both_are_right():
    args = (spec([96, 24, 48], [0, -1, -1]), spec([96, 24, 48], [-1, 1, 0]))
    shapes = ([(96, 24, 48)] * 2, [(96, 24, 48)])
    ext, paddle_raw = _raw(get_spmd_rule("add", "ext"), args), _raw(core.get_phi_spmd_rule("add"), args)
    assert mappings([_view(a) for a in ext[1]]) == [[-1, 1, 0]]      # keeps the most-sharded input
    assert mappings([_view(a) for a in paddle_raw[1]]) == [[0, 1, -1]]
    assert _dense_verdict("add", ext, *shapes, {}) == "" and _dense_verdict("add", paddle_raw, *shapes, {}) == ""


def test_layer_norm_backward_conflict_answer_is_right_by_the_dense_check():
    args = (spec(LN_X, [-1, -1, -1]), spec([1024], [-1]), spec([1024], [-1]), spec(LN_X, [1, -1, -1]),
            spec([64, 32], [0, -1]), spec([64, 32], [-1, -1]), 1e-3, 2)
    answer = _raw(get_spmd_rule("layer_norm", "ext"), args, backward=True)
    shapes = ([tuple(LN_X), (1024,), (1024,)], [tuple(LN_X), (64, 32), (64, 32)])
    assert _dense_verdict("layer_norm", answer, *shapes, {"epsilon": 1e-3, "begin_norm_axis": 2}) == ""


def test_max_over_a_sharded_dim_is_partial_max_and_paddles_partial_sum_is_wrong():
    mesh4 = paddle.distributed.ProcessMesh([0, 1, 2, 3])
    attrs = {"axis": [0], "keepdim": False}
    res = get_spmd_rule("max", "ext").infer([DistSpec((64, 32), (4,), "[S(0)]")], attrs)
    assert str(res.outputs[0].placements[0]) == "P(max)"
    assert check_claim("max", [(64, 32)], attrs, res.inputs, res.outputs) == ""
    paddle_raw = _raw(core.get_phi_spmd_rule("max"), (spec([64, 32], [0, -1], mesh4), [0], False))
    assert "values differ from dense" in _dense_verdict("max", paddle_raw, [(64, 32)], [(32,)], attrs)


def test_reshape_of_an_uneven_split_piece_paddle_keeps_is_wrong_by_the_dense_check():
    # [-1, -1, 3072] -> [0, 0, -1, 192]: mesh dim 1 (3 ranks) on the 16 rows of 192 would need
    # 3072 / 3 = 1024 elements per rank to be whole rows: they are not
    args = (spec([-1, -1, 3072], [-1, -1, -1]), _mapping_unchecked([0, 0, -1, 192], [0, -1, 1, -1]),
            [0, 0, -1, 192])
    ext = _raw(get_spmd_rule("reshape", "ext"), args, backward=True)
    paddle_raw = _raw(core.get_phi_spmd_rule("reshape"), args, backward=True)
    shapes, attrs = ([(2, 3, 3072)], [(2, 3, 16, 192)]), {"shape": [2, 3, 16, 192]}
    assert [list(a.dims_mapping) for a in ext[0]] == [[0, -1, -1]]
    assert [list(a.dims_mapping) for a in paddle_raw[0]] == [[0, -1, 1]]
    assert _dense_verdict("reshape", ext, *shapes, attrs) == ""
    assert "cannot reshape" in _dense_verdict("reshape", paddle_raw, *shapes, attrs)
