"""Profile the static Engine's jobs: what ``tools/bench_static.py`` gives the simulator.

One 2-rank launch trains the benchmark's MLP under ZBV with one job per action (no merge), with
``paddle.profiler`` on for the last steps. Paddle's executor records one event per job
(``<job type>-<micro-batch>``) and one per op, so for every job: its time, the time of the ops
inside it, and the rest, the executor's fixed cost of a job. From them:

* ``job``: the median of (job time - its ops' time) over the compute jobs;
* ``message``: the median time of a gloo send op (a receive's own work is as long; its wait is
  the simulator's business);
* ``latency``: the median time from a send op's start to the end of its receive on the other
  rank, over the messages whose receive was posted first (the profiler's clock is the
  machine's, so the two ranks' events compare);
* per block (ZBV runs one block per stage): the mean ``F``, ``I`` and ``W`` job times less
  ``job`` (the mean, not the median: the times are skewed, a few jobs run much longer on a
  shared core, and the step pays for them all). A schedule's stage costs are the sums over its blocks (:func:`stage_costs`).

    python tools/static_profile.py [--hidden 1024] [--acc 8]     # prints the figures as JSON
"""
from __future__ import annotations

import argparse
import bisect
import json
import os
import re
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "multirank"))

#: ZBV on 2 ranks: (rank, chunk) -> the block that stage runs (layer meshes [0, 1, 1, 0])
V_BLOCK = {(0, 0): 0, (1, 0): 1, (1, 1): 2, (0, 1): 3}
_JOB = re.compile(r"^([a-z_]+?)(\d+)-(\d+)\[")
_OP = re.compile(r"^(pd_op|custom_op)\.[a-z_0-9]+\[")


def profile_rank(cfg: dict, out_dir: str) -> dict:
    """Rank function: train ``cfg`` with one job per action, profile the steps after the second,
    write this rank's Chrome trace to ``out_dir``; returns its path and the step times."""
    import paddle.distributed as dist
    import paddle.profiler as profiler

    import paddle_ext
    import paddle_ext.passes.static.passes as static_passes
    import static_ranks as sr

    dist.init_parallel_env()
    paddle_ext.install()
    static_passes.install_static()
    static_passes.MERGE_JOBS = False
    net, opt, loader, loss_fn, strategy = sr._build(cfg)
    dist.barrier()
    dm = dist.to_static(net, loader, loss_fn, opt, strategy=strategy)
    dm.train()
    prof, times = None, []
    for step, (x, y) in enumerate(loader()):
        if step >= cfg["steps"]:
            break
        if step == 2:
            prof = profiler.Profiler(targets=[profiler.ProfilerTarget.CPU])
            prof.start()
        start = time.perf_counter()
        dm(x, y)
        times.append(time.perf_counter() - start)
    prof.stop()
    path = os.path.join(out_dir, f"trace{dist.get_rank()}.json")
    prof.export(path, format="json")
    return {"trace": path, "step_seconds": times}


def job_times(trace_path: str) -> dict:
    """``{(kind, chunk): [(job us, ops us), ...]}`` and ``"send"``: [send op us] from a trace."""
    with open(trace_path, encoding="utf-8") as f:
        data = json.load(f)
    events = [e for e in (data["traceEvents"] if isinstance(data, dict) else data) if e.get("ph") == "X"]
    ops = sorted((e for e in events if _OP.match(e["name"])), key=lambda e: e["ts"])
    starts = [o["ts"] for o in ops]
    out: dict = {"send": [o["dur"] for o in ops if "gloo_send" in o["name"]], "messages": {}}
    for e in sorted(events, key=lambda e: e["ts"]):
        found = _JOB.match(e["name"])
        if not found:
            continue
        lo, hi = bisect.bisect_left(starts, e["ts"]), bisect.bisect_right(starts, e["ts"] + e["dur"])
        inside = sum(o["dur"] for o in ops[lo:hi])
        out.setdefault((found.group(1), int(found.group(2))), []).append((e["dur"], inside))
        gloo = [o for o in ops[lo:hi] if "gloo_" in o["name"]]
        if gloo and found.group(1).startswith(("send_", "recv_")):  # (kind, micro-batch) -> op (start, end)
            out["messages"].setdefault((found.group(1), int(found.group(3))), []).append(
                (gloo[0]["ts"], gloo[0]["ts"] + gloo[0]["dur"]))
    return out


