"""Static-Engine step time per pipeline schedule on 2 CPU ranks, as ratios to FThenB, beside
the simulator's prediction for the same schedule.

    python tools/bench_static.py [--hidden 256] [--acc 8] [--rows 4] [--steps 6] [--rounds 1] [--unit] [--markdown]
                                 [--binding process|compute|both|none] [--sched] [--unfused]

One launch trains a 4-block MLP (2 stages; VPP and ZB-V put 1 block per chunk) under each
schedule in turn, each rank's compute bound to its own CPU (unbound, a rank's kernels spread
over both cores and slow the other rank's whenever both compute, which pipelined schedules do
more than FThenB, and the simulator's ranks do not share cores). ``--binding``: ``process``
binds every thread of a rank (``run_ranks(pin_cpus=True)``), ``compute`` the compute only
(``pin_cpus="compute"``: the static gloo send thread and gloo's I/O threads free on both
CPUs, so a message need not wait for its sender's compute), ``both`` measures the two in one
launch (``--interleave``: each step of each schedule runs once with the communication threads
on the rank's CPU and once free; the profile runs once per binding), ``none`` binds nothing
(``pin_cpus=False``: docs/static_engine.md, "Fifth pass"); ``--sched`` adds each
thread class's CPU time and run-queue wait per step; ``--unfused`` adds ZBH1 and ZBV
rows with the split's weight gradient added to its gradient-merge buffer by a separate ``add_``
(as before the split wrote it with one ``addmm_``; docs/static_engine.md, "Fourth pass"). The default is ``process``: freeing the
communication threads made no schedule faster (docs/static_engine.md, "Third pass"). A step's
time is measured around ``DistModel.__call__``, the first step (program build, first-use
allocations) left out, and the median of the rest is kept (the slower rank's); with ``--rounds
R`` the launch runs R times and each schedule keeps its fastest round (the machine's other load
only ever adds time); the table also gives each schedule's step over FThenB's within each launch,
as the median and range over the R launches (how far one launch's ratio can be trusted).
IR_VPP, paddle-ext's lowering of VPP's order, is measured beside Paddle's VPP pass.
``--rows`` is a micro-batch's rows (4 by default, as every pass before the seventh measured):
with 4 rows each job is bound by reading its block's weight, so its time depends on what ran
before it on the core (the profile's cold costs); with 32 or more the matmuls' arithmetic
dominates (docs/static_engine.md, "Seventh pass", "Eighth pass").

The prediction is :func:`paddle_ext.passes.static.job_model.simulate_static`'s makespan over
FThenB's: the schedule as the Engine runs it (jobs merged as the pass merges them, Paddle's own
FThenB/1F1B/VPP with their messages inside their jobs, non-blocking sends), with the costs
``tools/static_profile.py`` measures first in one profiled launch (per block warm F, I, W, B and
what a job costs more when its block's weights or gradients are cold, which the simulator
charges by the order of each schedule's jobs; the same per stage for the two-block stages of
FThenB, 1F1B and ZBH1, measured whole; the Engine's fixed cost per step; the
executor's cost per job; a send's cost; a message's latency). ``--unit`` predicts with unit costs instead (F = I =
W = 1 per stage, 1/2 per chunk of a two-chunk schedule; no runtime costs), as before.
"""
from __future__ import annotations

import argparse
import json
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
    ("IR_VPP", "VPP", [0, 1, 0, 1], 2),
    ("ZBH1", "ZBH1", [0, 0, 1, 1], 1),
    ("ZBV", "ZBV", [0, 1, 1, 0], 2),
]


#: ``--unfused``: the split schedules again with each weight gradient written to a temporary and
#: added to its gradient-merge buffer by a separate ``add_`` (``bw_split.FUSE_GRAD_MERGE`` off)
UNFUSED = [("ZBH1 unfused", "ZBH1", [0, 0, 1, 1], 1), ("ZBV unfused", "ZBV", [0, 1, 1, 0], 2)]


def plans(args) -> list:
    """The rows this run measures: :data:`PLANS`, and :data:`UNFUSED` with ``--unfused``."""
    return PLANS + (UNFUSED if getattr(args, "unfused", False) else [])


