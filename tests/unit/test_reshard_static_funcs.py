"""paddle-ext's static ReshardFunctions in Paddle's registry (one process, no launch).

Install puts them first, idempotently; Paddle's ``choose_reshard_func`` then picks them for the
transitions they cover and still picks Paddle's own for the rest; uninstall restores the list.
Building a program for one rank (``PADDLE_TRAINER_ID``) shows the ops each function emits.
"""
import pytest

import paddle  # noqa: E402,F401 - required: a broken install fails here, never skips

import paddle  # noqa: E402
import paddle.distributed as dist  # noqa: E402
from paddle.distributed.auto_parallel.static.reshard_funcs import base_reshard_func as base  # noqa: E402

from paddle_ext.errors import ReshardPlanError  # noqa: E402
from paddle_ext.placements import DistSpec  # noqa: E402
from paddle_ext.reshard import plan_bytes, plan_reshard  # noqa: E402
from paddle_ext.compat.ports import static_reshard as sf  # noqa: E402

pir = paddle.base.libpaddle.pir
RT = paddle.base.core.ReduceType


@pytest.fixture(autouse=True)
def clean_registry():
    sf._registry()  # Paddle fills its list on import
    sf.uninstall_static_reshard()
    yield
    sf.uninstall_static_reshard()


def _attr(ids, dims, partial=None):
    mesh = dist.ProcessMesh(list(ids), dim_names=["x"])
    return pir.create_tensor_dist_attribute(mesh, list(dims), partial or {})


S0, S1, R = [0, -1], [-1, 0], [-1, -1]
COVERED = [  # (src, dst, our function)
    pytest.param(_attr([0, 1], S0), _attr([0, 1], R, {0: RT.kRedSum}), "SToPStaticReshard", id="S(0)->P(sum)"),
    pytest.param(_attr([0, 1], S1), _attr([0, 1], R, {0: RT.kRedMax}), "SToPStaticReshard", id="S(1)->P(max)"),
    pytest.param(_attr([1], R), _attr([1], R, {0: RT.kRedSum}), "RToPStaticReshard", id="R->P(sum)@[1]"),
    pytest.param(_attr([0, 1], R), _attr([0, 1], R, {0: RT.kRedAvg}), "RToPStaticReshard", id="R->P(avg)"),
    pytest.param(_attr([0, 1], S0), _attr([0, 1], S1), "SToSStaticReshard", id="S(0)->S(1)"),
    pytest.param(_attr([0, 1], S1), _attr([0, 1], S0), "SToSStaticReshard", id="S(1)->S(0)"),
    pytest.param(_attr([0, 1], R, {0: RT.kRedSum}), _attr([0, 1], S0), "PToSStaticReshard", id="P(sum)->S(0)"),
    pytest.param(_attr([0, 1], R, {0: RT.kRedMin}), _attr([0, 1], S1), "PToSStaticReshard", id="P(min)->S(1)"),
    pytest.param(_attr([0, 1], S1), _attr([0, 1], R), "SToRStaticReshard", id="S(1)->R"),
]
NOT_COVERED = [  # (src, dst, Paddle's function that must still be chosen)
    pytest.param(_attr([0, 1], R, {0: RT.kRedSum}), _attr([0, 1], R), "PToRReshardFunction", id="P->R"),
    pytest.param(_attr([0, 1], R), _attr([0, 1], S0), "RToSReshardFunction", id="R->S(0)"),
    pytest.param(_attr([0], S0), _attr([1], S0), "SameStatusReshardFunction", id="S(0)[0]=>S(0)[1]"),
    pytest.param(_attr([0, 1], R, {0: RT.kRedProd}), _attr([0, 1], S0), "PToSReshardFunction",
                 id="P(prod)->S(0)"),
]


def _chosen(src, dst):
    func = base.choose_reshard_func(src, dst)
    return type(func).__name__ if func is not None else None


