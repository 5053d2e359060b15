"""Benchmark every dygraph pipeline schedule on CPU gloo ranks against the simulator.

    python tools/bench_pipeline.py                       # 2 ranks, prints the table
    python tools/bench_pipeline.py --nproc 4 --steps 5
    python tools/bench_pipeline.py --nproc 2 --nproc 4 --write-docs   # fill docs/pipeline_dygraph.md

Model: ``--blocks`` MLP blocks ``Linear(H, 4H)-GELU-Linear(4H, H)`` (``--hidden``), microbatches of
``--rows`` rows, ``m = --m-factor x ranks`` microbatches (default 2p: a 1F1B bubble of
(p-1)/(m+p-1) that the other schedules can remove, and compute per stage far above a message).

Each rank is pinned with all its threads (gloo's included) to core ``rank % cores`` and runs one
intra-op thread; the harness's per-action breadcrumbs are off. For each schedule every rank times
``--steps`` steps after one warm-up (the schedules take turns round by round, so a change of
load hits all alike) and reports the median step, its action trace, and the CPU allocator's peak
during a step (above its level at the start of the step: activations, messages and temporaries;
parameter gradients are preallocated by the warm-up). Every action's wall time inside the runs
is recorded (``profile=True``); the median F, B, I and W **of each stage** over all the runs are
the costs (isolated timings of each stage are the fallback), with the activation bytes one
forward keeps and the median one-way time of a message (ping-pong between ranks 0 and 1). The
parent feeds those costs to :func:`paddle_ext.passes.simulate_schedule` (``stage_costs=``) on the
same lowered schedule the runtime runs, adds the time ``step()`` spends outside its action list
(input-check exchange, batch split; measured in the same steps), and reports measured and
simulated step times, their ratios to 1F1B, and measured vs simulated peak activation memory.
"CPU time of all ranks / step" is the CPU time the ranks' processes used during the step over its
wall time: it cannot exceed the cores; near 1 the ranks took turns on one core's worth of time.
The parent also times I + W against B in one process for both split strategies (skip with
``--no-split-cost``).

With more ranks than cores (4 ranks here) two ranks share each core and the measured ratios mix
in the contention; judge the simulator on runs with a core per rank.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "pipeline_dygraph.md"
H, BLOCKS, ROWS = 512, 8, 32  # hidden size, blocks in the model, rows per microbatch (--hidden, --blocks, --rows)


def _configure(hidden: int, blocks: int, rows: int) -> None:
    global H, BLOCKS, ROWS
    H, BLOCKS, ROWS = hidden, blocks, rows


def _pin_to_core(rank: int) -> int:
    """Pin every thread of this rank (gloo's included) to core ``rank % cores``; returns the core."""
    cores = sorted(os.sched_getaffinity(0))
    core = cores[rank % len(cores)]
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), {core})
        except OSError:  # a thread that ended meanwhile
            pass
    return core


def _model():
    import paddle
    import paddle.nn as nn

    class Block(nn.Layer):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(H, 4 * H), nn.Linear(4 * H, H)

        def forward(self, x):
            return x + self.fc2(nn.functional.gelu(self.fc1(x)))

    paddle.seed(0)
    return [Block() for _ in range(BLOCKS)]


def _min_ms(fn, reps):
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * min(times)


def stage_costs(layer, needs_grad: bool, reps: int = 30) -> dict:
    """Fastest ms of F, B, I, W on one microbatch (min: least disturbed by other processes on the
    cores), and the bytes one forward keeps alive."""
    import paddle

    from paddle_ext.compat.ports.pipelining import host_memory
    from paddle_ext.passes.runtime import DeferredLinearSplit

    split = DeferredLinearSplit()
    x0, g = paddle.randn([ROWS, H]), paddle.randn([ROWS, H])

    def inp():
        x = x0.detach()
        x.stop_gradient = not needs_grad
        return x

    out = {"F": _min_ms(lambda: layer(inp()), reps)}
    b, i, w = [], [], []
    for _ in range(reps):
        y = layer(inp())
        t0 = time.perf_counter()
        paddle.autograd.backward([y], [g])
        b.append(time.perf_counter() - t0)
        with split.forward(layer) as rec:
            y = layer(inp())
        t0 = time.perf_counter()
        split.input(rec, [y], [g], [])
        t1 = time.perf_counter()
        split.weight(rec)
        i.append(t1 - t0)
        w.append(time.perf_counter() - t1)
    out.update({k: 1e3 * min(v) for k, v in (("B", b), ("I", i), ("W", w))})
    for p in layer.parameters():
        p.clear_gradient(False)
    before = host_memory()[0]
    y = layer(inp())
    out["act_bytes"] = host_memory()[0] - before
    del y
    return out