def predicted(mode: str, schedule: str, meshes, pp: int, m: int, chunks: int, profile=None) -> float:
    """The simulated step of ``mode`` (unit costs without ``profile``; else the profiled ones)."""
    from paddle_ext.passes.static.job_model import PADDLE_PASSES, StaticCosts, simulate_static
    from static_profile import simulator_costs

    if profile is None:
        cost = 1.0 / chunks
        return simulate_static(schedule, pp, m, chunks, costs=StaticCosts(cost, cost, cost)).makespan
    costs, per_stage, cold = simulator_costs(profile, meshes, chunks)
    return simulate_static(schedule, pp, m, chunks, costs=costs, paddle_pass=mode in PADDLE_PASSES,
                           stage_costs=per_stage, cold=cold or None).makespan


#: ``--binding`` -> run_ranks's pin_cpus; the launch of ``both`` binds the compute only, then
#: moves the communication threads back to the rank's CPU for the ``process`` half of each step
PIN = {"process": True, "compute": "compute", "both": "compute", "none": False}
COMM_THREADS = ("pe_gloo_send", "pe_gloo_recv", "pe_gloo_io")  # gloo_ops.cc's and static_collectives.py's names


def bind_comm_threads(binding: str) -> int:
    """Move this rank's communication threads (:data:`COMM_THREADS`) to the main thread's CPUs
    (``process``) or to every CPU the launch allowed (``compute``); returns how many moved."""
    cpus = (os.sched_getaffinity(0) if binding == "process"
            else {int(c) for c in os.environ["PADDLE_EXT_COMM_CPUS"].split(",")})
    moved = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if f.read().strip() not in COMM_THREADS:
                    continue
            os.sched_setaffinity(int(tid), cpus)
            moved += 1
        except OSError:  # the thread ended meanwhile
            pass
    return moved


#: tid -> "pe_gloo_io" for the gloo I/O threads: named so only under ``--binding compute``
#: (``static_collectives.comm_threads_free``); else found by their wait channel, ``epoll_wait``
#: (sticky: a running thread's channel is 0), as ``test_static_thread_bind`` finds them
_IO = {}


def thread_times(main: int, main_first: bool) -> dict:
    """``{class: [run ns, run-queue wait ns, involuntary switches]}`` summed over this process's
    threads by class (``main``, ``pe_gloo_send``, ``pe_gloo_recv``, ``pe_gloo_io``, ``other``: Paddle's executor
    workers among them), from the kernel's ``/proc/self/task/<tid>/schedstat`` and ``status``.
    The main thread (the reader) is read first with ``main_first``, else last, so that its own
    reading stays out of a difference of a last-read and a first-read sample."""
    out: dict = {}
    others = [t for t in os.listdir("/proc/self/task") if int(t) != main]
    for tid in ([str(main)] + others if main_first else others + [str(main)]):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                run, wait = (int(x) for x in f.read().split()[:2])
            with open(f"/proc/self/task/{tid}/status") as f:
                switches = next(int(line.split()[1]) for line in f if line.startswith("nonvoluntary_ctxt_switches"))
        except (OSError, StopIteration, ValueError):  # the thread ended meanwhile
            continue
        if tid not in _IO:
            try:
                with open(f"/proc/self/task/{tid}/wchan") as f:
                    if "epoll" in f.read():
                        _IO[tid] = "pe_gloo_io"
            except OSError:
                pass
        cls = "main" if int(tid) == main else name if name in COMM_THREADS else _IO.get(tid, "other")
        total = out.setdefault(cls, [0, 0, 0])
        for i, x in enumerate((run, wait, switches)):
            total[i] += x
    return out