def test_install_puts_ours_first_and_is_idempotent():
    funcs = sf._registry()
    paddle_own = list(funcs)
    assert sf.install_static_reshard() is True
    assert [type(f) for f in funcs[:len(sf.STATIC_FUNCTIONS)]] == list(sf.STATIC_FUNCTIONS)
    assert funcs[len(sf.STATIC_FUNCTIONS):] == paddle_own
    assert sf.install_static_reshard() is False  # a second install changes nothing
    assert len(funcs) == len(paddle_own) + len(sf.STATIC_FUNCTIONS)
    assert sf.is_static_reshard_installed()
    assert sf.uninstall_static_reshard() is True
    assert funcs == paddle_own
    assert sf.uninstall_static_reshard() is False
    assert not sf.is_static_reshard_installed()


def test_install_moves_ours_back_to_the_front():
    funcs = sf._registry()
    sf.install_static_reshard()
    stray = funcs.pop(0)  # someone else inserted ahead of or removed one of ours
    funcs.append(stray)
    assert sf.install_static_reshard() is True
    assert [type(f) for f in funcs[:len(sf.STATIC_FUNCTIONS)]] == list(sf.STATIC_FUNCTIONS)
    assert len(sf.installed_static_functions()) == len(sf.STATIC_FUNCTIONS)


@pytest.mark.parametrize("src, dst, ours", COVERED)
def test_choose_picks_ours_for_covered_transitions(src, dst, ours):
    before = _chosen(src, dst)
    sf.install_static_reshard()
    assert _chosen(src, dst) == ours
    sf.uninstall_static_reshard()
    assert _chosen(src, dst) == before  # Paddle's choice (or None: S -> P has no function) is back


@pytest.mark.parametrize("src, dst, paddle_func", NOT_COVERED)
def test_choose_keeps_paddles_function_elsewhere(src, dst, paddle_func):
    sf.install_static_reshard()
    assert _chosen(src, dst) == paddle_func


def test_paddle_has_no_s_to_p_function():
    assert _chosen(_attr([0, 1], S0), _attr([0, 1], R, {0: RT.kRedSum})) is None


def test_nd_mesh_and_cross_mesh_are_not_claimed():
    mesh2d = dist.ProcessMesh([[0, 1], [2, 3]], dim_names=["x", "y"])
    src = pir.create_tensor_dist_attribute(mesh2d, [0, -1], {})
    dst = pir.create_tensor_dist_attribute(mesh2d, [-1, 1], {})
    for cls in sf.STATIC_FUNCTIONS:
        assert not cls().is_suitable(src, dst)
        assert not cls().is_suitable(_attr([0, 1], S0), _attr([2, 3], S1))


# -- the ops emitted for one rank ----------------------------------------------------------------
_KEEP = []


def _lower(monkeypatch, rank, ids, shape, src, dst):
    """Build ``x(src) -> reshard(dst)`` for ``rank``, run Paddle's reshard pass and dist2dense.

    Returns the op names and the ops, and keeps the program alive (ops of a freed program crash).
    """
    from paddle.distributed.auto_parallel.static.pir_pass import ReshardPasses

    monkeypatch.setenv("PADDLE_TRAINER_ID", str(rank))
    monkeypatch.setattr(paddle.distributed, "get_rank", lambda group=None: rank)
    sf.install_static_reshard()
    paddle.enable_static()
    try:
        main = paddle.static.Program()
        with paddle.static.program_guard(main):
            x = paddle.static.data("x", list(shape), "float32")
            x.set_type(pir.cvt_to_dist_type(x.type(), src))
            x.get_defining_op().dist_attr = pir.create_op_dist_attribute(src.process_mesh, [], [src])
            paddle._C_ops.reshard_v2(x, dst)
            ReshardPasses.apply_reshard_pass(main)
            pir.apply_dist2dense_pass(main)
        ops = main.global_block().ops
        _KEEP.append(main)
        return [op.name() for op in ops], ops
    finally:
        paddle.disable_static()


