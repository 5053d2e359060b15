"""Reshard scenarios of Paddle's ``test/auto_parallel`` (reshard_*.py, hybrid_strategy cross-mesh),
re-written: 2 ranks, no ``dist.init_parallel_env()`` (as those files), CPU.

Values are seeded random (not ``ones``), so a transposed or misplaced block cannot pass.
"""
from __future__ import annotations

import numpy as np

from scenario_ranks import Scenario, rec

SHAPE = (10, 20)


def _setup():
    import paddle

    paddle.set_device("cpu")


def _value(shape=SHAPE, seed=2023):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


def _mesh(ids=(0, 1), names=("x",)):
    import paddle.distributed as dist

    return dist.ProcessMesh(list(ids) if len(names) == 1 else ids, dim_names=list(names))


def _reshard_case(src, dst, shape=SHAPE, mesh_ids=(0, 1), names=("x",), dst_mesh=None):
    """shard_tensor(value, src) -> dist.reshard(dst); outputs the source and the result."""
    import paddle
    import paddle.distributed as dist

    _setup()
    value = _value(shape)
    mesh = _mesh(mesh_ids, names)
    x = dist.shard_tensor(paddle.to_tensor(value), mesh, src())
    out = dist.reshard(x, dst_mesh() if dst_mesh else mesh, dst())
    return {"in": rec(x), "out": rec(out)}, {"in": value, "out": value}


def _pl(*spec):
    """Placements from a compact spec: 'R', 'P', 'S0', 'S1'."""
    def make():
        import paddle.distributed as dist

        out = []
        for s in spec:
            out.append(dist.Replicate() if s == "R" else dist.Partial() if s == "P" else dist.Shard(int(s[1:])))
        return out
    return make


def _transition(src, dst, **kw):
    return lambda: _reshard_case(_pl(*src), _pl(*dst), **kw)


def core_function(func_name, src_partial, dst_partial):
    """reshard_p_to_r.py / reshard_r_to_p.py: Paddle's C++ ReshardFunction called directly
    (``core.PToRReshardFunction().eval(dev_ctx, x, dist_attr)``), DistAttr with partial dims."""
    import paddle
    import paddle.distributed as dist
    from paddle.framework import core

    _setup()
    value = _value()
    mesh = _mesh()
    dst_attr = dist.DistAttr(mesh=mesh, sharding_specs=[None, None])
    if dst_partial:
        dst_attr._set_partial_dims([0])
    # Paddle 3.3.1's shard_tensor takes placements (the file's DistAttr form is newer)
    x = dist.shard_tensor(paddle.to_tensor(value), mesh, [dist.Partial() if src_partial else dist.Replicate()])
    fn = getattr(core, func_name)()
    if not fn.is_suitable(x, dst_attr):
        raise AssertionError(f"{func_name}.is_suitable is False")
    out = fn.eval(core.DeviceContext.create(paddle.CPUPlace()), x, dst_attr)
    return {"in": rec(x), "out": rec(out)}, {"in": value, "out": value}


def api_dist_attr(shard):
    """reshard_api.py p_to_r / r_to_s (there with DistAttr; Paddle 3.3.1 takes placements)."""
    import paddle
    import paddle.distributed as dist

    _setup()
    value = _value((11, 20))  # an odd dim: Paddle's r_to_s case checks the ceil-first split
    mesh = _mesh()
    p = dist.shard_tensor(paddle.to_tensor(value), mesh, [dist.Partial()])
    r = dist.reshard(p, mesh, [dist.Replicate()])
    s = dist.reshard(r, mesh, [dist.Shard(shard)])
    return {"p_to_r": rec(r), "r_to_s": rec(s)}, {"p_to_r": value, "r_to_s": value}


def api_forward_backward():
    """reshard_api.py forward_and_backward (GPU-only there; it runs on CPU): x+1 on R,
    reshard to S0, MSE against an S0 label; loss and x.grad against dense."""
    import paddle
    import paddle.distributed as dist

    _setup()
    x_np, label_np = _value((10, 20), 1901), _value((10, 20), 1902)
    mesh = _mesh()
    x = dist.shard_tensor(paddle.to_tensor(x_np), mesh, [dist.Replicate()])
    x.stop_gradient = False
    y = dist.reshard(x + dist.shard_tensor(paddle.ones([10, 20]), mesh, [dist.Replicate()]), mesh, [dist.Shard(0)])
    loss = paddle.nn.MSELoss()(y, dist.shard_tensor(paddle.to_tensor(label_np), mesh, [dist.Shard(0)]))
    loss.backward()
    xd = paddle.to_tensor(x_np, stop_gradient=False)
    ld = paddle.nn.MSELoss()(xd + 1, paddle.to_tensor(label_np))
    ld.backward()
    return {"loss": rec(loss), "x.grad": rec(x.grad)}, {"loss": ld.numpy(), "x.grad": xd.grad.numpy()}


