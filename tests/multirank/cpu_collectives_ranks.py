"""Rank functions for tests/multirank/test_cpu_collectives.py (run through paddle_ext.testing.run_ranks).

Paddle's own C++ P -> S and S(i) -> S(j) reshards (``dist.reshard`` as Paddle has it, not
paddle-ext's executor), which call the CPU ``ReduceScatterKernel`` and ``AllToAllKernel``: with
Paddle's kernels they raise, with the ``cpu-collectives`` hook each rank gets its block of the sum
(P -> S) or of the whole tensor (S -> S).
"""
import numpy as np

SHAPE = (4, 6)
CASES = [("float32", 0), ("float32", 1), ("float64", 0), ("int64", 1)]
S_TO_S = [("float32", 0, 1), ("float32", 1, 0), ("float64", 0, 1), ("int32", 1, 0), ("int64", 0, 1)]


def whole_value(dtype: str) -> np.ndarray:
    """The tensor every rank shards for S -> S (the same on every rank and in the test)."""
    return (np.arange(np.prod(SHAPE)).reshape(SHAPE) * 3 - 7).astype(dtype)


def partial_value(rank: int, dtype: str) -> np.ndarray:
    """Rank ``rank``'s addend (the same formula in the test, which sums them)."""
    rng = np.random.default_rng(10 + rank)
    if dtype == "int64":
        return rng.integers(-50, 50, SHAPE).astype(dtype)
    return rng.standard_normal(SHAPE).astype(dtype)


def _p_to_s(dist, paddle, mesh, dtype, dim):
    from paddle_ext.reshard.route import original_reshard

    # each rank's own addend as its local value of a Partial (sum) tensor
    x = dist.auto_parallel.api.dtensor_from_local(paddle.to_tensor(partial_value(dist.get_rank(), dtype)), mesh,
                                                  [dist.Partial()])
    return original_reshard()(x, mesh, [dist.Shard(dim)])


def _s_to_s(dist, paddle, mesh, dtype, src, dst):
    from paddle_ext.reshard.route import original_reshard

    x = dist.shard_tensor(paddle.to_tensor(whole_value(dtype)), mesh, [dist.Shard(src)])
    return original_reshard()(x, mesh, [dist.Shard(dst)])


def without_then_with_the_hook():
    """install() hooks the kernel in a multi-process gloo job; taken back, Paddle's kernel raises."""
    import paddle
    import paddle.distributed as dist
    import paddle_ext
    from paddle_ext.compat import FIXES
    from paddle_ext.compat.native import cpu_collectives

    dist.init_parallel_env()
    names = paddle_ext.install()
    mesh = dist.ProcessMesh([0, 1], dim_names=["x"])
    fix = FIXES["cpu-collectives"]
    fix.revert()
    without = _error_of(lambda: _p_to_s(dist, paddle, mesh, "float32", 0))
    without_s = _error_of(lambda: _s_to_s(dist, paddle, mesh, "float32", 0, 1))
    fix.apply()
    out = {}
    for dtype, dim in CASES:
        y = _p_to_s(dist, paddle, mesh, dtype, dim)
        out[f"{dtype}/{dim}"] = (np.array(y._local_value().numpy()), [str(p) for p in y.placements])
    calls = cpu_collectives.calls()
    for dtype, src, dst in S_TO_S:
        y = _s_to_s(dist, paddle, mesh, dtype, src, dst)
        out[f"{dtype}/{src}->{dst}"] = (np.array(y._local_value().numpy()), [str(p) for p in y.placements])
    calls_s = cpu_collectives.calls() - calls
    fix.revert()
    after = _error_of(lambda: _p_to_s(dist, paddle, mesh, "float32", 0))
    after_s = _error_of(lambda: _s_to_s(dist, paddle, mesh, "float32", 0, 1))
    return {"installed": "cpu-collectives" in names, "without": without, "out": out, "calls": calls,
            "after": after, "without_s": without_s, "after_s": after_s, "calls_s": calls_s}


def _error_of(call) -> str:
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the failure is the measurement
        return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}"
    return "ran"
