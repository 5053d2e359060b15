"""Routing by backend (one process, no launch): the decision table of docs/backends.md.

``paddle.distributed.get_backend`` and ``is_initialized`` are replaced by test doubles where a
test needs a parallel environment; the values checks run paddle-ext's executor in a job of one
process without ``dist.init_parallel_env()`` (no communication is needed there).
"""
import logging

import numpy as np
import pytest

import paddle
import paddle.distributed as dist

from paddle_ext.compat.ports import backend as be
from paddle_ext.compat.fixes import table as fixes
from paddle_ext.placements import DistSpec
from paddle_ext.reshard import route
from paddle_ext.compat.ports import static_reshard as sf

pir = paddle.base.libpaddle.pir
RT = paddle.base.core.ReduceType


@pytest.fixture
def backend(monkeypatch):
    """Pretend a parallel environment whose groups run on the backend the test sets."""
    answer = {"name": "GLOO"}
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_backend", lambda group=None: answer["name"])
    monkeypatch.setattr(be, "_NOTED", set())
    return answer


def test_backend_is_read_from_paddles_public_api(backend):
    for name in ("gloo", "NCCL", "xccl"):
        backend["name"] = name
        assert be.backend_of(None) == name.upper()


def test_no_parallel_env_has_no_backend(monkeypatch):
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    assert be.backend_of(None) is None and not be.parallel_env_ready()


def test_unknown_backends_go_to_paddle_with_one_log_line(backend, caplog):
    backend["name"] = "XCCL"
    with caplog.at_level(logging.WARNING, logger="paddle_ext.reshard"):
        assert be.route_unknown(be.backend_of(None), "dygraph reshards")
        assert be.route_unknown(be.backend_of(None), "dygraph reshards")
    assert len([r for r in caplog.records if "XCCL" in r.getMessage()]) == 1
    assert not be.route_unknown("GLOO", "x") and not be.route_unknown("NCCL", "x") and not be.route_unknown(None, "x")


def _spec(text, shape=(4, 6), mesh=(2,)):
    return DistSpec(shape, mesh, text)


NCCL_TABLE = [  # src, dst, shape, mesh, src ranks, dst ranks, kept key (None: Paddle)
    ("[R]", "[S(0)]", (4, 6), (2,), (0, 1), (0, 1), None),
    ("[S(1)]", "[R]", (4, 6), (2,), (0, 1), (0, 1), None),
    ("[P(sum)]", "[R]", (4, 6), (2,), (0, 1), (0, 1), None),
    ("[S(0)]", "[S(1)]", (4, 6), (2,), (0, 1), (0, 1), None),
    ("[P(sum)]", "[S(1)]", (4, 6), (2,), (0, 1), (0, 1), None),
    ("[R]", "[P(sum)]", (4, 6), (2,), (0, 1), (0, 1), None),
    ("[P(avg)]", "[R]", (4, 6), (2,), (0, 1), (0, 1), None),
    ("[P(sum), S(0)]", "[R, S(0)]", (4, 6), (2, 2), (0, 1, 2, 3), (0, 1, 2, 3), None),
    ("[S(0)]", "[S(0)]", (4, 6), (2,), (0, 1), (2, 3), None),            # same status, other ranks
    ("[R]", "[P(avg)]", (4, 6), (2,), (0, 1), (0, 1), "partial-target-op"),
    ("[P(max)]", "[P(max)]", (4, 6), (2,), (0, 1), (0, 1), "partial-target-op"),
    ("[P(avg), R]", "[R, R]", (4, 6), (2, 2), (0, 1, 2, 3), (0, 1, 2, 3), "partial-source-op"),
    ("[P(avg)]", "[S(0)]", (4, 6), (2,), (0, 1), (0, 1), "partial-source-op"),
    ("[S(0)]", "[P(sum)]", (4, 6), (2,), (0, 1), (0, 1), "s-to-p"),
    ("[R]", "[P(sum)]", (4, 6), (2,), (1, 2), (1, 2), "r-to-p-off-rank-0"),
    ("[S(0)]", "[R]", (5, 7), (2,), (0, 1), (0, 1), "uneven"),
    ("[R]", "[S(0)]", (3, 6), (4,), (0, 1, 2, 3), (0, 1, 2, 3), "uneven"),
    ("[S(0), S(0)]", "[R, R]", (4, 6), (2, 2), (0, 1, 2, 3), (0, 1, 2, 3), "uneven"),  # co-shard
    ("[S(0)]", "[S(1)]", (4, 6), (2,), (0, 1), (1, 0), "cross-mesh"),
    ("[S(0)]", "[R]", (4, 6), (2,), (0, 1), (2, 3), "cross-mesh"),
]


@pytest.mark.parametrize("row", NCCL_TABLE, ids=[f"{r[0]}->{r[1]}{r[2]}@{r[4]}->{r[5]}" for r in NCCL_TABLE])
def test_nccl_decision_table(row):
    a, b, shape, mesh, s_ranks, d_ranks, kept = row
    assert route.nccl_keeps(_spec(a, shape, mesh), _spec(b, shape, mesh), s_ranks, d_ranks) == kept
    if kept:
        assert kept in route.NCCL_KEPT  # every kept case names its reason


