"""Benchmark every dygraph pipeline schedule on CPU gloo ranks against the simulator.

    python tools/bench_pipeline.py                       # 2 ranks, prints the table
    python tools/bench_pipeline.py --nproc 4 --steps 3
    python tools/bench_pipeline.py --nproc 2 --nproc 4 --write-docs   # fill docs/pipeline_dygraph.md

For each schedule, every rank measures the fastest of ``--steps`` steps (after one warm-up step;
the schedules take turns round by round, and the minimum is the figure least disturbed by other
processes on the cores) and the CPU allocator's peak during a step (above its level at the start of the
step: activations, messages and temporaries; parameter gradients are preallocated by the warm-up).
Every action's wall time inside those runs is recorded (``profile=True``); the fastest F, B, I
and W of each stage are the costs (isolated timings of each stage, also taken, are the fallback),
with the activation bytes one forward keeps and a ping-pong's one-way message time. The parent
feeds those costs to :func:`paddle_ext.passes.simulate_schedule` on the same lowered schedule and
reports measured and simulated step times as ratios to 1F1B, and measured vs simulated peak
activation memory. ``--split-cost`` (on by default) also times I + W against B in one process for
both split strategies.

Each rank runs with one intra-op thread (``OMP_NUM_THREADS=1``); with more ranks than cores the
ranks share cores and the measured ratios mix in the contention.
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
H, BLOCKS, ROWS = 256, 8, 32  # hidden size, blocks in the model, rows per microbatch


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

    from paddle_ext.compat.pipelining import host_memory
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
    if rank > 1:
        return 0.0
    group = pair_group(0, 1)
    t0 = time.perf_counter()
    for _ in range(reps):
        if rank == 0:
            dist.send(buf, dst=1, group=group)
            dist.recv(buf, src=1, group=group)
        else:
            dist.recv(buf, src=0, group=group)
            dist.send(buf, dst=0, group=group)
    return 1e3 * (time.perf_counter() - t0) / (2 * reps)


def rank_bench(names, m_factor: int, steps: int):
    """One rank: costs of its stages, then every schedule's step time and memory peak."""
    import paddle
    import paddle.distributed as dist
    import paddle.nn.functional as F

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
                costs[f"{p * v}:{i}"] = stage_costs(piece, needs_grad=i > 0)
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
    peaks = {name: [] for name in names}
    action_ms = {}  # "n_stages:stage" -> kind -> durations of that action inside the real runs
    for name in names:  # warm-up
        one_step(name)
    for _ in range(steps):  # rounds over all schedules: a burst of load hits every schedule alike
        for name in names:
            dist.barrier()
            t0 = time.perf_counter()
            one_step(name)
            times[name].append(time.perf_counter() - t0)
            mem = runs[name][2].last_memory
            peaks[name].append(mem["peak"] - mem["start"])
            n_stages = p * runs[name][0]
            for text, t0, t1 in runs[name][2].last_trace:
                a = Action.from_str(text)
                if a.is_compute:
                    action_ms.setdefault(f"{n_stages}:{a.stage}", {}).setdefault(a.kind.value, []).append(
                        1e3 * (t1 - t0))
    for key, kinds in action_ms.items():  # the fastest instance: least disturbed by other processes
        costs.setdefault(key, {}).update({f"run_{k}": min(v) for k, v in kinds.items()})
    results = {name: {"v": runs[name][0], "m": m, "step_ms": 1e3 * min(times[name]),
                      "step_ms_median": 1e3 * statistics.median(times[name]), "peak_bytes": max(peaks[name]),
                      "stages": runs[name][3]} for name in names}
    return {"rank": rank, "latency_ms": latency, "costs": costs, "results": results, "load": os.getloadavg()[0]}