def _ping_pong_ms(p: int, reps: int = 20) -> float:
    """One-way time of one activation-sized message between pipeline ranks 0 and 1."""
    import paddle
    import paddle.distributed as dist

    from paddle_ext.passes.runtime.p2p import ensure_pair_groups, pair_group

    ensure_pair_groups([list(range(p))])
    rank = dist.get_rank()
    buf = paddle.randn([ROWS, H])
    if rank > 1:  # wait idle, off the cores of ranks 0 and 1
        dist.barrier()
        return 0.0
    group = pair_group(0, 1)
    times = []
    for i in range(reps + 5):  # 5 warm-up round trips, then the median one
        t0 = time.perf_counter()
        if rank == 0:
            dist.send(buf, dst=1, group=group)
            dist.recv(buf, src=1, group=group)
        else:
            dist.recv(buf, src=0, group=group)
            dist.send(buf, dst=0, group=group)
        if i >= 5:
            times.append(time.perf_counter() - t0)
    dist.barrier()
    return 1e3 * statistics.median(times) / 2


def rank_bench(names, m_factor: int, steps: int, model=(H, BLOCKS, ROWS), pin: bool = True):
    """One rank: costs of its stages, then every schedule's step time and memory peak."""
    import paddle.distributed as dist
    import paddle_ext

    dist.init_parallel_env()  # a user's script joins the gloo world and turns paddle-ext on
    paddle_ext.install()

    import paddle
    import paddle.nn.functional as F

    _configure(*model)
    # the harness's per-action breadcrumbs (a file write and a grid per action) would be timed too
    os.environ.pop("PADDLE_EXT_ACTION_FILE", None)
    paddle.base.core.set_num_threads(1)  # one intra-op thread (OMP/MKL_NUM_THREADS=1 are set as well)
    core = _pin_to_core(dist.get_rank()) if pin else None

    from paddle_ext.passes.runtime import build_stages, get_schedule, split_model
    from paddle_ext.passes.schedule_ir import Action
    from paddle_ext.passes.schedules import get_schedule_info

    rank, p = dist.get_rank(), dist.get_world_size()
    m = m_factor * p
    latency = _ping_pong_ms(p)
    blocks = _model()
    costs = {}
    for v in (1, 2):
        for i, piece in enumerate(split_model(blocks, p * v)):
            if i % p == rank:  # every stage once (the stages are alike, placement does not matter)
                costs[f"{p * v}:{i}"] = stage_costs(piece, needs_grad=i > 0, reps=8)
    dist.barrier()
    x, y = paddle.randn([ROWS * m, H]), paddle.randn([ROWS * m, H])
    runs = {}
    for name in names:
        v = get_schedule_info(name).default_chunks
        stages = build_stages(split_model(blocks, p * v), name, rank, p, n_chunks=v)
        sched = get_schedule(name)(stages, m, loss_fn=F.mse_loss, profile=True)
        runs[name] = (v, stages, sched, [s.stage_index for s in stages])

    def one_step(name):
        v, stages, sched, mine = runs[name]
        losses = []
        if 0 in mine and p * v - 1 in mine:
            sched.step(x, target=y, losses=losses)
        elif 0 in mine:
            sched.step(x)
        elif p * v - 1 in mine:
            sched.step(target=y, losses=losses)
        else:
            sched.step()
        for s in stages:
            for q in s.sublayer.parameters():
                q.clear_grad()  # zeros: keeps the gradient buffers, so the peak is activations

    times = {name: [] for name in names}
    cpu = {name: [] for name in names}  # CPU time of this process (all its threads) during the step
    peaks = {name: [] for name in names}
    traces = {name: [] for name in names}  # every timed step's actions, times from the step's start
    action_ms = {}  # "n_stages:stage" -> kind -> durations of that action inside the real runs
    for name in names:  # warm-up
        one_step(name)
    for _ in range(steps):  # rounds over all schedules: a burst of load hits every schedule alike
        for name in names:
            dist.barrier()
            c0, t0 = time.process_time(), time.perf_counter()
            one_step(name)
            times[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
            traces[name].append([(text, 1e3 * (a - t0), 1e3 * (b - t0)) for text, a, b in runs[name][2].last_trace])
            mem = runs[name][2].last_memory
            peaks[name].append(mem["peak"] - mem["start"])
            n_stages = p * runs[name][0]
            for text, t0, t1 in runs[name][2].last_trace:
                a = Action.from_str(text)
                if a.is_compute:
                    action_ms.setdefault(f"{n_stages}:{a.stage}", {}).setdefault(a.kind.value, []).append(
                        1e3 * (t1 - t0))
    for key, kinds in action_ms.items():  # every instance; the parent takes the median over the ranks
        costs.setdefault(key, {})["runs"] = kinds
    results = {}
    for name in names:  # the median step (and its trace): the costs are medians too
        order = sorted(range(len(times[name])), key=times[name].__getitem__)
        mid = order[(len(order) - 1) // 2]
        trace = traces[name][mid]
        results[name] = {"v": runs[name][0], "m": m, "step_ms": 1e3 * times[name][mid],
                         "cpu_ms": 1e3 * cpu[name][mid],
                         "step_ms_min": 1e3 * min(times[name]), "peak_bytes": max(peaks[name]),
                         "stages": runs[name][3], "trace": trace,
                         "busy_ms": sum(t1 - t0 for text, t0, t1 in trace if Action.from_str(text).is_compute)}
    return {"rank": rank, "latency_ms": latency, "costs": costs, "results": results, "load": os.getloadavg()[0],
            "core": core, "omp": os.environ.get("OMP_NUM_THREADS")}


def simulate(names, per_rank, p):
    """Simulated step time and per-rank peak activation bytes, from the costs measured in the runs."""
    from paddle_ext.passes import Costs, add_send_recv, generate_schedule, get_schedule_info, simulate_schedule

    latency = max(r["latency_ms"] for r in per_rank)
    out = {}
    for name in names:
        v = get_schedule_info(name).default_chunks
        m = per_rank[0]["results"][name]["m"]
        isolated, in_runs = {}, {}
        for r in per_rank:  # a stage's actions may have run on two ranks (loop vs V placement): pool them
            for key, c in r["costs"].items():
                n, s = map(int, key.split(":"))
                if n == p * v:
                    isolated.setdefault(s, {}).update({k: val for k, val in c.items() if k != "runs"})
                    for kind, durations in c.get("runs", {}).items():
                        in_runs.setdefault(s, {}).setdefault(kind, []).extend(durations)
        # each stage's costs: the median of that action inside the runs of every schedule (the
        # isolated timing where a kind never ran on that stage)
        per_stage = {s: {k: statistics.median(in_runs[s][k]) if in_runs.get(s, {}).get(k) else isolated[s][k]
                         for k in ("F", "B", "I", "W")} for s in range(p * v)}
        act = {s: float(c["act_bytes"]) for s, c in isolated.items() if "act_bytes" in c}
        lowered = add_send_recv(generate_schedule(name, p, m, v))
        sim = simulate_schedule(lowered, None, comm_latency=latency, activation_bytes=act,
                                stage_costs={s: Costs(c["F"], c["I"], c["W"], c["B"]) for s, c in per_stage.items()})
        # what step() does outside its action list (the ranks' input-check exchange, splitting the
        # batch, bookkeeping), measured in the same steps: step time minus the span of the actions
        outside = max(r["results"][name]["step_ms"] - r["results"][name]["trace"][-1][2]
                      + r["results"][name]["trace"][0][1] for r in per_rank)
        out[name] = {"makespan_ms": sim.makespan, "bubble": sim.bubble_ratio, "outside_ms": outside,
                     "step_ms": sim.makespan + outside,
                     "timeline": [[(str(a), st, en) for a, st, en in sim.timed(i)] for i in range(len(sim.ranks))],
                     "peak_act_bytes": list(sim.peak_activation_bytes), "stage_costs": per_stage,
                     "costs": {k: statistics.mean(c[k] for c in per_stage.values()) for k in ("F", "B", "I", "W")}}
    return out


def split_cost(reps: int = 30) -> list:
    """I + W vs B in one process, for both split strategies, on the bench block and a transformer block."""
    import paddle
    import paddle.nn as nn

    from paddle_ext.passes.runtime import get_split_strategy

    class TBlock(nn.Layer):
        def __init__(self, h=256):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
            self.attn = nn.MultiHeadAttention(h, 4)
            self.fc1, self.fc2 = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)

        def forward(self, x):
            a = self.ln1(x)
            x = x + self.attn(a, a, a)
            return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))

    rows = []
    paddle.seed(0)
    for label, layer, shape in ((f"MLP block x4 (H={H}, {ROWS} rows)", nn.Sequential(*_model()[:4]), [ROWS, H]),
                                ("transformer block (H=256, 4x64 tokens)", TBlock(256), [4, 64, 256])):
        x0, g = paddle.randn(shape), paddle.randn(shape)
        samples = {"B": [], "deferred-linear": [], "regrad": []}
        for _ in range(reps):  # interleaved, so load changes hit every variant alike
            x = x0.detach()
            x.stop_gradient = False
            y = layer(x)
            t0 = time.perf_counter()
            paddle.autograd.backward([y], [g])
            samples["B"].append((time.perf_counter() - t0, 0.0))
            for name in ("deferred-linear", "regrad"):
                split = get_split_strategy(name)
                x = x0.detach()
                x.stop_gradient = False
                with split.forward(layer) as rec:
                    y = layer(x)
                t0 = time.perf_counter()
                split.input(rec, [y], [g], [x])
                t1 = time.perf_counter()
                split.weight(rec)
                samples[name].append((t1 - t0, time.perf_counter() - t1))
        med = {k: [1e3 * min(s[i] for s in v) for i in (0, 1)] for k, v in samples.items()}
        b = med["B"][0]
        for name in ("deferred-linear", "regrad"):
            i, w = med[name]
            rows.append({"model": label, "strategy": name, "B_ms": b, "I_ms": i, "W_ms": w, "ratio": (i + w) / b})
    return rows