def interleaved_rank(cfgs, steps: int, bindings=("process",), sched: bool = False):
    """On one rank: every config's ``dist.to_static`` model built first, then ``steps`` rounds of
    one step of each in turn, each after a barrier (a load burst hits every schedule alike, as
    the other benches interleave), once per binding of ``bindings`` (more than one: the
    communication threads moved by :func:`bind_comm_threads` before each); per binding, per
    config the step seconds, or ``{"error": ...}``; with ``sched``, also ``"threads"``:
    :func:`thread_times` per step after the first (ms, ms, count), read outside the timed step."""
    import threading
    import time

    import paddle.distributed as dist
    import paddle_ext
    import static_ranks as sr
    from paddle_ext.passes.static import bw_split
    from paddle_ext.passes.static.passes import install_static

    dist.init_parallel_env()
    paddle_ext.install()
    install_static()
    models, out = [], {b: [] for b in bindings}
    for cfg in cfgs:
        bw_split.FUSE_GRAD_MERGE = cfg.get("fuse_grad_merge", True)
        try:
            net, opt, loader, loss_fn, strategy = sr._build(cfg)
            dist.barrier()
            dm = dist.to_static(net, loader, loss_fn, opt, strategy=strategy)
            dm.train()
            batches = [b for _, b in zip(range(steps), loader())]
            models.append((dm, batches))
            for b in bindings:
                out[b].append({"step_seconds": []})
        except Exception as exc:  # noqa: BLE001 - the failure is the measurement
            models.append(None)
            for b in bindings:
                out[b].append({"error": f"{type(exc).__name__}: {exc}"[:2000]})
    moved = 0
    for step, binding in ((s, b) for s in range(steps) for b in bindings):
        if len(bindings) > 1:
            moved = max(moved, bind_comm_threads(binding))
        for (entry, result) in zip(models, out[binding]):
            if entry is None or "error" in result:
                continue
            dm, batches = entry
            x, y = batches[step % len(batches)]
            dist.barrier()
            before = thread_times(threading.get_native_id(), False) if sched and step else None
            start = time.perf_counter()
            try:
                dm(x, y)
            except Exception as exc:  # noqa: BLE001
                result["error"] = f"{type(exc).__name__}: {exc}"[:2000]
                continue
            result["step_seconds"].append(time.perf_counter() - start)
            if before is not None:
                _add_times(result, before, thread_times(threading.get_native_id(), True), steps - 1)
    if len(bindings) > 1 and not moved:
        raise RuntimeError(f"no thread named {' or '.join(COMM_THREADS)} on this rank: the bindings {bindings} "
                           "measured the same thing; run the static Engine on paddle-ext's gloo channels "
                           "(PADDLE_EXT_P2P_SOCKETS=0: sockets need no communication thread)")
    return out


def _add_times(result: dict, before: dict, after: dict, steps: int) -> None:
    """Add one step's :func:`thread_times` difference to ``result["threads"]``, as per-step means."""
    threads = result.setdefault("threads", {})
    for cls, now in after.items():
        was = before.get(cls, [0, 0, 0])
        total = threads.setdefault(cls, [0.0, 0.0, 0.0])
        for i, scale in enumerate((1e6, 1e6, 1)):
            total[i] += (now[i] - was[i]) / scale / steps


def bindings_of(binding: str) -> tuple:
    return ("process", "compute") if binding == "both" else (binding,)


def _launch(args, cfgs, env, binding: str) -> dict:
    """One launch: ``{binding: [per rank, per config result]}``."""
    import static_ranks as sr
    from paddle_ext.launcher import run_ranks

    log_dir = tempfile.mkdtemp(prefix="bench_static_")
    if args.interleave:
        import bench_static as me  # importable by module name in the ranks

        results = run_ranks(me.interleaved_rank, nproc=2, args=(cfgs, args.steps, bindings_of(binding), args.sched),
                            timeout=900 * len(bindings_of(binding)), pin_cpus=PIN[binding], env=env, log_dir=log_dir)
        return {b: [r[b] for r in results] for b in bindings_of(binding)}
    return {binding: run_ranks(sr.train_many, nproc=2, args=(cfgs,), timeout=600, pin_cpus=PIN[binding], env=env,
                               log_dir=log_dir)}


def measure(args) -> dict:
    """``{binding: {schedule_mode: seconds or error text}}``: the fastest of ``args.rounds``
    launches; with ``--sched`` also ``{(schedule_mode, "threads"): [per rank thread_times]}`` of
    that launch."""
    from static_profile import MALLOC_ENV

    cfgs = [{"schedule": mode.split()[0], "layer_meshes": meshes, "acc": args.acc, "steps": args.steps,
             "vpp": chunks, "hidden": args.hidden, "batch": args.rows * args.acc, **({"fuse_grad_merge": False}
                                                                             if mode.endswith(" unfused") else {})}
            for mode, _, meshes, chunks in plans(args)]
    env = None if args.glibc_default else MALLOC_ENV
    # both bindings without --interleave: one launch each per round
    launches = [args.binding] if args.interleave or args.binding != "both" else ["process", "compute"]
    best: dict = {b: {} for b in bindings_of(args.binding)}
    for _ in range(args.rounds):
        for launch in launches:
            for binding, results in _launch(args, cfgs, env, launch).items():
                _keep_fastest(best[binding], results, plans(args))
                _keep_ratios(best[binding], results, plans(args))
    return best