def test_s_to_p_moves_nothing_and_pads_by_the_real_chunk(monkeypatch):
    # [5, 6] over 2 ranks: rank 0 holds rows 0-2, rank 1 rows 3-4
    names, ops = _lower(monkeypatch, 1, [0, 1], (5, 6), _attr([0, 1], S0), _attr([0, 1], R, {0: RT.kRedSum}))
    assert "pd_op.all_gather" not in names and "pd_op.all_reduce" not in names
    pad = ops[names.index("pd_op.pad")]
    assert pad.attrs().get("paddings") == [3, 0, 0, 0], pad.attrs()
    assert pad.result(0).shape == [5, 6]  # a Partial value's local shape is the global shape


def test_r_to_p_keeps_the_value_on_the_meshs_first_rank(monkeypatch):
    names, _ = _lower(monkeypatch, 1, [1], (4, 6), _attr([1], R), _attr([1], R, {0: RT.kRedSum}))
    assert names[-1] == "pd_op.assign"  # rank 1 is first in mesh [1]: it keeps the value
    names, _ = _lower(monkeypatch, 0, [1, 0], (4, 6), _attr([1, 0], R), _attr([1, 0], R, {0: RT.kRedSum}))
    assert names[-1] == "pd_op.full_like"  # rank 0 is second in mesh [1, 0]: zeros


def test_s_to_s_gathers_then_slices_own_chunk(monkeypatch):
    names, ops = _lower(monkeypatch, 1, [0, 1], (4, 7), _attr([0, 1], S1), _attr([0, 1], S0))
    core = [n for n in names if n not in ("pd_op.data", "pd_op.full", "pd_op.full_int_array")]
    assert core == ["pd_op.transpose", "pd_op.pad", "pd_op.all_gather", "pd_op.transpose", "pd_op.slice"]
    assert ops[-1].result(0).shape == [2, 7]


def test_p_to_s_all_reduces_then_slices(monkeypatch):
    names, ops = _lower(monkeypatch, 1, [0, 1], (5, 6), _attr([0, 1], R, {0: RT.kRedSum}), _attr([0, 1], S0))
    assert "pd_op.all_reduce" in names and "pd_op.reduce_scatter" not in names
    assert ops[-1].result(0).shape == [2, 6]  # the last rank's real chunk, not the ceil chunk


# -- bytes -------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape, src, dst, ours, ratio", [
    ((8, 6), "[S(0)]", "[S(1)]", 4 * 24, 2.0),     # all_gather vs all_to_all: n times on 2 ranks
    ((8, 6), "[P(sum)]", "[S(0)]", 4 * 48, 2.0),   # ring all_reduce vs reduce_scatter
    ((8, 6), "[S(0)]", "[P(sum)]", 0, None),
    ((8, 6), "[R]", "[P(sum)]", 0, None),
    ((5, 6), "[S(0)]", "[S(1)]", 4 * 18, None),    # uneven: the padded chunk travels
])
def test_static_bytes_against_the_planners_minimum(shape, src, dst, ours, ratio):
    a, b = DistSpec(shape, (2,), src), DistSpec(shape, (2,), dst)
    assert sf.static_reshard_bytes(a, b) == ours
    minimum = plan_bytes(plan_reshard(a, b))
    if ratio is None:
        assert ours >= minimum
    else:
        assert ours == ratio * minimum


def test_static_bytes_names_what_it_does_not_cover():
    with pytest.raises(ReshardPlanError, match="not one of paddle-ext's static functions"):
        sf.static_reshard_bytes(DistSpec((4, 6), (2,), "[P(sum)]"), DistSpec((4, 6), (2,), "[R]"))
    with pytest.raises(ReshardPlanError, match="1-D mesh"):
        sf.static_reshard_bytes(DistSpec((4, 6), (2, 1), "[S(0),R]"), DistSpec((4, 6), (2, 1), "[S(1),R]"))