def format_tables(runs: dict, split_rows: list, model=None) -> str:
    hidden, blocks, rows = model or (H, BLOCKS, ROWS)
    lines = []
    for p, (per_rank, sim) in sorted(runs.items()):
        names = list(per_rank[0]["results"])
        step = {n: max(r["results"][n]["step_ms"] for r in per_rank) for n in names}
        per_stage = "; ".join(f"stage {st}: " + " / ".join(f"{c[k]:.1f}" for k in ("F", "B", "I", "W"))
                              for st, c in sorted(sim["1F1B"]["stage_costs"].items(), key=lambda kv: int(kv[0])))
        loads = sorted({round(r["load"], 1) for r in per_rank})
        cores = [r.get("core") for r in per_rank]
        pinned = f"rank r pinned to core r % {os.cpu_count()}: {cores}" if None not in cores else "not pinned"
        lines.append(f"**{p} ranks** on {os.cpu_count()} cores ({pinned}; 1-minute load average at the end "
                     f"{'/'.join(map(str, loads))}), m = {per_rank[0]['results'][names[0]]['m']} microbatches of "
                     f"{rows} rows, {blocks} blocks Linear({hidden},{4 * hidden})-GELU-Linear({4 * hidden},{hidden}). "
                     f"Costs at v=1 (median inside the runs, ms, F / B / I / W): {per_stage}; one-way message "
                     f"{max(r['latency_ms'] for r in per_rank):.2f} ms; step time outside the action list "
                     f"{statistics.median(sim[n]['outside_ms'] for n in names):.1f} ms.")
        lines.append("")
        lines.append("| schedule | v | step, measured (ms) | simulated (ms) | measured / simulated "
                     "| measured / 1F1B | simulated / 1F1B | gap (points) | CPU time of all ranks / step "
                     "| peak memory per rank, measured (MiB) | simulated activations (MiB) |")
        lines.append("|---|---|---|---|---|---|---|---|---|---|---|")
        for name in names:
            meas_r, sim_r = step[name] / step["1F1B"], sim[name]["step_ms"] / sim["1F1B"]["step_ms"]
            busy = sum(r["results"][name]["cpu_ms"] for r in per_rank) / step[name]
            meas = " / ".join(f"{r['results'][name]['peak_bytes'] / 2**20:.1f}" for r in per_rank)
            simm = " / ".join(f"{b / 2**20:.1f}" for b in sim[name]["peak_act_bytes"])
            lines.append(f"| {name} | {per_rank[0]['results'][name]['v']} | {step[name]:.0f} | "
                         f"{sim[name]['step_ms']:.0f} | {step[name] / sim[name]['step_ms']:.2f} | {meas_r:.2f} | "
                         f"{sim_r:.2f} | {100 * (meas_r - sim_r):+.0f} | {busy:.2f} | {meas} | {simm} |")
        lines.append("")
    if split_rows:
        lines.append(f"Split backward, one process (load average {split_rows[0].get('load', 0):.1f}), fastest of 30 "
                     "interleaved runs:")
        lines.append("")
        lines.append("| model | split strategy | B (ms) | I (ms) | W (ms) | (I + W) / B |")
        lines.append("|---|---|---|---|---|---|")
        for r in split_rows:
            lines.append(f"| {r['model']} | {r['strategy']} | {r['B_ms']:.2f} | {r['I_ms']:.2f} | {r['W_ms']:.2f} | "
                         f"{r['ratio']:.2f} |")
    return "\n".join(lines)