def same_status(nd):
    """reshard_same_status.py: ``core.SameStatusReshardFunction`` from mesh [0] to mesh [1]
    (1-D, S0) or from [[0],[1]] to [[1],[0]] ([S0, P]): a point-to-point move."""
    import paddle
    import paddle.distributed as dist
    from paddle.framework import core

    _setup()
    value = _value()
    if nd:
        src_mesh = dist.ProcessMesh([[0], [1]], dim_names=["x", "y"])
        dst_mesh = dist.ProcessMesh([[1], [0]], dim_names=["x", "y"])
    else:
        src_mesh, dst_mesh = _mesh([0]), _mesh([1])
    dst_attr = dist.DistAttr(mesh=dst_mesh, sharding_specs=["x", None])
    if nd:
        dst_attr._set_partial_dims([1])
    pls = [dist.Shard(0), dist.Partial()] if nd else [dist.Shard(0)]
    x = dist.shard_tensor(paddle.to_tensor(value), src_mesh, pls)
    fn = core.SameStatusReshardFunction()
    if not fn.is_suitable(x, dst_attr):
        raise AssertionError("SameStatusReshardFunction.is_suitable is False")
    out = fn.eval(core.DeviceContext.create(paddle.CPUPlace()), x, dst_attr)
    return {"out": rec(out)}, {"out": value}


def _nd(src, dst, **kw):
    return _transition(src, dst, mesh_ids=[[0], [1]], names=("x", "y"), **kw)


SCENARIOS = {}


def _add(name, fn, paddle_file, exact=True, **kw):
    SCENARIOS[name] = Scenario(fn, paddle_file, exact=exact, **kw)


for _d in (0, 1):
    _add(f"reshard_s_to_r[S{_d}]", _transition([f"S{_d}"], ["R"]), "reshard_s_to_r.py")
    _add(f"reshard_r_to_s[S{_d}]", _transition(["R"], [f"S{_d}"]), "reshard_r_to_s.py")
    _add(f"reshard_r_to_s[S{_d},uneven 11x21]", _transition(["R"], [f"S{_d}"], shape=(11, 21)), "reshard_r_to_s.py")
    _add(f"reshard_p_to_s[S{_d}]", _transition(["P"], [f"S{_d}"]), "reshard_p_to_s.py")
    _add(f"reshard_s_to_p[S{_d}]", _transition([f"S{_d}"], ["P"]), "reshard_s_to_p.py")
    _add(f"reshard_api[p_to_r, r_to_s S{_d}]", lambda d=_d: api_dist_attr(d), "reshard_api.py")
_add("reshard_s_to_s[S0->S1]", _transition(["S0"], ["S1"]), "reshard_s_to_s.py")
_add("reshard_s_to_s[S1->S0]", _transition(["S1"], ["S0"]), "reshard_s_to_s.py")
_add("reshard_p_to_r", _transition(["P"], ["R"]), "reshard_p_to_r.py")
_add("reshard_r_to_p", _transition(["R"], ["P"]), "reshard_r_to_p.py")
_add("reshard_p_to_r[core.PToRReshardFunction]", lambda: core_function("PToRReshardFunction", True, False),
     "reshard_p_to_r.py")
_add("reshard_r_to_p[core.RToPReshardFunction]", lambda: core_function("RToPReshardFunction", False, True),
     "reshard_r_to_p.py")
# not only a reshard: MSELoss's mean is computed by enable()'s rule (local sum / global count)
_add("reshard_api[forward_and_backward]", api_forward_backward, "reshard_api.py", exact=False)
_add("reshard_nd_mesh[P,S0->R,S0]", _nd(["P", "S0"], ["R", "S0"]), "reshard_nd_mesh.py")
_add("reshard_nd_mesh[P,S0->R,R]", _nd(["P", "S0"], ["R", "R"]), "reshard_nd_mesh.py")
_add("reshard_nd_mesh[P,R->R,P]", _nd(["P", "R"], ["R", "P"]), "reshard_nd_mesh.py")
_add("reshard_nd_mesh[R,S1->S0,R]", _nd(["R", "S1"], ["S0", "R"]), "reshard_nd_mesh.py")
_add("reshard_nd_mesh[P,R->S0,R]", _nd(["P", "R"], ["S0", "R"]), "reshard_nd_mesh.py")
# point-to-point moves between meshes: Paddle alone crashes in libphi on CPU (GetDefaultPlace),
# so each runs in its own launch with a short timeout
_add("reshard_same_status[1-D mesh [0]->[1]]", lambda: same_status(False), "reshard_same_status.py",
     group="isolated", timeout=60)
_add("reshard_same_status[nd mesh S0,P]", lambda: same_status(True), "reshard_same_status.py",
     group="isolated", timeout=60)
_add("reshard_s_to_r_cross_mesh[S0 on [0,1] -> R on [1,0]]",
     _transition(["S0"], ["R"], dst_mesh=lambda: _mesh([1, 0])), "reshard_s_to_r_cross_mesh.py",
     group="isolated", timeout=60)
_add("reshard_nd_mesh_cross_mesh[P,P -> S0,S1]",
     _nd(["P", "P"], ["S0", "S1"], dst_mesh=lambda: _mesh([[1], [0]], ("x", "y"))),
     "reshard_nd_mesh.py (cross_mesh_reshard)", group="isolated", timeout=60)
