"""What a reshard that paddle-ext hands back to Paddle costs over Paddle's own call.

    python tools/bench_handback.py [--calls 300] [--rounds 40] [--json out.json]

Two CPU ranks, R -> S(0) of a 32x32 float32 DistTensor on a 1-D mesh of both, Paddle's own
``dist.reshard`` (the original ``install()`` keeps) against ``dist.reshard`` after
``install()``, batches interleaved round by round in one launch (best round per rank):

* **no init**: before ``dist.init_parallel_env()`` every reshard within one mesh goes to Paddle,
  decided before a plan key is built;
* **NCCL double**: after ``init_parallel_env()``, with ``dist.get_backend`` answering ``"NCCL"`` (a
  test double: on NCCL, R -> S is Paddle's exact path), the hand-back is decided from the
  cached key;

each as **same tensor** (one source, called again and again) and **fresh tensors** (300 sources
made beforehand and called in turn: a step's activations are new tensors, whose meshes are new
objects). Goal (issue 36): <= 5 us over Paddle's own call. Short blocks, many rounds: Paddle's
own call moves between fast and slow stretches on a small VM (22 vs 54 us), and a block of 300
calls lets both sides find their fast ones (2000-call blocks differed by up to 10 us run to run).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time


def _best(fns: dict, calls: int, rounds: int, sync) -> dict:
    """Best per-call us of each callable over ``rounds`` interleaved rounds of ``calls`` calls."""
    best = {k: float("inf") for k in fns}
    for fn in fns.values():
        fn()
    for _ in range(rounds):
        for k, fn in fns.items():
            sync()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            best[k] = min(best[k], (time.perf_counter() - t0) / calls * 1e6)
    return best


def rank_bench(calls: int, rounds: int) -> dict:
    import paddle
    import paddle.distributed as dist
    import paddle_ext
    from paddle_ext.reshard import fast
    from paddle_ext.reshard.install import original_reshard

    paddle_ext.install()
    native = original_reshard()
    mesh = dist.ProcessMesh([0, 1], dim_names=["x"])
    target = [dist.Shard(0)]

    def sources(k):
        return [dist.shard_tensor(paddle.rand([32, 32]), mesh, [dist.Replicate()]) for _ in range(k)]

    def cases(sync):
        one, many = sources(1)[0], sources(300)
        n = len(many)

        def each(f):
            def run():
                for x in many:
                    f(x, mesh, target)
            return run
        same = _best({"Paddle alone": lambda: native(one, mesh, target),
                      "install()": lambda: dist.reshard(one, mesh, target)}, calls, rounds, sync)
        fresh = _best({"Paddle alone": each(native), "install()": each(dist.reshard)},
                      max(1, calls // n), rounds, sync)
        return {"same tensor": same, "fresh tensors": {k: v / n for k, v in fresh.items()}}

    out = {"load": os.getloadavg()[0], "no init": cases(lambda: None)}
    dist.init_parallel_env()
    dist.get_backend = lambda *a, **k: "NCCL"   # the double: R -> S is Paddle's exact path on NCCL
    fast.clear()   # keys made before init_parallel_env() do not apply
    out["NCCL double"] = cases(dist.barrier)
    out["load_after"] = os.getloadavg()[0]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from paddle_ext.launcher import run_ranks

    import bench_handback as me  # importable by module name in the ranks

    print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}; 2 ranks")
    res = run_ranks(me.rank_bench, nproc=2, args=(args.calls, args.rounds), timeout=900)
    print(f"load (rank 0, 1 min) before/after: {res[0]['load']:.2f} / {res[0]['load_after']:.2f}")
    print("| state | sources | rank | Paddle alone us | install() us | over Paddle us |")
    print("|---|---|---|---|---|---|")
    table = {}
    for state in ("no init", "NCCL double"):
        for kind in ("same tensor", "fresh tensors"):
            for rank, r in enumerate(res):
                p, i = r[state][kind]["Paddle alone"], r[state][kind]["install()"]
                table[f"{state} / {kind} / rank {rank}"] = {"paddle": p, "install": i, "over": i - p}
                print(f"| {state} | {kind} | {rank} | {p:.1f} | {i:.1f} | {i - p:+.1f} |")
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(table, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