def _step(per_rank) -> float | None:
    """A launch's step of one schedule: the slower rank's median over the steps after the first."""
    if any("error" in r for r in per_rank):
        return None
    return max(statistics.median(r["step_seconds"][1:]) for r in per_rank)


def _keep_ratios(best: dict, results, rows) -> None:
    """Add each schedule's step over FThenB's *in this launch* to ``best[(mode, "ratios")]`` (the
    schedules ran interleaved there, step by step): their spread over launches says how far one
    launch's ratio can be trusted (docs/static_engine.md, "Sixth pass")."""
    base = _step([r[0] for r in results])
    for i, (mode, _, _, _) in enumerate(rows):
        t = _step([r[i] for r in results])
        if base and t:
            best.setdefault((mode, "ratios"), []).append(t / base)


def _keep_fastest(best: dict, results, rows) -> None:
    for i, (mode, _, _, _) in enumerate(rows):
        per_rank = [r[i] for r in results]
        errors = [r["error"] for r in per_rank if "error" in r]
        if errors:
            best[mode] = errors[0].splitlines()[0][:80]
            continue
        seconds = _step(per_rank)
        if not isinstance(best.get(mode), float) or seconds < best[mode]:
            best[mode] = seconds
            best[(mode, "threads")] = [r.get("threads") for r in per_rank]


def _threads_table(args, times: dict) -> None:
    """``--sched``: per schedule, binding and rank, each thread class's CPU time, run-queue wait
    (ms per step) and involuntary switches per step."""
    classes = ("main", "other") + COMM_THREADS
    print("\nper step: run ms / run-queue wait ms / involuntary switches, by thread (other: Paddle's executor "
          "workers and the rest)\n\n| schedule_mode | binding | rank | step (ms) | " + " | ".join(classes) + " |")
    print("|---|---|---|---|" + "---|" * len(classes))
    for mode, _, _, _ in plans(args):
        for b in bindings_of(args.binding):
            if not isinstance(times[b].get(mode), float):
                continue
            for rank, threads in enumerate(times[b][(mode, "threads")]):
                cells = " | ".join("/".join(f"{x:.1f}" for x in threads.get(c, (0, 0, 0))) for c in classes)
                print(f"| {mode} | {b} | {rank} | {1000 * times[b][mode]:.1f} | {cells} |")


def _profiles(args) -> dict:
    """``{binding: profile or None}`` (``--unit``: no profile), each printed as it comes."""
    from static_profile import MALLOC_ENV, profile as run_profile

    out = {}
    for binding in bindings_of(args.binding):
        if args.unit:
            out[binding] = None
            continue
        prof = run_profile(args.hidden, args.acc, env=None if args.glibc_default else MALLOC_ENV, binding=binding,
                           rows=args.rows)
        blocks = ", ".join(f"{b}: " + "/".join(f"{x:.3f}" for x in fiw) for b, fiw in sorted(prof["blocks"].items()))
        cold = "; ".join(f"{state} " + ", ".join(f"{b}: " + "/".join(f"{x:.3f}" for x in fiw) for b, fiw in sorted(blocks.items()))
                         for state, blocks in prof.get("cold", {}).items())
        stages = "; ".join(f"{key}: warm " + ", ".join(f"{s}: " + "/".join(f"{x:.3f}" for x in fiw)
                                                    for s, fiw in sorted(fig["warm"].items()))
                           + "; cold " + "; ".join(f"{state} " + ", ".join(f"{s}: " + "/".join(f"{x:.3f}" for x in fiw)
                                                                          for s, fiw in sorted(by.items()))
                                                  for state, by in fig["cold"].items())
                           for key, fig in prof.get("stages", {}).items())
        if args.save_profile:
            with open(args.save_profile if len(bindings_of(args.binding)) == 1 else f"{args.save_profile}.{binding}",
                      "w") as f:
                json.dump(prof, f)
        print(f"profile, {binding} binding (ms): job {prof['job']:.3f}, send {prof['message']:.3f}, "
              f"comm threads {prof.get('comm', 0.0):.3f} per message, latency "
              f"{prof['latency']:.3f} (receives {prof.get('recv', 'rendezvous')}, a landed one's op {prof.get('receive', 0.0):.3f}; median {prof['latency_median']:.3f} when the receive waits), "
              f"step {prof.get('step', 0.0):.3f}, warm F/I/W/B per block {blocks}; cold adds: {cold}"
              + (f"; stages measured whole, {stages}" if stages else ""))
        out[binding] = prof
    return out


