"""Static-Engine step time per pipeline schedule on 2 CPU ranks, as ratios to FThenB, beside
the simulator's prediction for the same schedule.

    python tools/bench_static.py [--hidden 256] [--acc 8] [--steps 6] [--markdown]

One launch trains a 4-block MLP (2 stages; VPP and ZB-V put 2 blocks per chunk) under each
schedule in turn; a step's time is measured around ``DistModel.__call__`` on the rank that
reports the loss, the first step (program build, first-use allocations) left out, and the
median of the rest is kept. The prediction is the simulator's makespan with unit costs per
stage (F = I = W = 1, a chunk of a two-chunk schedule costs 1/2), over FThenB's.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "multirank"))

# (schedule_mode, IR schedule it is predicted with, layer meshes, chunks)
PLANS = [
    ("FThenB", "FThenB", [0, 0, 1, 1], 1),
    ("1F1B", "1F1B", [0, 0, 1, 1], 1),
    ("IR_1F1B", "1F1B", [0, 0, 1, 1], 1),
    ("VPP", "VPP", [0, 1, 0, 1], 2),
    ("ZBH1", "ZBH1", [0, 0, 1, 1], 1),
    ("ZBV", "ZBV", [0, 1, 1, 0], 2),
]


def predicted(schedule: str, pp: int, m: int, chunks: int) -> float:
    from paddle_ext.passes import Costs, generate_schedule, simulate_schedule

    cost = 1.0 / chunks
    costs = Costs(forward=cost, backward_input=cost, backward_weight=cost)
    return simulate_schedule(generate_schedule(schedule, pp, m, chunks), costs=costs).makespan


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--acc", type=int, default=8, help="micro-batches per step")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    args = parser.parse_args(argv)

    import static_ranks as sr
    from paddle_ext.launcher import run_ranks

    cfgs = [{"schedule": mode, "layer_meshes": meshes, "acc": args.acc, "steps": args.steps,
             "vpp": chunks, "hidden": args.hidden, "batch": 4 * args.acc} for mode, _, meshes, chunks in PLANS]
    results = run_ranks(sr.train_many, nproc=2, args=(cfgs,), timeout=600,
                        log_dir=tempfile.mkdtemp(prefix="bench_static_"))
    rows = []
    for i, (mode, schedule, _, chunks) in enumerate(PLANS):
        per_rank = [r[i] for r in results]
        errors = [r["error"] for r in per_rank if "error" in r]
        if errors:
            rows.append((mode, None, None, errors[0].splitlines()[0][:80]))
            continue
        seconds = max(statistics.median(r["step_seconds"][1:]) for r in per_rank)
        rows.append((mode, seconds, predicted(schedule, 2, args.acc, chunks), ""))
    base_t, base_p = rows[0][1], rows[0][2]
    header = f"2 ranks, 4-block MLP hidden {args.hidden}, {args.acc} micro-batches, median of steps 2..{args.steps}"
    if args.markdown:
        print(f"{header}\n\n| schedule_mode | step (ms) | measured / FThenB | simulated / FThenB |\n|---|---|---|---|")
    else:
        print(header)
    for mode, t, p, err in rows:
        if t is None:
            print(f"| {mode} | failed: {err} | | |" if args.markdown else f"{mode:10s} failed: {err}")
        elif args.markdown:
            print(f"| {mode} | {1000 * t:.1f} | {t / base_t:.2f} | {p / base_p:.2f} |")
        else:
            print(f"{mode:10s} {1000 * t:8.1f} ms  x{t / base_t:.2f}  (simulated x{p / base_p:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
