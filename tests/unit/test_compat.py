"""Compat layer: version gate, lossless conversion with Paddle objects, the numpy fix."""
import pytest

import paddle  # noqa: E402 - required: a broken install fails here, never skips
import paddle.distributed as dist  # noqa: E402

from paddle_ext import errors  # noqa: E402
from paddle_ext.compat import (FIXES, from_dist_attr, from_paddle_placements, to_dist_attr,  # noqa: E402
                               to_paddle_placements, version_status)
from paddle_ext.compat.version import require_paddle  # noqa: E402
from paddle_ext.placements import parse_placements  # noqa: E402

ROUND_TRIP = ["[R]", "[S(0)]", "[S(1)]", "[P(sum)]", "[P(avg)]", "[P(max)]", "[P(min)]",
              "[S(0),S(1)]", "[S(1),S(0)]", "[S(0),S(0)]", "[P(sum),S(1)]", "[R,P(avg)]", "[S(1),S(1)]"]


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_paddle_placements_round_trip(text):
    pls = to_paddle_placements(text)
    assert all(type(p).__module__.startswith("paddle") for p in pls)
    assert from_paddle_placements(pls) == parse_placements(text)


def test_shorter_placement_lists_mean_replicate_as_in_paddle():
    # dist.shard_layer leaves unsharded parameters as [Replicate()] on any mesh
    assert from_paddle_placements([dist.Replicate()], mesh_ndim=2) == parse_placements("[R,R]")
    assert from_paddle_placements([dist.Shard(1)], mesh_ndim=3) == parse_placements("[S(1),R,R]")
    with pytest.raises(errors.ConversionError, match="has 2 placements for a mesh of 1 dims"):
        from_paddle_placements([dist.Replicate(), dist.Replicate()], mesh_ndim=1)


def test_co_shard_uses_paddle_shard_order():
    pls = to_paddle_placements("[S(0),S(0)]")
    assert [p.get_co_shard_order() for p in pls] == [0, 1]
    assert str(pls[0]) == "Shard(dim=0, shard_order=0)"


@pytest.mark.parametrize("text", ["[R,R]", "[S(0),R]", "[S(0),S(1)]", "[S(0),S(0)]", "[P(sum),S(1)]",
                                  "[S(1),P(sum)]", "[P(sum),P(sum)]"])
def test_dist_attr_round_trip(text):
    mesh = dist.ProcessMesh([[0, 1], [2, 3]])
    attr = to_dist_attr(mesh, text, 2)
    assert from_dist_attr(attr) == parse_placements(text)


def test_dist_attr_from_a_mesh_shape_keeps_every_mesh_dim():
    attr = to_dist_attr((2, 2), "[S(1),S(0)]", 2)
    assert list(attr.process_mesh.shape) == [2, 2] and list(attr.process_mesh.process_ids) == [0, 1, 2, 3]
    assert from_dist_attr(attr) == parse_placements("[S(1),S(0)]")


def test_dist_attr_reads_reduce_type_from_paddle_rules():
    # Paddle's own rules produce partial attrs; the reduce type is recovered, not assumed SUM
    from paddle.base import core
    from paddle.distributed.auto_parallel.static.dist_attribute import DistTensorSpec

    x = to_dist_attr(dist.ProcessMesh([0, 1]), "[S(1)]", 2)
    _, outs = core.get_phi_spmd_rule("mean_all").infer_forward(DistTensorSpec([4, 6], x))
    assert from_dist_attr(outs[0]) == parse_placements("[P(avg)]")
    _, outs = core.get_phi_spmd_rule("sum").infer_forward(DistTensorSpec([4, 6], x), [1], False)
    assert from_dist_attr(outs[0]) == parse_placements("[P(sum)]")


