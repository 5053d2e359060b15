"""Benchmark: a rule-dispatched op vs the same op through Paddle's native SPMD rule.

On 2 CPU ranks (gloo; ``--nproc 1``: one process, e.g. on one GPU), for add, matmul and softmax
on [256,256] and [8,1024] inputs sharded S(0), times the median of many calls of (a) the Paddle op on DistTensors and (b) the same local
op through ``paddle_ext.dispatch`` with paddle-ext's rule, forward with and without autograd
(recording the graph; backward is not timed), and prints the ratio dispatched / native. The two
are timed interleaved, in blocks, in one run; each figure is the slower rank's. The ratio is
paired: per block, the median of its dispatched calls over the median of its native calls timed
just before them, then the median over the blocks, with its 95% confidence interval (since
2026-12-07, later session: the ratio of the two medians over the whole run let the VM's fast and
slow states fall unevenly on the two sides -- softmax [8,1024] 27.5 vs 36.7 us, 1.34x, in a run
whose add [8,1024] read 1.05x; the summary line still gives that ratio's median and worst). Once per case the
outputs are checked to agree (global shape, placements, values). ``--write`` replaces the table
in docs/dispatch.md.

``--decorated`` times the same ops as functions decorated with ``@paddle_ext.spmd_op`` (the binding
of the call, then the dispatch) against the same native calls.

``--key python`` times the dispatcher with its Python cache key instead of the compiled one
(``paddle_ext.compat.native.fast_key``, the default when it builds here).
    python tools/bench_dispatch.py [--calls 2000] [--rounds 40] [--key compiled|python] [--nproc 1|2] [--write]

The defaults (2000 calls a figure, in 40 interleaved blocks) were 300 in 10 until 2026-12-07: this
VM switches between a fast and a slow state for Paddle's small ops (softmax [8,1024] 26 or 47 us),
and 30-call blocks let one state weigh on one side of a ratio.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DOC = os.path.join(HERE, "..", "docs", "dispatch.md")


def _timed(native, ours, calls: int, rounds: int = 10) -> tuple[float, float, list]:
    """Median µs per call of ``native`` and ``ours``, interleaved in ``rounds`` blocks so a change
    of machine load during the run hits both alike, and each block's paired ratio (the median of
    its ``ours`` calls over the median of its ``native`` calls, timed back to back)."""
    for _ in range(20):
        native()
        ours()
    per = max(1, calls // rounds)
    tn, to, paired = [], [], []
    for _ in range(rounds):
        block = []
        for fn, ts in ((native, tn), (ours, to)):
            times = []
            for _ in range(per):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            ts.extend(times)
            block.append(float(np.median(times)))
        paired.append(block[1] / block[0])
    return float(np.median(tn) * 1e6), float(np.median(to) * 1e6), paired


def _same(op: str, a, b) -> None:
    """Both paths give the same global shape, placements and values (checked once per case)."""
    import paddle.distributed as dist

    if list(a.shape) != list(b.shape) or str(a.placements) != str(b.placements):
        raise AssertionError(f"{op}: native {list(a.shape)} {a.placements} vs dispatched {list(b.shape)} "
                             f"{b.placements}")
    full = [dist.reshard(t, t.process_mesh, [dist.Replicate()] * len(t.placements))._local_value().numpy()
            for t in (a, b)]
    if not np.allclose(full[0], full[1], rtol=1e-5, atol=1e-5):
        raise AssertionError(f"{op}: native and dispatched values differ by {np.abs(full[0] - full[1]).max()}")


def _decorated(pd, paddle):
    """The same three ops as functions decorated with ``@paddle_ext.spmd_op`` (what a user writes
    for a function of their own): the decorator binds the call, then dispatches it."""
    @pd.spmd_op("add")
    def add(x, y):
        return paddle.add(x, y)

    @pd.spmd_op("matmul")
    def matmul(x, y):
        return paddle.matmul(x, y)

    @pd.spmd_op("softmax")
    def softmax(x, axis=-1):
        return paddle.nn.functional.softmax(x, axis)

    return add, matmul, softmax


def bench_rank(calls: int, key: str = "compiled", nproc: int = 2, rounds: int = 40, decorated: bool = False):
    import paddle.distributed as dist
    import paddle_ext

    dist.init_parallel_env()  # a user's script joins the gloo world and turns paddle-ext on
    paddle_ext.install()

    import paddle

    import paddle_ext.dispatch as pd
    from paddle_ext.compat.native import fast_key
    fast_key.use(key == "compiled")

    mesh = dist.ProcessMesh(list(range(nproc)), dim_names=["x"])
    rows = []
    for shape in ((256, 256), (8, 1024)):
        rng = np.random.default_rng(0)
        a = rng.standard_normal(shape).astype("float32")
        c = rng.standard_normal(shape).astype("float32")
        b = rng.standard_normal((shape[1], shape[1])).astype("float32")
        x = dist.shard_tensor(paddle.to_tensor(a), mesh, [dist.Shard(0)])
        y = dist.shard_tensor(paddle.to_tensor(c), mesh, [dist.Shard(0)])
        w = dist.shard_tensor(paddle.to_tensor(b), mesh, [dist.Replicate()])
        ops = {
            "add": (lambda: paddle.add(x, y),
                    lambda: pd.dispatch("add", [x, y], {}, lambda t, c: paddle.add(t[0], t[1]))),
            "matmul": (lambda: paddle.matmul(x, w),
                       lambda: pd.dispatch("matmul", [x, w], {}, lambda t, c: paddle.matmul(t[0], t[1]))),
            "softmax": (lambda: paddle.nn.functional.softmax(x, -1),
                        lambda: pd.dispatch("softmax", [x], {"axis": -1},
                                            lambda t, c: paddle.nn.functional.softmax(t[0], -1))),
        }
        if decorated:
            d_add, d_matmul, d_softmax = _decorated(pd, paddle)
            ops = {"add @spmd_op": (ops["add"][0], lambda: d_add(x, y)),
                   "matmul @spmd_op": (ops["matmul"][0], lambda: d_matmul(x, w)),
                   "softmax @spmd_op": (ops["softmax"][0], lambda: d_softmax(x, -1))}
        for name, (native, ours) in ops.items():
            for grad in (False, True):
                for t in (x, y, w):
                    t.stop_gradient = not grad
                _same(name, native(), ours())
                if nproc > 1:
                    dist.barrier()
                n_us, d_us, paired = _timed(native, ours, calls, rounds)
                rows.append({"op": name, "shape": list(shape), "autograd": grad, "native_us": n_us,
                             "dispatch_us": d_us, "paired": paired})
    return rows


def paired_ratio(per_rank_paired: list) -> tuple[float, float, float]:
    """``(ratio, low, high)`` of one row: per rank the median of its blocks' paired ratios, and the
    rank whose median is larger (the ranks run in lockstep); ``low``-``high``: that median's 95%
    confidence interval (``bench_step.median_ci``). A paired ratio is robust to this VM's switches
    between a fast and a slow state, which a ratio of two medians over the whole run is not."""
    from bench_step import median_ci

    worst = max(per_rank_paired, key=lambda blocks: float(np.median(blocks)))
    low, high = median_ci(worst)
    return float(np.median(worst)), low, high


def table(rows) -> str:
    lines = ["| op | shape | autograd | native (µs) | dispatched (µs) | ratio (95% CI) |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['op']} | {r['shape']} | {'yes' if r['autograd'] else 'no'} | {r['native_us']:.1f} | "
                     f"{r['dispatch_us']:.1f} | {r['ratio']:.2f}x ({r['ratio_low']:.2f}-{r['ratio_high']:.2f}) |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000, help="timed calls per figure")
    ap.add_argument("--rounds", type=int, default=40, help="interleaved blocks the calls are split into")
    ap.add_argument("--key", choices=("compiled", "python"), default="compiled",
                    help="the dispatcher's cache key: compiled (C++, built on first use) or python")
    ap.add_argument("--nproc", type=int, choices=(1, 2), default=2, help="ranks (1: one process, no communication)")
    ap.add_argument("--decorated", action="store_true",
                    help="time functions decorated with @paddle_ext.spmd_op instead of dispatch() calls")
    ap.add_argument("--write", action="store_true", help="write the table into docs/dispatch.md")
    args = ap.parse_args(argv)
    if args.key == "compiled":
        from paddle_ext.compat.native import fast_key
        fast_key.use(True)   # build it here once (first use ~25 s), not in the timed ranks
    load_before = os.getloadavg()
    sys.path.insert(0, HERE)   # bench_step (median_ci) and this module for the ranks
    from paddle_ext.launcher import run_ranks

    import bench_dispatch as me
    res = run_ranks(me.bench_rank, nproc=args.nproc, args=(args.calls, args.key, args.nproc, args.rounds, args.decorated),
                   timeout=600)
    rows = res[0]
    for i, r in enumerate(rows):   # the slower rank's figure: they run in lockstep
        r["native_us"] = max(other[i]["native_us"] for other in res)
        r["dispatch_us"] = max(other[i]["dispatch_us"] for other in res)
        r["ratio"], r["ratio_low"], r["ratio_high"] = paired_ratio([other[i]["paired"] for other in res])
        r["ratio_of_medians"] = r["dispatch_us"] / r["native_us"]
    text = table(rows)
    ratios = [r["ratio"] for r in rows]
    load_after = os.getloadavg()
    whole = [r["ratio_of_medians"] for r in rows]
    summary = (f"median ratio {np.median(ratios):.2f}x, worst {max(ratios):.2f}x over {len(rows)} rows "
               f"(ratio of the run's two medians: median {np.median(whole):.2f}x, worst {max(whole):.2f}x); "
               f"{args.calls} calls per figure in {args.rounds} blocks; {args.key} key; {args.nproc} rank(s); load average (1/5/15 min) before "
               f"{'/'.join(f'{v:.2f}' for v in load_before)}, after {'/'.join(f'{v:.2f}' for v in load_after)}")
    print(text)
    print(summary)
    if args.write:
        if args.nproc != 2 or args.decorated:
            raise SystemExit("--write records the 2-rank table of dispatch() calls; run it without --nproc, --decorated")
        doc = open(DOC).read()
        block = f"<!-- bench:start -->\n{text}\n\n{summary}\n<!-- bench:end -->"
        doc = re.sub(r"<!-- bench:start -->.*?<!-- bench:end -->", block, doc, flags=re.S)
        with open(DOC, "w") as f:
            f.write(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