def _table(args, times: dict, profiles: dict) -> None:
    """Per schedule and binding: step time, measured / FThenB, simulated / FThenB (none for the
    ``--unfused`` rows: the profile measures the split as the pass makes it, fused)."""
    bindings = bindings_of(args.binding)
    cells = {}
    for b in bindings:
        rows = [(mode, times[b][mode], None if mode in dict((u[0], u) for u in UNFUSED) else
                 predicted(mode, schedule, meshes, 2, args.acc, chunks, profiles[b]))
                for mode, schedule, meshes, chunks in plans(args)]
        base_t, base_p = rows[0][1], rows[0][2]
        for mode, t, p in rows:
            ok = isinstance(t, float) and isinstance(base_t, float)
            sim = "–" if p is None else f"{p / base_p:.2f}"
            per = sorted(times[b].get((mode, "ratios"), []))
            launches = (f"{statistics.median(per):.2f} ({per[0]:.2f}-{per[-1]:.2f})" if len(per) > 1
                        else f"{per[0]:.2f}" if per else "–")
            cells[(mode, b)] = (f"{1000 * t:.1f} | {t / base_t:.2f} | {launches} | {sim}" if ok
                                else f"failed: {t} | | | ")
    columns = " | ".join(f"{b}: step (ms) | measured / FThenB | per launch: median (range) | simulated / FThenB"
                         for b in bindings)
    if args.markdown:
        print(f"\n| schedule_mode | {columns} |\n|---|" + "---|---|---|---|" * len(bindings))
    else:
        print(f"{'schedule':10s} {columns}")
    for mode, _, _, _ in plans(args):
        row = " | ".join(cells[(mode, b)] for b in bindings)
        print(f"| {mode} | {row} |" if args.markdown else f"{mode:10s} {row}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--acc", type=int, default=8, help="micro-batches per step")
    parser.add_argument("--rows", type=int, default=4, help="rows per micro-batch (the batch is rows x acc)")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=1, help="launches; each schedule keeps its fastest")
    parser.add_argument("--interleave", action="store_true",
                        help="build every schedule's model first, then step them in turn (one step each per round)")
    parser.add_argument("--binding", choices=sorted(PIN), default="process",
                        help="process: every thread of a rank on its CPU; compute: the compute only, the communication "
                             "threads free; both: the two, in one launch with --interleave")
    parser.add_argument("--glibc-default", action="store_true",
                        help="run the ranks with glibc's default malloc (no static_profile.MALLOC_ENV)")
    parser.add_argument("--sched", action="store_true",
                        help="with --interleave: each thread class's CPU time and run-queue wait per step (schedstat)")
    parser.add_argument("--unit", action="store_true", help="predict with unit costs, without a profile")
    parser.add_argument("--unfused", action="store_true",
                        help="with --interleave: also ZBH1 and ZBV with the weight gradient added to its gradient-merge "
                             "buffer by a separate add_ (bw_split.FUSE_GRAD_MERGE off), as before the addmm_")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    parser.add_argument("--save-profile", metavar="PATH", help="write the profile (static_profile.costs_from) as JSON")
    args = parser.parse_args(argv)
    if args.rows < 1 or args.acc < 1:
        parser.error(f"--rows {args.rows} and --acc {args.acc} must be at least 1")
    if args.unfused and not args.interleave:
        parser.error("--unfused needs --interleave (the flag is set in the ranks before each model is built)")

    start_load = os.getloadavg()
    profiles = _profiles(args)
    times = measure(args)
    print(f"2 ranks, 4-block MLP hidden {args.hidden}, {args.acc} micro-batches of {args.rows} rows, median of steps 2..{args.steps}, "
          f"fastest of {args.rounds} round(s){', schedules interleaved step by step' if args.interleave else ''}"
          f"{', glibc default malloc' if args.glibc_default else ', MALLOC_ENV'}; simulated with "
          f"{'unit' if args.unit else 'profiled'} costs; load average (1 min) {start_load[0]:.2f} at the start, "
          f"{os.getloadavg()[0]:.2f} at the end")
    _table(args, times, profiles)
    if args.sched and args.interleave:
        _threads_table(args, times)
    return 0


if __name__ == "__main__":
    sys.exit(main())