def test_lossy_conversions_raise():
    mesh = dist.ProcessMesh([0, 1])
    with pytest.raises(errors.ConversionError, match="can only carry Partial\\(sum\\).*P\\(avg\\) would silently"):
        to_dist_attr(mesh, "[P(avg)]", 2)
    with pytest.raises(errors.ConversionError, match="split_factor 2"):
        from_paddle_placements([dist.Shard(0, split_factor=2)])
    with pytest.raises(errors.ConversionError, match="reduce type kRedProd has no paddle-ext equivalent"):
        from_paddle_placements([dist.Partial(dist.ReduceType.kRedProd)])
    with pytest.raises(errors.ConversionError, match="mesh-dim order other than ascending"):
        from_paddle_placements([dist.Shard(0, shard_order=1), dist.Shard(0, shard_order=0)])
    with pytest.raises(errors.PlacementError, match="has 1 placements but the mesh \\[2, 2\\]"):
        to_dist_attr(dist.ProcessMesh([[0, 1], [2, 3]]), "[S(0)]", 2)


def test_version_gate_names_found_and_supported():
    ok, why = version_status(paddle.__version__)
    assert ok, why
    ok, why = version_status("2.6.1")
    assert not ok and "found Paddle 2.6.1" in why and "3.3.x" in why
    with pytest.raises(errors.CompatError, match="needs a supported Paddle: found Paddle 2.6.1; paddle-ext supports 3.3.x"):
        require_paddle("static reshard functions", version="2.6.1")
    ok, why = version_status(None)
    assert not ok and "Paddle is not installed" in why and "pip install paddle-ext[cpu]" in why


def test_numpy_mesh_rank_fix_fails_without_and_passes_with():
    fix = FIXES["numpy-mesh-rank"]
    fix.revert()
    mesh = dist.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
    import numpy as np
    if tuple(int(v) for v in np.__version__.split(".")[:2]) >= (2, 4):
        assert fix.needed()
        with pytest.raises(TypeError, match="only 0-dimensional arrays"):
            mesh.get_rank_by_dim_and_process_id("mp", 3)
    try:
        fix.apply()
        fix.apply()  # idempotent
        assert [mesh.get_rank_by_dim_and_process_id(d, 3) for d in ("dp", "mp")] == [1, 1]
        assert mesh.get_rank_by_dim_and_process_id("dp", 2) == 1
        assert mesh.get_rank_by_dim_and_process_id("mp", 2) == 0
        assert mesh.get_rank_by_dim_and_process_id("mp", 9) == -1
    finally:
        fix.revert()


def test_install_is_idempotent_and_reports():
    import paddle_ext
    from paddle_ext.compat import uninstall

    try:
        first = paddle_ext.install()
        assert paddle_ext.install() == first
        extras = {"dygraph-reshard", "static-reshard-functions"}
        from paddle_ext.compat.fixes.table import RING_FIXES

        assert set(first) <= set(FIXES) | set(RING_FIXES) | extras and extras <= set(first)
        assert ("static-gloo-rings" in first) == (not paddle.is_compiled_with_cuda())
        assert ("static-gloo-groups" in first) == (not paddle.is_compiled_with_cuda())
    finally:
        from paddle_ext.reshard.install import uninstall_reshard
        from paddle_ext.compat.ports.static_reshard import uninstall_static_reshard

        from paddle_ext.compat.fixes.table import uninstall_rings

        uninstall()
        uninstall_rings()
        uninstall_reshard()
        uninstall_static_reshard()


class _BarePlacement:
    """What Paddle 3.3.1 returns from DistTensor.placements for co-shard: no get_dim, only a repr."""

    def __init__(self, text):
        self.text = text

    def is_replicated(self):
        return False

    def is_shard(self):
        return True

    def is_partial(self):
        return False

    def __repr__(self):
        return self.text


def test_bare_co_shard_placements_are_read_from_their_repr():
    bare = [_BarePlacement("Shard(dim=0, shard_order=0)"), _BarePlacement("Shard(dim=0, shard_order=1)")]
    assert from_paddle_placements(bare) == parse_placements("[S(0),S(0)]")
    with pytest.raises(errors.ConversionError, match="order other than ascending"):
        from_paddle_placements(bare[::-1])
    with pytest.raises(errors.ConversionError, match="cannot read the Paddle shard placement"):
        from_paddle_placements([_BarePlacement("Shard(axis=0)")])
