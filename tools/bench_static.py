"""Static-Engine step time per pipeline schedule on 2 CPU ranks, as ratios to FThenB, beside
the simulator's prediction for the same schedule.

    python tools/bench_static.py [--hidden 256] [--acc 8] [--steps 6] [--rounds 1] [--unit] [--markdown]

One launch trains a 4-block MLP (2 stages; VPP and ZB-V put 1 block per chunk) under each
schedule in turn, each rank bound to its own CPU (``run_ranks(pin_cpus=True)``: unbound, a
rank's kernels spread over both cores and slow the other rank's whenever both compute, which
pipelined schedules do more than FThenB, and the simulator's ranks do not share cores); a step's time is measured around ``DistModel.__call__``, the first step
(program build, first-use allocations) left out, and the median of the rest is kept (the slower
rank's); with ``--rounds R`` the launch runs R times and each schedule keeps its fastest round
(the machine's other load only ever adds time).

The prediction is :func:`paddle_ext.passes.static.job_model.simulate_static`'s makespan over
FThenB's: the schedule as the Engine runs it (jobs merged as the pass merges them, Paddle's own
FThenB/1F1B/VPP with their messages inside their jobs, non-blocking sends), with the costs
``tools/static_profile.py`` measures first in one profiled launch (per block F, I, W; the
executor's cost per job; a send's cost; a message's latency). ``--unit`` predicts with unit costs instead (F = I =
W = 1 per stage, 1/2 per chunk of a two-chunk schedule; no runtime costs), as before.
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


PADDLE_PASSES = ("FThenB", "1F1B", "VPP")  # Paddle's own passes: messages inside the compute jobs


def predicted(mode: str, schedule: str, meshes, pp: int, m: int, chunks: int, profile=None) -> float:
    """The simulated step of ``mode`` (unit costs without ``profile``; else the profiled ones)."""
    from paddle_ext.passes import Costs
    from paddle_ext.passes.static.job_model import StaticCosts, simulate_static
    from static_profile import stage_costs

    if profile is None:
        cost = 1.0 / chunks
        return simulate_static(schedule, pp, m, chunks, costs=StaticCosts(cost, cost, cost)).makespan
    per_stage = {s: Costs(*fiw) for s, fiw in stage_costs(profile["blocks"], meshes, chunks).items()}
    costs = StaticCosts(1.0, 1.0, 1.0, job=profile["job"], message=profile["message"], latency=profile["latency"])
    return simulate_static(schedule, pp, m, chunks, costs=costs, paddle_pass=mode in PADDLE_PASSES,
                           stage_costs=per_stage).makespan


def interleaved_rank(cfgs, steps: int):
    """On one rank: every config's ``dist.to_static`` model built first, then ``steps`` rounds of
    one step of each in turn, each after a barrier (a load burst hits every schedule alike, as
    the other benches interleave); per config the step seconds, or ``{"error": ...}``."""
    import time

    import paddle.distributed as dist
    import paddle_ext
    import static_ranks as sr
    from paddle_ext.passes.static.passes import install_static

    dist.init_parallel_env()
    paddle_ext.install()
    install_static()
    models, out = [], []
    for cfg in cfgs:
        try:
            net, opt, loader, loss_fn, strategy = sr._build(cfg)
            dist.barrier()
            dm = dist.to_static(net, loader, loss_fn, opt, strategy=strategy)
            dm.train()
            batches = [b for _, b in zip(range(steps), loader())]
            models.append((dm, batches))
            out.append({"step_seconds": []})
        except Exception as exc:  # noqa: BLE001 - the failure is the measurement
            models.append(None)
            out.append({"error": f"{type(exc).__name__}: {exc}"[:2000]})
    for step in range(steps):
        for (entry, result) in zip(models, out):
            if entry is None or "error" in result:
                continue
            dm, batches = entry
            x, y = batches[step % len(batches)]
            dist.barrier()
            start = time.perf_counter()
            try:
                dm(x, y)
            except Exception as exc:  # noqa: BLE001
                result["error"] = f"{type(exc).__name__}: {exc}"[:2000]
                continue
            result["step_seconds"].append(time.perf_counter() - start)
    return out


def measure(args) -> dict:
    """``{schedule_mode: seconds or error text}``: the fastest of ``args.rounds`` launches."""
    import static_ranks as sr
    from paddle_ext.launcher import run_ranks
    from static_profile import MALLOC_ENV

    cfgs = [{"schedule": mode, "layer_meshes": meshes, "acc": args.acc, "steps": args.steps,
             "vpp": chunks, "hidden": args.hidden, "batch": 4 * args.acc} for mode, _, meshes, chunks in PLANS]
    env = None if args.glibc_default else MALLOC_ENV
    best: dict = {}
    for _ in range(args.rounds):
        if args.interleave:
            import bench_static as me  # importable by module name in the ranks

            results = run_ranks(me.interleaved_rank, nproc=2, args=(cfgs, args.steps), timeout=900,
                                pin_cpus=True, env=env, log_dir=tempfile.mkdtemp(prefix="bench_static_"))
        else:
            results = run_ranks(sr.train_many, nproc=2, args=(cfgs,), timeout=600, pin_cpus=True, env=env,
                                log_dir=tempfile.mkdtemp(prefix="bench_static_"))
        for i, (mode, _, _, _) in enumerate(PLANS):
            per_rank = [r[i] for r in results]
            errors = [r["error"] for r in per_rank if "error" in r]
            if errors:
                best[mode] = errors[0].splitlines()[0][:80]
                continue
            seconds = max(statistics.median(r["step_seconds"][1:]) for r in per_rank)
            if not isinstance(best.get(mode), float) or seconds < best[mode]:
                best[mode] = seconds
    return best


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--acc", type=int, default=8, help="micro-batches per step")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=1, help="launches; each schedule keeps its fastest")
    parser.add_argument("--interleave", action="store_true",
                        help="build every schedule's model first, then step them in turn (one step each per round)")
    parser.add_argument("--glibc-default", action="store_true",
                        help="run the ranks with glibc's default malloc (no static_profile.MALLOC_ENV)")
    parser.add_argument("--unit", action="store_true", help="predict with unit costs, without a profile")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    args = parser.parse_args(argv)

    profile = None
    if not args.unit:
        from static_profile import profile as run_profile

        from static_profile import MALLOC_ENV

        profile = run_profile(args.hidden, args.acc, env=None if args.glibc_default else MALLOC_ENV)
        blocks = ", ".join(f"{b}: " + "/".join(f"{x:.3f}" for x in fiw) for b, fiw in sorted(profile["blocks"].items()))
        print(f"profile (ms): job {profile['job']:.3f}, send {profile['message']:.3f}, latency {profile['latency']:.3f} "
              f"(mean hand-off; median {profile['latency_median']:.3f} when the receive waits), F/I/W/B per block {blocks}")
    times = measure(args)
    rows = [(mode, times[mode], predicted(mode, schedule, meshes, 2, args.acc, chunks, profile))
            for mode, schedule, meshes, chunks in PLANS]
    base_t, base_p = rows[0][1], rows[0][2]
    header = (f"2 ranks, 4-block MLP hidden {args.hidden}, {args.acc} micro-batches, median of steps 2..{args.steps}, "
              f"fastest of {args.rounds} round(s){', schedules interleaved step by step' if args.interleave else ''}"
              f"{', glibc default malloc' if args.glibc_default else ', MALLOC_ENV'}; simulated with {'unit' if profile is None else 'profiled'} costs")
    if args.markdown:
        print(f"{header}\n\n| schedule_mode | step (ms) | measured / FThenB | simulated / FThenB |\n|---|---|---|---|")
    else:
        print(header)
    for mode, t, p in rows:
        if not isinstance(t, float):
            print(f"| {mode} | failed: {t} | | |" if args.markdown else f"{mode:10s} failed: {t}")
        elif args.markdown:
            print(f"| {mode} | {1000 * t:.1f} | {t / base_t:.2f} | {p / base_p:.2f} |")
        else:
            print(f"{mode:10s} {1000 * t:8.1f} ms  x{t / base_t:.2f}  (simulated x{p / base_p:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
