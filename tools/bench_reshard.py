"""Benchmark paddle-ext's dygraph reshard on gloo: bytes vs the minimum, time vs raw gloo.

    python tools/bench_reshard.py [--nproc 2 4] [--mib 16] [--repeat 11] [--json out.json]
    python tools/bench_reshard.py --per-call [--nproc 2] [--sizes-kib 1 4 ... 16384] [--png out.png]

``--per-call``: per transition (S(0)->R, R->S(0), P->R, S(0)->S(1), P->S(0)) and size (1 KiB to
16 MiB, float32, 1-D mesh of every rank), the time per call of Paddle's own ``dist.reshard`` (the
original install() keeps) and of ``dist.reshard`` after ``install()``, in one launch, batches
interleaved round by round (best round of the slowest rank), their ratio, Paddle's all_gather of
the same tensor, and for S(0)->S(1) both of paddle-ext's ways (an exchange of blocks: a send and
a recv on 2 ranks, the per-rank executor's rounds on more; one all_gather of the whole shards and
a slice: the crossover of ``fast.GATHER_BELOW``); ``--png`` draws the curves.

For S(0)->R, P->R, P->S(0) and S(0)->S(1) on a float32 tensor of ``--mib`` MiB over a 1-D mesh
of every rank, each rank times (after a barrier; the variants of one case run interleaved,
round after round, so a load burst hits them alike; medians; the table takes the slowest rank):

* ``paddle_ext.reshard(x, mesh, placements, check=False)``, and the bytes it received / the
  theoretical minimum per rank of anchors.md §3.2 (goal: exactly 1.00);
* raw gloo moving the same bytes, every way gloo offers (it has no reduce_scatter or
  all_to_all on CPU):
  - S->R: ``all_gather`` into a fresh output tensor (what a reshard must return), the same into
    a reused buffer (transport only), pairwise ``send``/``recv`` of the same volume;
  - P->R: ``all_reduce`` in place on a reused buffer (transport only), ``clone`` + ``all_reduce``
    (a fresh output with the source kept, the contract of a reshard);
  - P->S, S(0)->S(1): pairwise ``send``/``recv`` of the same volume (no reduction, no packing);
  ``ext/raw`` divides by the fastest of them;
* the same transition hand-written on gloo with a reshard's contract (the source kept, a fresh
  output): S->R ``all_gather`` into a fresh tensor, P->R ``clone`` + ``all_reduce``, P->S a
  pairwise send/recv reduce-scatter that adds the received rows, S(0)->S(1) a pairwise all-to-all
  that packs each peer's column block and receives into the output (n = 2, 4; checked against
  paddle-ext's result once); ``ext/hand`` divides by it;
* Paddle's native ``dist.reshard`` where native works on CPU (S->R, P->R).
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


def _median_times(fns: dict, repeat: int) -> dict:
    """Median ms of each callable, run interleaved (one of each per round, after a barrier)."""
    import paddle.distributed as dist

    times = {k: [] for k in fns}
    for fn in fns.values():  # warm-up
        fn()
    for _ in range(repeat):
        for k, fn in fns.items():
            dist.barrier()
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


def rank_bench(mib: int, repeat: int) -> dict:
    import paddle.distributed as dist
    import paddle_ext

    dist.init_parallel_env()  # a user's script joins the gloo world and turns paddle-ext on
    paddle_ext.install()

    import numpy as np
    import paddle

    from paddle_ext.compat.ports.convert import to_paddle_placements
    from paddle_ext.reshard.dygraph import reshard
    from paddle_ext.reshard.paddle_backend import PaddleBackend
    from paddle_ext.reshard.exchange import exchange
    from paddle_ext.reshard.install import original_reshard

    rank, n = dist.get_rank(), dist.get_world_size()
    side = int((mib * 1024 * 1024 // 4) ** 0.5)
    side -= side % (n * n)
    shape, total = [side, side], side * side * 4
    mesh = dist.ProcessMesh(list(range(n)))
    place = paddle.framework._get_paddle_place(paddle.framework._current_expected_place())
    out = {"shape": shape, "bytes": total, "load": os.getloadavg()}
    be = PaddleBackend(paddle, rank, range(n), paddle.empty([0], "float32"), None)
    peers = [r for r in range(n) if r != rank]

    def p2p(numel):
        chunk, like = paddle.rand([numel]), paddle.empty([0], "float32")
        return lambda: exchange(be, peers + [rank], {p: [chunk] for p in peers},
                                {p: [((numel,), like)] for p in peers})

    # hand-written gloo code with a reshard's contract (the source kept, a fresh output), for
    # the transitions gloo has no collective for: pairwise swaps, partner rank ^ k (n = 2, 4)
    partners = [rank ^ k for k in range(1, n)] if n & (n - 1) == 0 else None
    rows = side // n

    def swap(send_t, recv_t, peer):
        first, second = (lambda: dist.send(send_t, dst=peer)), (lambda: dist.recv(recv_t, src=peer))
        for step in ((first, second) if rank < peer else (second, first)):
            step()

    def hand_reduce_scatter(local):   # P -> S(0): receive my rows' partial sums, add them
        out = None
        for peer in partners:
            buf = paddle.empty([rows, side])
            swap(local[peer * rows:(peer + 1) * rows], buf, peer)
            out = local[rank * rows:(rank + 1) * rows] + buf if out is None else out.add_(buf)
        return out

    def hand_all_to_all(local):      # S(0) -> S(1): pack each peer's column block, swap row blocks
        out = paddle.empty([side, rows])
        paddle.assign(local[:, rank * rows:(rank + 1) * rows], output=out[rank * rows:(rank + 1) * rows])
        for peer in partners:
            swap(local[:, peer * rows:(peer + 1) * rows].contiguous(), out[peer * rows:(peer + 1) * rows], peer)
        return out

    for name, a, b in CASES:
        src, dst = to_paddle_placements(a), to_paddle_placements(b)
        local_shape = [side // n, side] if "S" in a else shape
        local = paddle.rand(local_shape)
        x = paddle.Tensor(local, dims=shape, process_mesh=mesh, placements=src, place=place)
        before = local.numpy().copy()
        stats: dict = {}
        reshard(x, mesh, dst, check=False, stats=stats)  # warm-up + bytes
        received = stats.get("received_bytes", 0)
        fns = {"ext": lambda: reshard(x, mesh, dst, check=False)}
        # "raw ...": transport only (reused buffers, no reduction or packing); "hand ...": the
        # same transition hand-written on gloo with a reshard's contract
        if name == "S(0)->R":
            reused = paddle.empty(shape)
            fns["hand all_gather, fresh output"] = lambda: dist.stream.all_gather(paddle.empty(shape), local)
            fns["raw all_gather, reused buffer"] = lambda: dist.stream.all_gather(reused, local)
            fns["raw send/recv"] = p2p(received // max(1, n - 1) // 4)
        elif name == "P->R":
            buf = local.clone()
            fns["raw all_reduce, in place"] = lambda: dist.all_reduce(buf)
            fns["hand clone + all_reduce"] = lambda: dist.all_reduce(local.clone())
        else:
            fns["raw send/recv"] = p2p(received // max(1, n - 1) // 4)
            if partners is not None:
                hand = hand_reduce_scatter if name == "P->S(0)" else hand_all_to_all
                want = reshard(x, mesh, dst, check=False)._local_value().numpy()
                got = hand(local).numpy()   # equal up to the order of the sums (P->S on 4 ranks)
                assert got.shape == want.shape and np.allclose(got, want, rtol=1e-5, atol=1e-5), \
                    f"{name}: the hand-written baseline differs"
                fns["hand send/recv + " + ("add" if name == "P->S(0)" else "pack")] = lambda h=hand: h(local)
        if name in ("S(0)->R", "P->R"):  # native works on CPU for these
            native = original_reshard()
            fns["native"] = lambda: native(x, mesh, dst)
        times = _median_times(fns, repeat)
        assert (local.numpy() == before).all(), f"{name}: the source was modified"
        raws = {k: v for k, v in times.items() if k.startswith("raw")}
        hands = {k: v for k, v in times.items() if k.startswith("hand")}
        out[name] = {"received": received, "minimum": theoretical_min(name, total, n),
                     "ext_ms": times["ext"], "raw_ms": min(raws.values()), "raw": raws, "hand": hands,
                     "native_ms": times.get("native", 0.0), "plan": stats.get("plan")}
    out["load_after"] = os.getloadavg()
    return out


# -- per call: Paddle alone vs install(), 1 KiB to 16 MiB -------------------------------------
PER_CALL = [("S(0)->R", "[S(0)]", "[R]"), ("R->S(0)", "[R]", "[S(0)]"), ("P->R", "[P(sum)]", "[R]"),
            ("S(0)->S(1)", "[S(0)]", "[S(1)]"), ("P->S(0)", "[P(sum)]", "[S(0)]")]
PADDLE_CANNOT = ("S(0)->S(1)", "P->S(0)")   # Paddle 3.3.1 alone on CPU: no all_to_all / reduce_scatter
SIZES_KIB = [1, 4, 16, 64, 256, 1024, 4096, 16384]


def _side(kib: int, n: int) -> tuple[int, int]:
    """A float32 [rows, cols] of ``kib`` KiB whose dims divide by ``n``."""
    numel = kib * 256
    cols = 1 << ((numel.bit_length() - 1) // 2)
    return numel // cols, cols


def _batches(fns: dict, calls: int, rounds: int) -> dict:
    """Per-call us of each callable (or ``(setup, callable)``): ``rounds`` rounds, in each one
    batch of ``calls`` calls of every callable in turn after a barrier (interleaved: a load burst
    hits them alike)."""
    import paddle.distributed as dist

    times = {k: [] for k in fns}
    fns = {k: fn if isinstance(fn, tuple) else (None, fn) for k, fn in fns.items()}
    for setup, fn in fns.values():
        if setup:
            setup()
        fn()
    for _ in range(rounds):
        for k, (setup, fn) in fns.items():
            if setup:   # untimed: e.g. switch paddle-ext's way and fill its cache
                setup()
                fn()
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            times[k].append((time.perf_counter() - t0) / calls * 1e6)
    return times


def per_call_rank(sizes, rounds: int, budget_ms: float) -> dict:
    """On this rank: per transition and size, Paddle's own ``dist.reshard`` (kept by install())
    against ``dist.reshard`` after ``install()``, and references (Paddle's all_gather)."""
    import paddle
    import paddle.distributed as dist
    import paddle_ext

    dist.init_parallel_env()
    paddle_ext.install()
    from paddle_ext.compat.ports.convert import to_paddle_placements
    from paddle_ext.reshard import fast
    from paddle_ext.reshard.install import original_reshard

    n = dist.get_world_size()
    mesh = dist.ProcessMesh(list(range(n)))
    native = original_reshard()
    out = {"load": os.getloadavg(), "cases": {}}
    default = dict(fast.GATHER_BELOW)   # install()'s own setting (the variants below change it)
    for kib in sizes:
        shape = list(_side(kib, n))
        calls = max(3, min(300, int(budget_ms * 1000 / (30 + kib * 2))))
        for name, a, b in PER_CALL:
            src, dst = to_paddle_placements(a), to_paddle_placements(b)
            full = paddle.rand(shape)
            local = full[:shape[0] // n].contiguous() if "S" in a else full
            x = paddle.Tensor(local, dims=shape, process_mesh=mesh, placements=src, place=paddle.CPUPlace())
            fns = {"install()": lambda: dist.reshard(x, mesh, dst)}
            if name not in PADDLE_CANNOT:
                fns["Paddle alone"] = lambda: native(x, mesh, dst)
            if a == "[S(0)]":   # Paddle's own all_gather of the same tensor, three ways
                parts = [paddle.empty_like(local) for _ in range(n)]
                fns["dist.all_gather"] = lambda: dist.all_gather(parts, local)
                # as Paddle's docs call it: into a new list (Paddle then makes the n outputs)
                fns["dist.all_gather, new list"] = lambda: dist.all_gather([], local)
                fns["stream all_gather"] = lambda: dist.stream.all_gather(paddle.empty(shape), local)
            if name == "S(0)->S(1)":   # the crossover: an exchange of blocks vs one all_gather
                def way(below):
                    def setup():
                        fast.GATHER_BELOW[n] = below
                        fast.clear()
                    return setup, lambda: dist.reshard(x, mesh, dst)
                fns["install(): exchange"] = way(0)
                fns["install(): all_gather"] = way(1 << 40)
                fns["install()"] = way(default.get(n, 0))
            out["cases"][(name, kib)] = _batches(fns, calls, rounds)
    out["load_after"] = os.getloadavg()
    return out


def _per_call_report(res, sizes, png: str | None) -> dict:
    """The table (per transition and size: best of rounds of the slowest rank) and the PNG."""
    table = {}
    print(f"load average before/after (rank 0): {res[0]['load'][0]:.2f} / {res[0]['load_after'][0]:.2f}")
    print("| transition | size | Paddle alone us | install() us | ratio | all_gather us (dist into a kept list / "
          "into a new list / stream) | install() by exchange / by all_gather us |")
    print("|---|---|---|---|---|---|---|")
    for name, _, _ in PER_CALL:
        for kib in sizes:
            per = [r["cases"][(name, kib)] for r in res]
            best = {k: min(max(p[k][i] for p in per) for i in range(len(per[0][k]))) for k in per[0]}
            table[(name, kib)] = best
            alone = best.get("Paddle alone")
            ratio = f"{best['install()'] / alone:.2f}" if alone else "Paddle alone cannot"
            ag = (f"{best['dist.all_gather']:.0f} / {best['dist.all_gather, new list']:.0f} / "
                  f"{best['stream all_gather']:.0f}"
                  if "dist.all_gather" in best else "-")
            var = (f"{best['install(): exchange']:.0f} / {best['install(): all_gather']:.0f}"
                   if "install(): exchange" in best else "-")
            size = f"{kib} KiB" if kib < 1024 else f"{kib // 1024} MiB"
            print(f"| {name} | {size} | {alone:.0f} | {best['install()']:.0f} | {ratio} | {ag} | {var} |"
                  if alone else f"| {name} | {size} | - | {best['install()']:.0f} | {ratio} | {ag} | {var} |")
    if png:
        _plot(table, sizes, png)
    return table


def _plot(table, sizes, png: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, _, _ in PER_CALL:
        ext = [table[(name, k)]["install()"] for k in sizes]
        ref_key = "Paddle alone" if name not in PADDLE_CANNOT else "dist.all_gather"
        if ref_key in table[(name, sizes[0])]:
            ratio = [e / table[(name, k)][ref_key] for e, k in zip(ext, sizes)]
            label = name if ref_key == "Paddle alone" else f"{name} (vs Paddle's all_gather)"
            left.plot(sizes, ratio, marker="o", label=label)
        right.plot(sizes, ext, marker="o", label=f"{name} install()")
        if name not in PADDLE_CANNOT:
            right.plot(sizes, [table[(name, k)]["Paddle alone"] for k in sizes], ls="--", marker="x",
                       label=f"{name} Paddle alone")
    left.axhline(1.0, color="gray", lw=0.8)
    for ax, title in ((left, "install() / Paddle alone, per call"), (right, "us per call")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("tensor size (KiB, float32, 2-D)")
        ax.set_title(title)
        ax.legend(fontsize=7)
    right.set_yscale("log")
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    print(f"wrote {png}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--mib", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=11)
    parser.add_argument("--json", help="also write the raw numbers here")
    parser.add_argument("--mmap-threshold-mib", type=int, default=0,
                        help="run the ranks with glibc's MALLOC_MMAP_THRESHOLD_ at this many MiB (and "
                             "MALLOC_TRIM_THRESHOLD_ 4x, MALLOC_ARENA_MAX=1): freed 16 MiB blocks are then "
                             "reused instead of being handed back to the kernel, so a fresh output no "
                             "longer pays page faults (0: default malloc)")
    parser.add_argument("--per-call", action="store_true",
                        help="per call, 1 KiB to 16 MiB: Paddle's own dist.reshard vs dist.reshard after "
                             "install(), interleaved in one launch (2 ranks unless --nproc)")
    parser.add_argument("--sizes-kib", type=int, nargs="+", default=SIZES_KIB)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--budget-ms", type=float, default=40.0, help="per batch of calls, roughly")
    parser.add_argument("--png", help="--per-call: write the curves here")
    args = parser.parse_args(argv)
    if args.per_call:
        return _per_call_main(args)
    mib = args.mmap_threshold_mib
    env = {"MALLOC_MMAP_THRESHOLD_": str(mib << 20), "MALLOC_TRIM_THRESHOLD_": str(4 * mib << 20),
           "MALLOC_ARENA_MAX": "1"} if mib else None
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from paddle_ext.launcher import run_ranks

    import bench_reshard as me  # importable by module name in the ranks

    report = {}
    print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}; "
          f"malloc: {'MALLOC_MMAP_THRESHOLD_=' + env['MALLOC_MMAP_THRESHOLD_'] if env else 'default'}")
    print("| ranks | transition | bytes/min | paddle-ext ms | raw gloo ms (fastest way) | ext/raw | "
          "hand-written ms (way) | ext/hand | native ms | ext/native |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n in args.nproc:
        res = run_ranks(me.rank_bench, nproc=n, args=(args.mib, args.repeat), timeout=600, env=env)
        report[n] = res
        for name, _, _ in CASES:
            rows = [r[name] for r in res]
            received = max(r["received"] for r in rows)
            ext = max(r["ext_ms"] for r in rows)
            raws = {k: max(r["raw"][k] for r in rows) for k in rows[0]["raw"]}
            best = min(raws, key=raws.get)
            native = max(r["native_ms"] for r in rows)
            ratio_native = f"{ext / native:.2f}" if native else "n/a (native fails on CPU)"
            native_txt = f"{native:.1f}" if native else "-"
            hands = {k: max(r["hand"][k] for r in rows) for k in rows[0]["hand"]}
            hand_txt, ratio_hand = "-", "n/a"
            if hands:
                way = min(hands, key=hands.get)
                hand_txt, ratio_hand = f"{hands[way]:.1f} ({way[5:]})", f"{ext / hands[way]:.2f}"
            print(f"| {n} | {name} | {received / rows[0]['minimum']:.2f} | {ext:.1f} | "
                  f"{raws[best]:.1f} ({best[4:]}) | {ext / raws[best]:.2f} | {hand_txt} | {ratio_hand} | "
                  f"{native_txt} | {ratio_native} |")
        others = "; ".join(f"{name}: " + ", ".join(f"{k[4:]} {max(r[name]['raw'][k] for r in res):.1f}"
                                                   for k in res[0][name]["raw"])
                           for name, _, _ in CASES if len(res[0][name]["raw"]) > 1)
        print(f"|  | raw ms, every way: {others} |  |  |  |  |  |  |  |  |")
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


def _per_call_main(args) -> int:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from paddle_ext.launcher import run_ranks

    import bench_reshard as me  # importable by module name in the ranks

    n = args.nproc[0] if args.nproc != [2, 4] else 2
    print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}; {n} ranks")
    res = run_ranks(me.per_call_rank, nproc=n, args=(args.sizes_kib, args.rounds, args.budget_ms),
                    timeout=1800)
    table = _per_call_report(res, args.sizes_kib, args.png)
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({f"{k[0]} {k[1]} KiB": v for k, v in table.items()}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
