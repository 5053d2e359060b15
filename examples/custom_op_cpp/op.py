"""A C++ custom op (``ext_leaky_square.cc``, built with ``paddle.utils.cpp_extension``) with an
SPMD rule written in Python, called on DistTensors.

The op is elementwise, so its rule is one line (``... -> ...``); paddle-ext's dispatcher runs the
compiled kernel on each rank's shard and wraps the result with the rule's placements. No C++
``SetInferSpmdFn`` is needed, in dygraph or inside ``dist.to_static``: the kernel only ever sees
local (dense) tensors.

Run on 2 CPU ranks (the first build takes about 10 s):

    python -m paddle.distributed.launch --nproc_per_node 2 examples/custom_op_cpp/op.py
"""
import fcntl
import os

import numpy as np

from paddle_ext.placements import DistSpec
from paddle_ext.spmd import register_spmd_rule

HERE = os.path.dirname(os.path.abspath(__file__))
OP = "ext_leaky_square"


def build(verbose: bool = False):
    """Compile (or load the cached build of) the custom op; returns the module."""
    import tempfile

    from paddle.utils.cpp_extension import load

    build_dir = os.path.join(tempfile.gettempdir(), "paddle_ext_custom_op_build")
    os.makedirs(build_dir, exist_ok=True)
    # every rank of a launch calls build(): one at a time, so the first compiles and the others
    # find the library up to date (Paddle's load() always runs the build, which skips fresh objects)
    with open(os.path.join(build_dir, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return load(name=OP, sources=[os.path.join(HERE, "ext_leaky_square.cc")], build_directory=build_dir,
                    verbose=verbose)


def _register():
    from paddle_ext.spmd.registry import REGISTRY

    if OP in REGISTRY.rules:
        return

    @register_spmd_rule(OP)
    def ext_leaky_square_rule(x: DistSpec, alpha: float = 0.1):
        """... -> ..."""
        return "... -> ..."


_register()


def make_op(module=None):
    import paddle_ext.dispatch as pd

    mod = module or build()

    @pd.spmd_op(OP)
    def ext_leaky_square(x, alpha=0.1):
        return mod.ext_leaky_square(x, alpha)

    return ext_leaky_square


def check():
    """Distributed vs dense forward and gradient on uneven shards (used by the tests)."""
    import paddle
    import paddle.distributed as dist

    op = make_op()
    mesh = dist.ProcessMesh([0, 1], dim_names=["x"])
    a = np.random.default_rng(1).standard_normal((5, 7)).astype("float32")
    xd = paddle.to_tensor(a, stop_gradient=False)
    op(xd, 0.2).sum().backward()
    x = dist.shard_tensor(paddle.to_tensor(a), mesh, [dist.Shard(1)])    # 7 columns: 4 + 3
    x.stop_gradient = False
    y = op(x, 0.2)
    y.sum().backward()
    full = lambda t: dist.reshard(t, mesh, [dist.Replicate()]).numpy()  # noqa: E731
    dense_y = np.where(a > 0, a * a, 0.2 * a)
    return {"y": str(y.placements), "local": list(y._local_value().shape),
            "y_err": float(np.abs(full(y) - dense_y).max()),
            "dx_err": float(np.abs(full(x.grad) - xd.grad.numpy()).max())}


if __name__ == "__main__":
    import paddle
    import paddle.distributed as dist

    paddle.set_device("cpu")
    dist.init_parallel_env()
    if dist.get_rank() == 0:
        build()
    dist.barrier()
    print(f"rank {dist.get_rank()}: {check()}")