def latencies(traces) -> list:
    """Send start -> receive end (us) of every message whose receive was posted first; on 2 ranks
    a rank's ``send_X`` of a micro-batch is the other rank's ``recv_X`` of it, in order."""
    out = []
    for a, b in ((0, 1), (1, 0)):
        for (kind, mb), sends in traces[a]["messages"].items():
            if not kind.startswith("send_"):
                continue
            recvs = traces[b]["messages"].get(("recv_" + kind[len("send_"):], mb), [])
            out += [r_end - s_start for (s_start, _), (r_start, r_end) in zip(sends, recvs) if r_start < s_start]
    return out


def costs_from(traces) -> dict:
    """The figures (module doc) in milliseconds from the two ranks' :func:`job_times`."""
    compute = ("forward", "backward_b", "backward_w")
    over = [job - ops for t in traces for key, v in t.items() if isinstance(key, tuple) and key[0] in compute
            for job, ops in v]
    job = statistics.median(over) / 1000
    blocks = {}
    for rank, t in enumerate(traces):
        for chunk in (0, 1):
            fig = [statistics.mean(j for j, _ in t.get((kind, chunk), [(0.0, 0.0)])) / 1000 - job
                   for kind in compute]
            blocks[V_BLOCK[(rank, chunk)]] = [max(0.0, x) for x in fig]
    sends = [d for t in traces for d in t["send"]]
    waits = latencies(traces)
    return {"job": job, "message": statistics.median(sends) / 1000 if sends else 0.0,
            "latency": statistics.median(waits) / 1000 if waits else 0.0, "blocks": blocks}


def stage_costs(blocks: dict, layer_meshes, chunks: int) -> dict:
    """Per pipeline stage of a plan (its blocks ``layer_meshes`` and ``chunks`` per rank), the
    ``(F, I, W)`` sums of its blocks' costs, as the simulator's stage numbering has them."""
    from paddle_ext.passes.stage_placement import stage_to_rank

    n_ranks = max(layer_meshes) + 1
    n_stages = n_ranks * chunks
    placement = "v" if chunks == 2 and layer_meshes[0] == layer_meshes[-1] else "loop"
    per_stage = len(layer_meshes) // n_stages
    out = {}
    for s in range(n_stages):
        picked = list(range(s * per_stage, (s + 1) * per_stage))
        if any(layer_meshes[b] != stage_to_rank(s, n_ranks, placement) for b in picked):
            raise ValueError(f"layer meshes {layer_meshes} do not put stage {s}'s blocks on its rank")
        out[s] = tuple(sum(blocks[b][k] for b in picked) for k in range(3))
    return out


def profile(hidden: int, acc: int, steps: int = 6, timeout: int = 600) -> dict:
    """Launch the profile (module doc) and return :func:`costs_from`'s figures."""
    from paddle_ext.launcher import run_ranks

    out_dir = tempfile.mkdtemp(prefix="static_profile_")
    cfg = {"schedule": "ZBV", "layer_meshes": [0, 1, 1, 0], "acc": acc, "steps": steps, "vpp": 2,
           "hidden": hidden, "batch": 4 * acc}
    results = run_ranks(profile_rank, nproc=2, args=(cfg, out_dir), timeout=timeout, pin_cpus=True,
                        log_dir=os.path.join(out_dir, "logs"))
    return costs_from([job_times(r["trace"]) for r in results])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--acc", type=int, default=8)
    args = parser.parse_args(argv)
    print(json.dumps(profile(args.hidden, args.acc), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
