"""A Python op with its own SPMD rule, called on DistTensors.

``scaled_rownorm(x, w) = x / sqrt(mean(x*x, -1) + eps) * w`` normalises each row (the last dim
must stay whole) and scales it by a weight ``w`` shared by every row. With ``x`` sharded by rows
and ``w`` replicated, each rank computes its rows; ``w``'s gradient comes back ``Partial(sum)``
(each rank's contribution), which is what makes the distributed gradient equal the dense one.

Run on 2 CPU ranks:

    python -m paddle.distributed.launch --nproc_per_node 2 examples/custom_op_python.py
"""
import numpy as np

from paddle_ext.placements import DistSpec
from paddle_ext.spmd import register_spmd_rule

OP = "scaled_rownorm"


def _register():
    from paddle_ext.spmd.registry import REGISTRY

    if OP in REGISTRY.rules:
        return

    @register_spmd_rule(OP)
    def scaled_rownorm_rule(x: DistSpec, w: DistSpec, eps: float = 1e-6):
        """... h, h -> ... h | replicate: h"""
        return "... h, h -> ... h | replicate: h"


_register()


def make_op():
    import paddle

    import paddle_ext.dispatch as pd

    @pd.spmd_op(OP)
    def scaled_rownorm(x, w, eps=1e-6):
        return x / paddle.sqrt((x * x).mean(-1, keepdim=True) + eps) * w

    return scaled_rownorm


def check():
    """Distributed vs dense forward and gradients; returns a small report (used by the tests)."""
    import paddle
    import paddle.distributed as dist

    op = make_op()
    mesh = dist.ProcessMesh([0, 1], dim_names=["dp"])
    rng = np.random.default_rng(0)
    xa, wa = rng.standard_normal((5, 8)).astype("float32"), rng.standard_normal((8,)).astype("float32")
    xd, wd = paddle.to_tensor(xa, stop_gradient=False), paddle.to_tensor(wa, stop_gradient=False)
    (op(xd, wd) ** 2).sum().backward()                       # dense: no DistTensor, runs directly
    x = dist.shard_tensor(paddle.to_tensor(xa), mesh, [dist.Shard(0)])   # 5 rows: 3 + 2
    w = dist.shard_tensor(paddle.to_tensor(wa), mesh, [dist.Replicate()])
    x.stop_gradient = w.stop_gradient = False
    y = op(x, w)
    (y ** 2).sum().backward()
    full = lambda t: dist.reshard(t, mesh, [dist.Replicate()]).numpy()  # noqa: E731
    return {"y": str(y.placements), "dw": str(w.grad.placements), "dx": str(x.grad.placements),
            "y_err": float(np.abs(full(y) - op(paddle.to_tensor(xa), paddle.to_tensor(wa)).numpy()).max()),
            "dx_err": float(np.abs(full(x.grad) - xd.grad.numpy()).max()),
            "dw_err": float(np.abs(full(w.grad) - wd.grad.numpy()).max())}


if __name__ == "__main__":
    import paddle
    import paddle.distributed as dist

    paddle.set_device("cpu")
    dist.init_parallel_env()
    print(f"rank {dist.get_rank()}: {check()}")
