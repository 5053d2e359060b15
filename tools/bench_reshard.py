"""Benchmark paddle-ext's dygraph reshard on gloo: bytes vs the minimum, time vs raw gloo.

    python tools/bench_reshard.py [--nproc 2 4] [--mib 16] [--repeat 7] [--json out.json]

For S(0)->R, P->R, P->S(0) and S(0)->S(1) on a float32 tensor of ``--mib`` MiB over a 1-D mesh
of every rank, each rank measures (medians after a barrier, in one run):

* bytes it received / the theoretical minimum per rank of anchors.md §3.2 (goal: exactly 1.00);
* time / a raw gloo transfer of the same bytes (``dist.all_reduce`` for P->R; for the others
  the same pairwise ``dist.send``/``dist.recv`` volume with no planning, slicing or assembly);
* time / Paddle's native ``dist.reshard`` where native works on CPU (S->R, P->R).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

CASES = [("S(0)->R", "[S(0)]", "[R]"), ("P->R", "[P(sum)]", "[R]"),
         ("P->S(0)", "[P(sum)]", "[S(0)]"), ("S(0)->S(1)", "[S(0)]", "[S(1)]")]


def theoretical_min(name: str, total: int, n: int) -> int:
    """Bytes a rank must receive (anchors.md §3.2, one mesh axis of n ranks, S bytes)."""
    return {"S(0)->R": (n - 1) * total // n, "P->R": 2 * (n - 1) * total // n,
            "P->S(0)": (n - 1) * total // n, "S(0)->S(1)": (n - 1) * total // (n * n)}[name]


def _median_time(fn, repeat):
    import paddle.distributed as dist

    times = []
    for _ in range(repeat):
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def rank_bench(mib: int, repeat: int) -> dict:
    import paddle
    import paddle.distributed as dist

    from paddle_ext.compat.convert import to_paddle_placements
    from paddle_ext.reshard.dygraph import PaddleBackend, reshard
    from paddle_ext.reshard.engine import exchange
    from paddle_ext.reshard.install import original_reshard

    rank, n = dist.get_rank(), dist.get_world_size()
    side = int((mib * 1024 * 1024 // 4) ** 0.5)
    side -= side % (n * n)
    shape, total = [side, side], side * side * 4
    mesh = dist.ProcessMesh(list(range(n)))
    place = paddle.framework._get_paddle_place(paddle.framework._current_expected_place())
    out = {"shape": shape, "bytes": total}
    be = PaddleBackend(paddle, rank, range(n), paddle.empty([0], "float32"), None)
    for name, a, b in CASES:
        src, dst = to_paddle_placements(a), to_paddle_placements(b)
        local_shape = [side // n, side] if "S" in a else shape
        x = paddle.Tensor(paddle.rand(local_shape), dims=shape, process_mesh=mesh, placements=src, place=place)
        stats: dict = {}
        reshard(x, mesh, dst, check=False, stats=stats)  # warm-up + bytes
        received = stats.get("received_bytes", 0)
        t_ext = _median_time(lambda: reshard(x, mesh, dst, check=False), repeat)
        # raw gloo of the same bytes
        if name == "P->R":
            buf = x._local_value().clone()
            t_raw = _median_time(lambda: dist.all_reduce(buf), repeat)
        else:
            per_peer = received // max(1, n - 1) // 4
            chunk = paddle.rand([per_peer])
            like = paddle.empty([0], "float32")
            peers = [r for r in range(n) if r != rank]
            t_raw = _median_time(lambda: exchange(be, peers + [rank], {p: [chunk] for p in peers},
                                                  {p: [((per_peer,), like)] for p in peers}), repeat)
        row = {"received": received, "minimum": theoretical_min(name, total, n),
               "ext_ms": t_ext * 1e3, "raw_ms": t_raw * 1e3}
        if name in ("S(0)->R", "P->R"):  # native works on CPU for these
            native = original_reshard()
            native(x, mesh, dst)
            row["native_ms"] = _median_time(lambda: native(x, mesh, dst), repeat) * 1e3
        out[name] = row
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--mib", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--json", help="also write the raw numbers here")
    args = parser.parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from paddle_ext.testing import run_ranks

    import bench_reshard as me  # importable by module name in the ranks

    report = {}
    print(f"| ranks | transition | bytes/min | paddle-ext ms | raw gloo ms | ext/raw | native ms | ext/native |")
    print("|---|---|---|---|---|---|---|---|")
    for n in args.nproc:
        res = run_ranks(me.rank_bench, nproc=n, args=(args.mib, args.repeat), timeout=600)
        report[n] = res
        for name, _, _ in CASES:
            rows = [r[name] for r in res]
            received = max(r["received"] for r in rows)
            ext = max(r["ext_ms"] for r in rows)
            raw = max(r["raw_ms"] for r in rows)
            native = max((r.get("native_ms", 0) for r in rows), default=0)
            ratio_native = f"{ext / native:.2f}" if native else "n/a (native fails on CPU)"
            native_txt = f"{native:.1f}" if native else "-"
            print(f"| {n} | {name} | {received / rows[0]['minimum']:.2f} | {ext:.1f} | {raw:.1f} | "
                  f"{ext / raw:.2f} | {native_txt} | {ratio_native} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
