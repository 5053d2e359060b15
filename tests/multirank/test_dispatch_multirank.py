"""Dispatch on real gloo ranks: every enable()'d op fwd+bwd vs dense on 2 and 4 ranks, the
gradient fix against dist.local_map, the uneven mean fix, the audit, bad inputs, to_static."""
import pytest

import dispatch_ranks as dr
from paddle_ext.testing import run_ranks

pytestmark = pytest.mark.multirank

TOL = 1e-4


@pytest.fixture(scope="module")
def compiled_key():
    """The dispatcher's compiled plan-cache key, built here once (first use ~25 s) so the ranks
    load it instead of each waiting for the build."""
    from paddle_ext.compat.native import fast_key

    fast_key.use(True)


# each world runs with one of the dispatcher's two plan-cache keys, so both are proven on real ranks
@pytest.mark.parametrize("world, key", [(2, "python"), (4, "compiled")], ids=["2ranks-python-key", "4ranks-compiled-key"])
def test_enabled_ops_forward_and_backward_match_dense(world, key, compiled_key, tmp_path):
    names = list(dr.OP_CASES)
    res = run_ranks(dr.ops_fwd_bwd, nproc=world, args=(names, world, key), timeout=150, log_dir=tmp_path / "log")
    bad = {}
    for rank, per_op in enumerate(res):
        for name in names:
            rec = per_op[name]
            if "error" in rec:
                bad[(rank, name)] = rec["error"]
                continue
            if not rec["shape_ok"] or rec["fwd_err"] > TOL:
                bad[(rank, name)] = f"forward: {rec}"
            if "Shard" not in rec["out"] and "Partial" not in rec["out"]:
                bad[(rank, name)] = f"lost its sharding: {rec['out']}"
            for i, (err, _) in rec.get("grad", {}).items():
                if err > TOL:
                    bad[(rank, name)] = f"grad of input {i}: max err {err}"
    assert not bad, bad
    assert len(names) >= 20


def test_gradient_fix_mean_fix_audit_and_errors(compiled_key, tmp_path):
    res = run_ranks(dr.misc_checks, nproc=2, timeout=120, log_dir=tmp_path / "log")
    for r in res:
        g = r["grad"]
        # a replicated x consumed locally by a column-parallel matmul: dispatch gives a Partial
        # gradient equal to dense; dist.local_map returns the local partial sum as Replicate
        # every gradient route: Paddle's own matmul (its rule gives this layout), paddle-ext's
        # native route with P(sum) as dtensor_to_local's gradient placement, and the PyLayer
        for route in ("dispatch", "dispatch_native", "dispatch_pylayer"):
            assert g[route]["dx_placements"] == "[Partial(reduce_type=SUM)]", (route, g[route])
            assert g[route]["dx_err"] < TOL and g[route]["dw_err"] < TOL, (route, g[route])
        assert g["dispatch"]["grad_node"] == "MatmulGradNode"
        assert g["dispatch_native"]["grad_node"] == "DtensorFromLocalGradNode"
        assert g["dispatch"]["native_hints"] == "([Partial(reduce_type=SUM)], [Shard(dim=1)])"
        assert g["local_map"]["dx_placements"] == "[Replicate()]"
        assert g["local_map"]["dx_err"] > 1.0
        m = r["mean"]
        assert abs(m["paddle"] - m["dense"]) > 0.5          # Paddle's P(avg) of local means
        assert abs(m["ext"] - m["dense"]) < 1e-5
        assert max(abs(a - b) for a, b in zip(m["ext_axis0"], m["dense_axis0"])) < 1e-5
        a = r["audit"]
        assert a["before"]["count"] == 4
        assert set(a["before"]["by_op"]) == {"max_pool2d", "flip", "cumprod", "tril"}
        assert a["before"]["gathered_bytes"] > 0
        assert a["after"]["count"] == 0
        assert set(a["after"]["dispatched"]) == {"max_pool2d", "flip", "cumprod", "tril"}
        for b in (r["bad"], r["bad_python_key"]):   # the same answers with either plan-cache key
            assert "different meshes" in b["meshes"] and "reshard" in b["meshes"]
            assert "no_such_op" in b["norule"] and "register_spmd_rule" in b["norule"]
            assert b["m21"] == {"mesh": [2, 1], "local": [2, 4], "err": 0.0}, b["m21"]
            assert b["m12"] == {"mesh": [1, 2], "local": [4, 4], "err": 0.0}, b["m12"]
            assert "different meshes" in b["mesh_shapes"], b["mesh_shapes"]
        # where Paddle's rule gives paddle-ext's layout, the dispatched call is Paddle's own op:
        # Paddle alone's graph (one grad node for the op), and every route bit-equal to Paddle alone
        for case, routes in r["route"].items():
            assert routes["dispatch"]["node"] == routes["alone"]["node"], (case, routes)
            assert routes["own"]["node"][0] == "DtensorFromLocalGradNode", (case, routes)
            assert all(v["same"] for v in routes.values()), (case, routes)


def test_to_static_training_matches_dense(tmp_path):
    """dist.to_static: an @spmd_op consuming a replicated weight locally (gradient hint P(sum)),
    enable()'d flip/tril, and mean (Partial output replicated explicitly in PIR) train like dense."""
    dense = dr.to_static_losses(True)
    res = run_ranks(dr.to_static_losses, nproc=2, args=(False,), timeout=150, log_dir=tmp_path / "log")
    for losses in res:
        assert losses == pytest.approx(dense, rel=1e-5, abs=1e-5)


def test_custom_ops_python_and_cpp(tmp_path):
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "..", "examples", "custom_op_cpp"))
    import op as custom_op_cpp

    custom_op_cpp.build()   # once, in the parent: the ranks load the cached build
    res = run_ranks(dr.custom_ops, nproc=2, timeout=150, log_dir=tmp_path / "log")
    for r in res:
        py, cpp = r["python"], r["cpp"]
        assert py["y"] == "[Shard(dim=0)]" and py["dw"] == "[Partial(reduce_type=SUM)]"
        assert max(py["y_err"], py["dx_err"], py["dw_err"]) < 1e-4
        assert cpp["y"] == "[Shard(dim=1)]"
        assert max(cpp["y_err"], cpp["dx_err"]) < 1e-5
    assert [r["cpp"]["local"] for r in res] == [[5, 4], [5, 3]]
