"""Rank functions for test_mesh_reshape.py: a DistTensor moved to a mesh of the same ranks in
another shape, each rank keeping its slice (no data moves), with and without
``dist.init_parallel_env()`` (the set-up is visible at each function's top)."""
from __future__ import annotations

import numpy as np

#: (source mesh, source placements, target mesh, target placements) as plain data; placements as
#: "S0" / "S1" / "R" per mesh dim
CASES_2 = [
    ("2x1->1x2 S0", [[0], [1]], ["S0", "R"], [[0, 1]], ["R", "S0"]),
    ("1x2->2x1 S0", [[0, 1]], ["R", "S0"], [[0], [1]], ["S0", "R"]),
    ("1D->2D S0", [0, 1], ["S0"], [[0, 1]], ["R", "S0"]),
    ("2D->1D S1", [[0, 1]], ["R", "S1"], [0, 1], ["S1"]),
    ("2x1->1x2 R", [[0], [1]], ["R", "R"], [[0, 1]], ["R", "R"]),
]
CASES_4 = [
    ("2x2->4 S0S0", [[0, 1], [2, 3]], ["S0", "S0"], [0, 1, 2, 3], ["S0"]),
    ("4->2x2 S1", [0, 1, 2, 3], ["S1"], [[0, 1], [2, 3]], ["S1", "S1"]),
    ("2x2->4x1 S0S0", [[0, 1], [2, 3]], ["S0", "S0"], [[0], [1], [2], [3]], ["S0", "R"]),
    ("2x2->1x4 R", [[0, 1], [2, 3]], ["R", "R"], [[0, 1, 2, 3]], ["R", "R"]),
]


def dense(shape=(8, 12)):
    return np.random.default_rng(3).standard_normal(shape).astype("float32")


def _placements(dist, names):
    return [dist.Replicate() if n == "R" else dist.Shard(int(n[1])) for n in names]


def run(cases, init: bool, ext: bool = True):
    """Per case: this rank's local value after the move, its mesh shape, the gradient of
    sum(y * w) back on the source layout (local), and the error's first line if any."""
    import paddle
    import paddle.distributed as dist

    if init:
        dist.init_parallel_env()
    if ext:
        import paddle_ext

        paddle_ext.install()
    full = dense()
    weight = np.arange(full.size, dtype="float32").reshape(full.shape) / full.size
    out = {"initialized": dist.is_initialized()}
    for name, a, pa, b, pb in cases:
        try:
            src, dst = dist.ProcessMesh(a), dist.ProcessMesh(b)
            x = dist.shard_tensor(paddle.to_tensor(full), src, _placements(dist, pa))
            x.stop_gradient = False
            for _ in range(2):   # the second call is served from the fast path's cache
                y = dist.reshard(x, dst, _placements(dist, pb))
            w = dist.shard_tensor(paddle.to_tensor(weight), dst, _placements(dist, pb))
            (y * w).sum().backward()
            out[name] = {"local": y._local_value().numpy(), "mesh": list(y.process_mesh.shape),
                         "placements": repr(y.placements), "grad": x.grad._local_value().numpy(),
                         "grad_placements": repr(x.grad.placements)}
        except Exception as exc:  # noqa: BLE001 - the test names the case and the error
            out[name] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"}
    return out


def not_a_reshape():
    """Without init, a change of mesh that moves data (S0 on 2x1 -> S1 on 1x2): a named error."""
    import paddle
    import paddle.distributed as dist
    import paddle_ext

    paddle_ext.install()   # deliberately no dist.init_parallel_env()
    x = dist.shard_tensor(paddle.to_tensor(dense()), dist.ProcessMesh([[0], [1]]), [dist.Shard(0), dist.Replicate()])
    try:
        dist.reshard(x, dist.ProcessMesh([[0, 1]]), [dist.Replicate(), dist.Shard(1)])
    except Exception as exc:  # noqa: BLE001 - the test reads the name and the message
        return f"{type(exc).__name__}: {exc}"
    return "no error"
