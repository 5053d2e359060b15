"""Rank functions for test_do_no_harm_reshard.py (run under paddle.distributed.launch / run_ranks).

Every function does the set-up a user would do, visibly, at its top, or leaves it out on purpose
when that is the scenario under test.
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np


def _dense(shape, seed=0):
    return np.random.default_rng(seed).integers(-20, 21, size=shape).astype("float32")


def no_init_script(out_dir: str, use_ext: bool) -> None:
    """A user script that never calls dist.init_parallel_env() (as Paddle's own auto-parallel
    tests do): S->R, R->S, P->R on a 1-D mesh through dist.reshard; writes this rank's values."""
    import paddle
    import paddle.distributed as dist

    if use_ext:
        import paddle_ext

        paddle_ext.install()  # deliberately no dist.init_parallel_env(): the scenario under test

    mesh = dist.ProcessMesh([0, 1], dim_names=["x"])
    dense = _dense((4, 6))
    rank = dist.get_rank()
    out = {}
    x = dist.shard_tensor(paddle.to_tensor(dense), mesh, [dist.Shard(0)])
    out["S0->R"] = dist.reshard(x, mesh, [dist.Replicate()])._local_value().numpy()
    r = dist.shard_tensor(paddle.to_tensor(dense), mesh, [dist.Replicate()])
    out["R->S1"] = dist.reshard(r, mesh, [dist.Shard(1)])._local_value().numpy()
    out["R->S0"] = dist.reshard(r, mesh, [dist.Shard(0)])._local_value().numpy()
    part = dense * (rank + 1) / 3.0  # sums to dense over the two ranks
    p = dist.auto_parallel.api.dtensor_from_local(paddle.to_tensor(part.astype("float32")), mesh,
                                                  [dist.Partial()])
    out["P->R"] = dist.reshard(p, mesh, [dist.Replicate()])._local_value().numpy()
    try:  # Paddle's own S->S (handed to Paddle): no CPU all_to_all alone, install()'s hook with paddle-ext
        out["S0->S1"] = dist.reshard(x, mesh, [dist.Shard(1)])._local_value().numpy()
        out["S0->S1 error"] = np.array(["none"])
    except Exception as exc:  # noqa: BLE001 - compared between the two runs
        out["S0->S1 error"] = np.array([f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"])
    out["is_initialized"] = np.array([int(dist.is_initialized())])
    np.savez(os.path.join(out_dir, f"{'ext' if use_ext else 'paddle'}_{rank}.npz"), **out)


def odd_world(cases, group_meshes=()):
    """paddle-ext reshards of ``cases`` on this rank (init + install, as a user would)."""
    import paddle.distributed as dist

    dist.init_parallel_env()
    import paddle_ext

    paddle_ext.install()

    from paddle_ext.reshard import prepare_reshard_groups
    from paddle_ext.reshard.checks import run_cases

    for ids in group_meshes:  # every rank, same order: groups for the sub-meshes' lines
        prepare_reshard_groups(dist.ProcessMesh(np.array(ids).tolist()))
    return run_cases(cases, native=False)


def backend_double(cases, answer: str):
    """paddle.distributed.get_backend answers ``answer`` (a test double on gloo ranks); each case
    runs through dist.reshard and reports whether Paddle's native reshard ran."""
    import paddle.distributed as dist

    dist.init_parallel_env()
    import paddle_ext

    paddle_ext.install()

    from paddle_ext.reshard import install as inst
    from paddle_ext.reshard.checks import run_case

    real = dist.get_backend
    dist.get_backend = lambda group=None: answer
    natives = []
    inst.NATIVE_LISTENERS.append(lambda src, dst, itemsize: natives.append(1))
    saved = inst._SAVED["dist"]
    calls = []

    def counting_original(*args, **kwargs):
        calls.append(1)
        return saved(*args, **kwargs)

    inst._SAVED["dist"] = counting_original
    out = {}
    try:
        for c in cases:
            before = len(calls)
            o = run_case(c, native=False, check=False)
            o.extra.pop("traceback", None)
            o.extra["native"] = len(calls) > before
            out[c.id] = o
            dist.barrier()
    finally:
        inst._SAVED["dist"] = saved
        dist.get_backend = real
    return out


def gather_dtypes():
    """S(0)->R and S(1)->R of bfloat16 and bool tensors (gloo's all_gather into the output)."""
    import paddle
    import paddle.distributed as dist

    dist.init_parallel_env()
    import paddle_ext

    paddle_ext.install()

    mesh = dist.ProcessMesh([0, 1], dim_names=["x"])
    dense = _dense((4, 6))
    out = {}
    gathers = []
    real_gather = dist.stream.all_gather

    def counting_gather(out_t, t, *args, **kwargs):
        if "int64" not in str(t.dtype):   # data only: the request check (check=True) gathers int64 metadata
            gathers.append(1)
        return real_gather(out_t, t, *args, **kwargs)

    dist.stream.all_gather = counting_gather
    rank = dist.get_rank()
    place = paddle.framework._get_paddle_place(paddle.framework._current_expected_place())
    for name, full in (("bfloat16", dense), ("bool", dense > 0)):
        for d in (0, 1):
            stats = {}
            mine = np.split(full, 2, axis=d)[rank]  # shard_tensor cannot slice bfloat16 on CPU
            local = paddle.to_tensor(mine).astype(name) if name == "bfloat16" else paddle.to_tensor(mine)
            x = paddle.Tensor(local, dims=[4, 6], process_mesh=mesh, placements=[dist.Shard(d)], place=place)
            y = paddle_ext.reshard(x, mesh, [dist.Replicate()], stats=stats)
            out[f"{name}:S({d})->R"] = (y._local_value().astype("float32").numpy(), str(y.dtype), stats.get("plan"),
                                        len(gathers))
            gathers.clear()
    dist.stream.all_gather = real_gather
    return out


if __name__ == "__main__":  # python -m paddle.distributed.launch ... do_no_harm_ranks.py OUT_DIR ext|paddle
    no_init_script(sys.argv[1], sys.argv[2] == "ext")
    print(json.dumps({"done": True}))
