"""Rank function for tests/multirank/test_reshard_walk.py (run through run_ranks)."""
from __future__ import annotations

import os
import sys


def _module_of(filename: str, roots: dict) -> str | None:
    """The paddle_ext module a code object's file belongs to (None: not paddle-ext's code)."""
    path = os.path.realpath(filename)
    for root, package in roots.items():
        if path.startswith(root + os.sep):
            rel = os.path.relpath(path, root)[:-len(".py")].replace(os.sep, ".")
            name = f"{package}.{rel}"
            return name[:-len(".__init__")] if name.endswith(".__init__") else name
    return None


def _roots() -> dict:
    """Source directories of paddle_ext and of the two trees it installs inside itself."""
    import paddle_ext
    import paddle_ext.passes
    import paddle_ext.spmd_rules

    return {os.path.dirname(os.path.realpath(m.__file__)): m.__name__
            for m in (paddle_ext, paddle_ext.passes, paddle_ext.spmd_rules)}


def _walk(fn) -> tuple[list, object]:
    """The paddle_ext modules whose Python code runs while ``fn()`` does (sys.setprofile)."""
    roots, seen, files = _roots(), set(), {}

    def profile(frame, event, arg):
        if event == "call":
            name = frame.f_code.co_filename
            if name not in files:
                files[name] = _module_of(name, roots)
            if files[name]:
                seen.add(files[name])

    sys.setprofile(profile)
    try:
        out = fn()
    finally:
        sys.setprofile(None)
    return sorted(seen), out


def walk_s0_to_r():
    """After ``install()``, S(0) -> R of a 32x32 float32 on the 2-rank mesh: the modules of the
    first call (route, plan, execute) and of the repeated call, with both results."""
    import numpy as np
    import paddle
    import paddle.distributed as dist
    import paddle_ext

    dist.init_parallel_env()
    paddle_ext.install()
    mesh = dist.ProcessMesh([0, 1], dim_names=["x"])
    dense = paddle.arange(32 * 32, dtype="float32").reshape([32, 32])
    x = dist.shard_tensor(dense, mesh, [dist.Shard(0)])
    first, y1 = _walk(lambda: dist.reshard(x, mesh, [dist.Replicate()]))
    again, y2 = _walk(lambda: dist.reshard(x, mesh, [dist.Replicate()]))
    return {"first": first, "again": again, "values": [y1._local_value().numpy(), y2._local_value().numpy()],
            "placements": [str(y1.placements), str(y2.placements)], "dense": np.asarray(dense.numpy())}