def test_no_parallel_env_in_a_job_of_one_runs_paddle_ext_without_communication():
    """One process, no init_parallel_env: [R,R,R] on a 3-D mesh with a pp dim of 1 to [R,R] on the
    stage sub-mesh is a 0-byte step; paddle-ext runs it with no group at all."""
    import paddle_ext
    from paddle_ext.reshard import install as inst
    from paddle_ext.reshard.install import uninstall_reshard

    assert not dist.is_initialized() and dist.get_world_size() == 1
    dense = np.arange(24, dtype="float32").reshape(4, 6)
    mesh3 = dist.ProcessMesh([[[0]]], dim_names=["pp", "dp", "tp"])
    stage = dist.ProcessMesh([[0]], dim_names=["dp", "tp"])
    x = dist.shard_tensor(paddle.to_tensor(dense), mesh3, [dist.Replicate()] * 3)
    alone = dist.reshard(x, stage, [dist.Replicate(), dist.Replicate()])._local_value().numpy()  # Paddle alone
    natives = []
    paddle_ext.install()
    inst.NATIVE_LISTENERS.append(lambda *a: natives.append(a))
    try:
        y = dist.reshard(x, stage, [dist.Replicate(), dist.Replicate()])
        first = list(natives)
        s = dist.reshard(y, stage, [dist.Shard(0), dist.Shard(1)])  # same mesh, even: Paddle's (as before)
    finally:
        inst.NATIVE_LISTENERS.pop()
        uninstall_reshard()
        fixes.uninstall()
        sf.uninstall_static_reshard()
    assert not first and len(natives) == 1  # paddle-ext's executor ran the mesh change, with no group
    assert np.array_equal(y._local_value().numpy(), dense) and list(y.process_mesh.shape) == [1, 1]
    assert np.array_equal(y._local_value().numpy(), alone)  # the values Paddle alone gives
    assert np.array_equal(s._local_value().numpy(), dense)


def _attr(ids, dims, partial=None):
    mesh = dist.ProcessMesh(list(ids), dim_names=["x"])
    return pir.create_tensor_dist_attribute(mesh, list(dims), partial or {})


S0, R = [0, -1], [-1, -1]


def test_static_functions_decline_what_paddle_does_exactly_on_nccl(backend):
    r_to_psum_at_0 = (_attr([0, 1], R), _attr([0, 1], R, {0: RT.kRedSum}))
    r_to_psum_off_0 = (_attr([1, 2], R), _attr([1, 2], R, {0: RT.kRedSum}))
    r_to_pmin = (_attr([0, 1], R), _attr([0, 1], R, {0: RT.kRedMin}))
    s_to_p = (_attr([0, 1], S0), _attr([0, 1], R, {0: RT.kRedSum}))
    s_to_r = (_attr([0, 1], S0), _attr([0, 1], R))
    for name in ("GLOO", "NCCL"):
        backend["name"] = name
        gloo = name == "GLOO"
        assert sf.RToPStaticReshard().is_suitable(*r_to_psum_at_0) == gloo  # Paddle exact on NCCL
        assert sf.RToPStaticReshard().is_suitable(*r_to_psum_off_0)         # Paddle: zeros everywhere
        assert sf.RToPStaticReshard().is_suitable(*r_to_pmin)               # Paddle: no min
        assert sf.SToPStaticReshard().is_suitable(*s_to_p)                  # Paddle: no function
        assert sf.SToRStaticReshard().is_suitable(*s_to_r)                  # even: Paddle's, in reshard()
    backend["name"] = "XCCL"
    assert not any(f().is_suitable(*s_to_p) for f in (sf.SToPStaticReshard,))


def test_compat_fixes_ask_the_backend(backend):
    backend["name"] = "GLOO"
    assert be.job_on_gloo()
    backend["name"] = "NCCL"
    assert not be.job_on_gloo()


def test_a_cuda_build_running_gloo_keeps_the_cpu_fixes(backend, monkeypatch):
    """The fixes follow the backend, not the build."""
    monkeypatch.setattr(paddle.base.core, "is_compiled_with_cuda", lambda: True)
    monkeypatch.setattr(paddle, "is_compiled_with_cuda", lambda: True)
    backend["name"] = "GLOO"
    assert be.job_on_gloo() and fixes.FIXES["static-gloo-groups"].needed()
    monkeypatch.setattr(dist, "is_initialized", lambda: False)  # before init_parallel_env: the device
    monkeypatch.setattr(paddle.device, "get_device", lambda: "cpu")
    assert be.job_on_gloo()
    monkeypatch.setattr(paddle.device, "get_device", lambda: "gpu:0")
    assert not be.job_on_gloo()


def test_patched_functions_hand_other_backends_to_paddles_original(backend, monkeypatch):
    calls = []
    fix = fixes.FIXES["static-gloo-barrier"]
    fix.revert()
    # stand-ins for Paddle's eager barrier (captured by the fix as "the original") and dist.barrier
    monkeypatch.setattr(paddle._legacy_C_ops, "barrier", lambda x, out, *attrs: calls.append("paddle") or out)
    monkeypatch.setattr(dist, "barrier", lambda *a, **k: calls.append("gloo"))
    try:
        assert fix.apply()
        for name in ("NCCL", "GLOO", "XCCL"):
            backend["name"] = name
            paddle._legacy_C_ops.barrier(None, "out", "ring_id", 0)
    finally:
        fix.revert()
    assert calls == ["paddle", "gloo", "paddle"], calls


def test_a_rank_outside_the_group_asks_the_world_quietly(backend, recwarn):
    class Outside:
        def is_member(self):
            return False

    backend["name"] = "NCCL"
    assert be.backend_of(Outside()) is None and be.backend_of(None) == "NCCL"
    assert not [w for w in recwarn if "not in group" in str(w.message)]
