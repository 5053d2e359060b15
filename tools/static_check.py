"""Where the static simulator misses: each schedule's step against the simulator's, split into
what its jobs cost and what its hand-offs cost.

    python tools/static_check.py [--hidden 1024] [--acc 8] [--rows 4] [--steps 14]

One 2-rank launch (one job per action, ``paddle.profiler`` on after two rounds, the ranks bound
as ``bench_static.py`` binds them) steps the profile's three schedules (ZBV, IR_VPP, LoopedBFS:
``tools/static_profile.py``) and IR_FThenB, IR_1F1B and ZBH1 (the two-block stages the benchmark
also runs) one step each in turn. The simulator's costs come from the first three, as
``bench_static.py`` takes them (:func:`static_profile.costs_from`). Per schedule:

* **step**: the measured step (per rank the median of its profiled steps, the slower rank) and
  the simulated one (``simulate_static(merge=False)``: one job per action, as the launch ran);
* **jobs**: per rank and kind (F, I, W, B), the time per step the simulator charges (the stage's
  compute, the per-job cost and what the cold model adds: :func:`charged_ms`) against the time the
  profiled jobs took (:func:`kind_ms`): the cost model's error;
* **replay**: the schedule simulated with each profiled step's own job times (computes and sends;
  a receive is the hand-off model's, as the launch posted them: ahead, the data lands the
  profile's ``latency`` after its send; else after the later of its send and its receive), the
  median over the steps, against the measured span of the same steps' jobs (:func:`replay`): the
  hand-off model's error alone; and the same under the other receive model (what posting
  receives ahead gives, or what it saves: ``PADDLE_EXT_RECV_AHEAD=0`` runs without it).

docs/static_engine.md ("Ninth pass") has a run and what it showed.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "multirank"))

import static_profile as sp  # noqa: E402
from paddle_ext.passes import Costs  # noqa: E402
from paddle_ext.passes.schedule_ir import Kind  # noqa: E402
from paddle_ext.passes.simulate import simulate_schedule  # noqa: E402
from paddle_ext.passes.static.job_model import RECV_MODELS, cold_extras, simulate_static, split_costs  # noqa: E402
from paddle_ext.passes.static.jobs import rank_schedule, run_kind, uses_split  # noqa: E402

#: schedule_mode -> (the IR schedule it runs, layer meshes, chunks per rank); all five of
#: :data:`PROFILED` are the profile's (static_profile.profile), whose jobs give the costs
PLANS = {"ZBV": ("ZBV", [0, 1, 1, 0], 2), "IR_VPP": ("VPP", [0, 1, 0, 1], 2),
         "LoopedBFS": ("LoopedBFS", [0, 1, 0, 1], 2), "IR_FThenB": ("FThenB", [0, 0, 1, 1], 1),
         "IR_1F1B": ("1F1B", [0, 0, 1, 1], 1), "ZBH1": ("ZBH1", [0, 0, 1, 1], 1)}
PROFILED = ("ZBV", "IR_VPP", "LoopedBFS", "IR_FThenB", "ZBH1")
COMPUTE = (Kind.F, Kind.I, Kind.W, Kind.B)
RECEIVES = (Kind.RECV_F, Kind.RECV_B)


def kind_ms(per_rank) -> list:
    """Per rank ``{"F"|"I"|"W"|"B": ms per step}`` of the compute jobs in ``per_rank`` (each
    rank's ``job_sequences``), averaged over its steps."""
    out = []
    for steps in per_rank:
        total: dict = {}
        for _, _, jobs in steps:
            for kind, _, _, us in jobs:
                if kind in sp.KINDS:
                    total[sp.KINDS[kind]] = total.get(sp.KINDS[kind], 0.0) + us / 1000
        out.append({k: v / max(1, len(steps)) for k, v in total.items()})
    return out


def charged_ms(mode: str, prof: dict, pp: int = 2, m: int = 8) -> list:
    """Per rank ``{kind: ms per step}`` the simulator charges ``mode``'s compute actions, one job
    per action: the stage's cost of the kind the action runs as (the first stage's I in its W
    under a split: ``job_model.split_costs``), ``job``, and each cold state's extra
    (``job_model.cold_extras``)."""
    schedule, meshes, chunks = PLANS[mode]
    costs, per_stage, cold = sp.simulator_costs(prof, meshes, chunks)
    _, lowered, _ = rank_schedule(schedule, pp, m, chunks)
    split = uses_split(lowered)
    if split:   # as simulate_static runs them
        per_stage, cold = split_costs(per_stage, cold)
    added = cold_extras(lowered, split, cold)
    out = []
    for rank in sorted(lowered):
        total: dict = {}
        for a, extra in zip([a for a in lowered[rank] if a is not None], added[rank]):
            kind = run_kind(a.kind, split)
            if kind not in COMPUTE or (kind is Kind.W and not split):
                continue
            total[kind.name] = total.get(kind.name, 0.0) + per_stage[a.stage].of(kind) + costs.job + extra
        out.append(total)
    return out


def replay(mode: str, per_rank, latency: float, pp: int = 2, m: int = 8, recv: str = "rendezvous") -> list:
    """Per profiled step ``(measured ms, replayed ms)``: the span of the step's jobs over both
    ranks, and ``mode``'s schedule simulated with each of those jobs' own times (computes and
    sends; receives by the hand-off model ``recv`` with ``latency``: ``"rendezvous"`` as gloo
    runs them, the data there ``latency`` after the later of the send and the receive;
    ``"blocking"`` as receives posted ahead would run, the data there ``latency`` after its send
    and the receive returning once it is).
    Each rank must have run one job per action (``MERGE_JOBS`` off), in the schedule's order."""
    schedule, _, chunks = PLANS[mode]
    _, lowered, _ = rank_schedule(schedule, pp, m, chunks)
    out = []
    for step in range(min(len(steps) for steps in per_rank)):
        extra, first, last = {}, float("inf"), 0.0
        for rank in sorted(lowered):
            jobs = per_rank[rank][step][2]
            acts = [a for a in lowered[rank] if a is not None]
            if len(jobs) != len(acts):
                raise ValueError(f"{mode} rank {rank} step {step}: {len(jobs)} jobs for {len(acts)} actions; "
                                 "replay needs one job per action (static_passes.MERGE_JOBS = False)")
            extra[rank] = [0.0 if a.kind in RECEIVES else us / 1000 for a, (_, _, _, us) in zip(acts, jobs)]
            first = min(first, jobs[0][2])
            last = max(last, jobs[-1][2] + jobs[-1][3])
        result = simulate_schedule(lowered, Costs(0, 0, 0, 0), comm_latency=latency, blocking_sends=False,
                                   recv=recv, extra=extra)
        out.append(((last - first) / 1000, result.makespan))
    return out


def check(hidden: int, acc: int, rows: int, steps: int, env=None) -> dict:
    """Launch (module doc) and return ``{"profile": costs, mode: {"measured", "simulated",
    "charged", "ran", "replay"}}`` (ms)."""
    common = {"acc": acc, "steps": steps, "hidden": hidden, "batch": rows * acc}
    cfgs = [dict(common, schedule=mode, layer_meshes=meshes, vpp=chunks) for mode, (_, meshes, chunks) in PLANS.items()]
    zbv, sequences, comm = sp.launch_and_read(cfgs, "static_check_", timeout=900, env=env)
    prof = sp.costs_from(zbv, {mode: sequences[mode] for mode in PROFILED}, comm)
    report: dict = {"profile": prof}
    for mode in PLANS:
        schedule, meshes, chunks = PLANS[mode]
        costs, per_stage, cold = sp.simulator_costs(prof, meshes, chunks)
        simulated = simulate_static(schedule, 2, acc, chunks, costs=costs, merge=False, stage_costs=per_stage,
                                    cold=cold).makespan
        measured = max(statistics.median((hi - lo) / 1000 for lo, hi, _ in steps) for steps in sequences[mode])
        model = RECV_MODELS[prof["recv"]]
        pairs = replay(mode, sequences[mode], prof["latency"], m=acc, recv=model)
        other = replay(mode, sequences[mode], prof["latency"], m=acc,
                       recv="rendezvous" if model == "blocking" else "blocking")
        report[mode] = {"measured": measured, "simulated": simulated, "charged": charged_ms(mode, prof, m=acc),
                        "ran": kind_ms(sequences[mode]),
                        "replay": (statistics.median(a for a, _ in pairs), statistics.median(b for _, b in pairs),
                                   statistics.median(b for _, b in other))}
    return report


def table(report: dict) -> str:
    """The report as a markdown table (ms; ratios to IR_FThenB)."""
    base = report["IR_FThenB"]
    lines = ["| schedule | measured step | simulated | measured / IR_FThenB | simulated / IR_FThenB | "
             "charged / ran per step, rank 0 | rank 1 | jobs' span: measured / replayed | replayed, the other "
             "receive model |", "|---|" + "---|" * 8]
    for mode in PLANS:
        r = report[mode]
        ranks = [" ".join(f"{k} {c.get(k, 0.0):.1f}/{ran.get(k, 0.0):.1f}" for k in "FIWB"
                          if c.get(k) or ran.get(k)) for c, ran in zip(r["charged"], r["ran"])]
        lines.append(f"| {mode} | {r['measured']:.1f} | {r['simulated']:.1f} | {r['measured'] / base['measured']:.2f} | "
                     f"{r['simulated'] / base['simulated']:.2f} | {ranks[0]} | {ranks[1]} | "
                     f"{r['replay'][0]:.1f} / {r['replay'][1]:.1f} | {r['replay'][2]:.1f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--acc", type=int, default=8)
    parser.add_argument("--rows", type=int, default=4, help="rows per micro-batch")
    parser.add_argument("--steps", type=int, default=14, help="rounds; the profiler skips the first two")
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    report = check(args.hidden, args.acc, args.rows, args.steps, env=sp.MALLOC_ENV)
    print(f"2 ranks, hidden {args.hidden}, {args.acc} micro-batches of {args.rows} rows, one job per action, "
          f"profiler on; costs from {', '.join(PROFILED)}; load average {load:.2f} -> {os.getloadavg()[0]:.2f}\n")
    print(table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