def simulate(names, per_rank, p):
    """Simulated makespan and per-rank peak activation bytes, from the ranks' measured costs."""
    from paddle_ext.passes import Costs, add_send_recv, generate_schedule, get_schedule_info, simulate_schedule

    latency = max(r["latency_ms"] for r in per_rank)
    out = {}
    for name in names:
        v = get_schedule_info(name).default_chunks
        m = per_rank[0]["results"][name]["m"]
        stage_costs_ = {}
        for r in per_rank:
            for key, c in r["costs"].items():
                n, s = map(int, key.split(":"))
                if n == p * v:  # merge the ranks' views of a stage (V and loop place it differently)
                    merged = stage_costs_.setdefault(s, {})
                    for k, val in c.items():
                        merged[k] = min(val, merged[k]) if k.startswith("run_") and k in merged else val
        # costs as measured inside the runs (fastest instance of each action kind, mean over stages);
        # the isolated timings are the fallback
        mean = {k: statistics.mean(c.get(f"run_{k}", c[k]) for c in stage_costs_.values())
                for k in ("F", "B", "I", "W")}
        act = {s: float(c["act_bytes"]) for s, c in stage_costs_.items() if "act_bytes" in c}
        lowered = add_send_recv(generate_schedule(name, p, m, v))
        sim = simulate_schedule(lowered, Costs(mean["F"], mean["I"], mean["W"], mean["B"]), comm_latency=latency,
                                activation_bytes=act)
        out[name] = {"makespan_ms": sim.makespan, "bubble": sim.bubble_ratio,
                     "peak_act_bytes": list(sim.peak_activation_bytes), "costs": mean}
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
    for label, layer, shape in (("MLP block x4 (H=256, 32 rows)", nn.Sequential(*_model()[:4]), [ROWS, H]),
                                ("transformer block (H=256, 4x64 tokens)", TBlock(), [4, 64, H])):
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


def format_tables(runs: dict, split_rows: list) -> str:
    lines = []
    for p, (per_rank, sim) in sorted(runs.items()):
        names = list(per_rank[0]["results"])
        base_meas = max(r["results"]["1F1B"]["step_ms"] for r in per_rank)
        base_sim = sim["1F1B"]["makespan_ms"]
        c = next(iter(sim.values()))["costs"]
        lines.append(f"**{p} ranks** (load average {per_rank[0].get('load', 0):.1f} on {os.cpu_count()} cores), "
                     f"m = {per_rank[0]['results'][names[0]]['m']} microbatches of {ROWS} rows, "
                     f"{BLOCKS} blocks Linear({H},{4 * H})-GELU-Linear({4 * H},{H}); per-stage costs at v=1: "
                     f"F {c['F']:.2f} ms, B {c['B']:.2f} ms, I {c['I']:.2f} ms, W {c['W']:.2f} ms; one-way "
                     f"message {max(r['latency_ms'] for r in per_rank):.2f} ms.")
        lines.append("")
        lines.append("| schedule | v | step (ms, slowest rank) | measured / 1F1B | simulated / 1F1B | simulated bubble "
                     "| peak memory per rank, measured (MiB) | simulated activations (MiB) |")
        lines.append("|---|---|---|---|---|---|---|---|")
        for name in names:
            step = max(r["results"][name]["step_ms"] for r in per_rank)
            meas = " / ".join(f"{r['results'][name]['peak_bytes'] / 2**20:.1f}" for r in per_rank)
            simm = " / ".join(f"{b / 2**20:.1f}" for b in sim[name]["peak_act_bytes"])
            lines.append(f"| {name} | {per_rank[0]['results'][name]['v']} | {step:.1f} | {step / base_meas:.2f} | "
                         f"{sim[name]['makespan_ms'] / base_sim:.2f} | {sim[name]['bubble']:.2f} | {meas} | {simm} |")
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
    parser.add_argument("--steps", type=int, default=5, help="timed rounds over the schedules (after one warm-up)")
    parser.add_argument("--m-factor", type=int, default=4, help="microbatches = m_factor * ranks")
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
        text = format_tables(runs, data["split"])
        print(text)
        if args.write_docs:
            write_docs(text)
        return 0

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import importlib

    from paddle_ext.passes.schedules import schedule_names
    from paddle_ext.testing import run_ranks

    me = importlib.import_module("bench_pipeline")  # importable by name in the ranks
    names = args.schedules.split(",") if args.schedules else list(schedule_names())
    if "1F1B" not in names:
        names.insert(0, "1F1B")
    runs, raw = {}, {}
    for p in args.nproc or [2]:
        per_rank = run_ranks(me.rank_bench, nproc=p, args=(names, args.m_factor, args.steps), timeout=args.timeout,
                             env={"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
        sim = simulate(names, per_rank, p)
        runs[p] = (per_rank, sim)
        raw[p] = {"ranks": per_rank, "simulated": sim}
    split_rows = [] if args.no_split_cost else split_cost()
    if split_rows:
        split_rows[0]["load"] = os.getloadavg()[0]
    text = format_tables(runs, split_rows)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": raw, "split": split_rows}, indent=1, default=str))
    if args.write_docs:
        write_docs(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