def write_docs(text: str) -> None:
    doc = DOC.read_text(encoding="utf-8")
    start, end = "<!-- bench:start -->", "<!-- bench:end -->"
    if start not in doc or end not in doc:
        raise SystemExit(f"{DOC} has no {start} ... {end} block to fill")
    new = re.sub(re.escape(start) + ".*?" + re.escape(end), lambda _: f"{start}\n{text}\n{end}", doc, flags=re.S)
    DOC.write_text(new, encoding="utf-8")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nproc", type=int, action="append", help="ranks (repeat for several); default 2")
    parser.add_argument("--steps", type=int, default=7, help="timed rounds over the schedules (after one warm-up)")
    parser.add_argument("--m-factor", type=int, default=2, help="microbatches = m_factor * ranks")
    parser.add_argument("--hidden", type=int, default=H, help="hidden size of the MLP blocks")
    parser.add_argument("--blocks", type=int, default=BLOCKS, help="blocks in the model (a multiple of 2 * ranks)")
    parser.add_argument("--rows", type=int, default=ROWS, help="rows per microbatch")
    parser.add_argument("--no-pin", action="store_true", help="do not pin rank r to core r %% cores")
    parser.add_argument("--schedules", default=None, help="comma-separated names (default: all)")
    parser.add_argument("--no-split-cost", action="store_true", help="skip the I + W vs B timing")
    parser.add_argument("--write-docs", action="store_true", help=f"fill the bench block of {DOC.name}")
    parser.add_argument("--json", default=None, help="also write the raw numbers here")
    parser.add_argument("--from-json", default=None, help="re-render a --json file instead of running")
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args(argv)
    if args.from_json:
        data = json.loads(Path(args.from_json).read_text())
        runs = {int(p): (r["ranks"], r["simulated"]) for p, r in data["runs"].items()}
        text = format_tables(runs, data["split"], data.get("model"))
        print(text)
        if args.write_docs:
            write_docs(text)
        return 0

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import importlib

    from paddle_ext.passes.schedules import schedule_names
    from paddle_ext.launcher import run_ranks

    me = importlib.import_module("bench_pipeline")  # importable by name in the ranks
    names = args.schedules.split(",") if args.schedules else list(schedule_names())
    if "1F1B" not in names:
        names.insert(0, "1F1B")
    _configure(args.hidden, args.blocks, args.rows)
    split_rows = [] if args.no_split_cost else split_cost()  # first: one process, before the ranks
    if split_rows:
        split_rows[0]["load"] = os.getloadavg()[0]
    runs, raw = {}, {}
    for p in args.nproc or [2]:
        per_rank = run_ranks(me.rank_bench, nproc=p, timeout=args.timeout,
                             args=(names, args.m_factor, args.steps, (args.hidden, args.blocks, args.rows),
                                   not args.no_pin),
                             env={"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
        sim = simulate(names, per_rank, p)
        runs[p] = (per_rank, sim)
        raw[p] = {"ranks": per_rank, "simulated": sim}
    text = format_tables(runs, split_rows)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": raw, "split": split_rows,
                                               "model": [args.hidden, args.blocks, args.rows]}, indent=1, default=str))
    if args.write_docs:
        write_docs(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
