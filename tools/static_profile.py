"""Profile the static Engine's jobs: what ``tools/bench_static.py`` gives the simulator.

One 2-rank launch trains the benchmark's MLP with one job per action (no merge) under five
schedules, one step of each in turn (so that a change in the machine's other load hits all alike:
the split backward of one and the full backward of the others are compared from the same
seconds), ``paddle.profiler`` on for the rounds after the second: ZBV (backward split
into I and W; layer meshes [0, 1, 1, 0]), paddle-ext's VPP (``IR_VPP``, full backward; layer
meshes [0, 1, 0, 1]) and LoopedBFS (the same layers, each chunk's forwards, then its backwards,
back to back), which run one block per stage, and IR_FThenB and ZBH1 on two blocks per stage
(layer meshes [0, 0, 1, 1], one chunk), measured as whole stages (``stages``, below). Paddle's executor records one event per job
(``<job type>-<micro-batch>``) and one per op, so for every job: its time, the time of the ops
inside it, and the rest, the executor's fixed cost of a job. From them:

* ``job``: the median of (job time - its ops' time) over ZBV's compute jobs;
* ``message``: the median time of a gloo send op (a receive's own work is as long; its wait is
  the simulator's business);
* ``latency``: messages that land without their receive op (``recv`` ``"ahead"``: socket
  channels, the default, or gloo's with ``PADDLE_EXT_RECV_AHEAD``), the mean time from a message's send op starting to the end of its receive, over ZBV's
  messages whose receive op was waiting when the send started; else (``"rendezvous"``) the mean
  time from the later of a message's send and receive ops starting to the end of its receive,
  over ZBV's messages (the two ranks' n-th send and receive on one direction
  are one message; the profiler's clock is the machine's, so the two ranks' events compare).
  The mean, not the median: the hand-off runs on paddle-ext's send thread and gloo's I/O thread,
  which under ``--binding process`` share the sender's core with its compute, and waits for them
  (up to a scheduler slice) are a long tail the step pays in full; ``latency_median`` is the fast
  case alone;
* ``receive``: with receives posted ahead, the mean time of a receive op whose message had landed
  (asked for 1 ms or more after its send: ``profile_static.landed_receives``), 0 otherwise;
* per block: the mean ``F``, ``I``, ``W`` and full backward ``B`` of its *warm* jobs (the rank's
  job before touched the same state of the same block: ``job_model.cold_states``), each less
  ``job`` (means, not medians: the times are skewed, a few jobs run much longer on a shared
  core, and the step pays for them all), and ``cold``, per state (weights, gradients) and block,
  what a job costs more when that state is cold (:func:`warm_and_cold`). ZBV gives ``F``, ``I``
  and ``W``, IR_VPP and LoopedBFS the full backward (after a forward, after another block's job,
  and in LoopedBFS after a backward of its block: both states warm, as FThenB runs it), which is
  not ``I + W`` (two matmuls in one ``matmul_grad`` op, no deferred gradient kept alive); ``W``
  is one mean, order-free (its cold and warm times do not differ in the profiles). A schedule's
  stage costs are the sums over its blocks (:func:`stage_costs`);
* ``stages``: for the layout [0, 0, 1, 1] (one chunk; :func:`layout_key`), each stage's warm
  ``F``, ``I``, ``W``, ``B`` and ``cold`` extras as for a block, from IR_FThenB's and ZBH1's jobs:
  a plan on that layout takes them instead of its blocks' sums (:func:`simulator_costs`). A
  two-block job is not the sum of two one-block jobs (a stage's forward ran 1.96 ms where its
  blocks' sum was 2.17), and the one-block jobs were measured in two-chunk schedules, which move
  two to three times the messages: the communication threads' CPU that lands inside a job is in
  its time (docs/static_engine.md, "Eleventh pass");
* ``comm``: the communication threads' CPU per message a rank sends or receives
  (``profile_static.comm_ms_per_message`` over ZBV's profiled steps), reported, not charged: the
  jobs' times already hold the part of it that runs while the rank computes;
* ``step``: the Engine's fixed cost per step outside its micro-batch jobs (feeding the batch, the
  optimizer, fetching the loss): ``profile_static.step_overhead_ms`` over every profiled step.

    python tools/static_profile.py [--hidden 1024] [--acc 8] [--binding compute]   # the figures as JSON

``--binding`` is ``run_ranks``'s ``pin_cpus``: ``compute`` (each rank's compute on
its own CPU, the communication threads free) or ``process`` (the default: every thread of a rank
on its CPU).
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

# the trace readers ``paddle-ext profile --static`` uses for the static Engine's runtime costs
from paddle_ext.plan import profile_static  # noqa: E402
from paddle_ext.plan.profile_static import (comm_ms_per_message, handoffs, job_overhead_ms,  # noqa: E402,F401
                                            job_sequences, job_times, landed_receives, message_costs_ms,
                                            recv_mode, step_overhead_ms, window)

#: glibc malloc settings for the ranks (``--glibc-default`` in bench_static.py drops them): one arena,
#: and freed memory kept. Paddle's executor allocates each micro-batch's temporaries (a 4 MB
#: weight gradient at hidden 1024) from its worker threads' malloc arenas, which hand freed
#: memory back to the kernel: every step then faults its pages in anew (5 000-16 000 minor faults
#: per step per rank, 10-30% of the step). With these the faults are gone after the first step.
MALLOC_ENV = {"MALLOC_ARENA_MAX": "1", "MALLOC_MMAP_THRESHOLD_": str(1 << 30), "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
              "MALLOC_TOP_PAD_": str(1 << 28)}
#: the profiled schedules on 2 ranks: (rank, chunk) -> the block that stage runs
V_BLOCK = {(0, 0): 0, (1, 0): 1, (1, 1): 2, (0, 1): 3}  # ZBV, layer meshes [0, 1, 1, 0]
LOOP_BLOCK = {(0, 0): 0, (1, 0): 1, (0, 1): 2, (1, 1): 3}  # IR_VPP, layer meshes [0, 1, 0, 1]
#: the profiled one-block-per-stage schedules -> their (rank, chunk) -> block
BLOCK_OF = {"ZBV": V_BLOCK, "IR_VPP": LOOP_BLOCK, "LoopedBFS": LOOP_BLOCK}
#: the profiled two-block stages (layer meshes [0, 0, 1, 1], one chunk), measured as whole stages:
#: a stage's job is not the sum of its blocks' one-block jobs (docs/static_engine.md, "Eleventh
#: pass"); (rank, 0) -> its stage
TWO_BLOCK_MESHES = [0, 0, 1, 1]
TWO_BLOCK = ("IR_FThenB", "ZBH1")
STAGE_OF = {(0, 0): 0, (1, 0): 1}


def profile_rank(cfgs, out_dir: str) -> list:
    """Rank function: :func:`paddle_ext.plan.profile_static.profile_rank` on the benchmark's own
    models (``static_ranks._build``: what ``bench_static.py`` measures)."""
    import static_ranks as sr

    return profile_static.profile_rank(cfgs, out_dir, build=sr._build)


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


def costs_from(traces, sequences, comm: float = 0.0) -> dict:
    """The figures (module doc) in milliseconds from the two ranks' :func:`job_times` under ZBV
    (``traces``: ``job``, ``message``, ``latency``), ``{"ZBV": per-rank job_sequences,
    "IR_VPP": ..., "LoopedBFS": ..., "IR_FThenB": ..., "ZBH1": ...}`` (``sequences``: ``blocks``
    and ``cold`` from the first three, ``stages`` from the two-block stages of the last two when
    given, ``step``) and the communication threads' CPU per message (``comm``)."""
    runtime = message_costs_ms(traces)
    job = runtime["job"]
    first = latencies(traces)
    blocks, cold = warm_and_cold([(BLOCK_OF[k], v) for k, v in sequences.items() if k in BLOCK_OF], job)
    by_stage = [(STAGE_OF, v) for k, v in sequences.items() if k in TWO_BLOCK]
    stages = {}
    if by_stage:
        warm, stage_cold = warm_and_cold(by_stage, job)
        stages[layout_key(TWO_BLOCK_MESHES, 1)] = {"warm": warm, "cold": stage_cold}
    return {**runtime, "comm": comm, "latency_median": statistics.median(first) / 1000 if first else 0.0,
            "blocks": blocks, "cold": cold, "stages": stages,
            "step": step_overhead_ms([seq for per_rank in sequences.values() for seq in per_rank])}


def _by_int(figures: dict) -> dict:
    """``{block or stage: figures}`` keyed by int (a profile read back from JSON has strings)."""
    return {int(k): v for k, v in figures.items()}


def layout_key(layer_meshes, chunks: int) -> str:
    """How ``costs_from``'s ``stages`` names a plan's layout: ``"0,0,1,1/1"``."""
    return ",".join(map(str, layer_meshes)) + f"/{chunks}"


#: a profiled job's kind as the simulator names it
KINDS = {"forward": "F", "backward_b": "I", "backward_w": "W", "backward": "B"}
#: per kind, its states cold from none to all in the order each is added (``job_model.cold_states``);
#: W is order-free: its cold and warm times do not differ in the profiles
LEVELS = {"F": ((), ("weights",)), "I": ((), ("weights",)), "W": ((),),
          "B": ((), ("gradients",), ("gradients", "weights"))}
#: a job shorter than this (ms) is empty (stage 0's input backward): no ratio is taken from it
EMPTY_MS = 0.05


def warm_and_cold(profiled, job: float) -> tuple:
    """``(blocks, cold)``: per block the warm ``[F, I, W, B]`` (ms, less ``job``), and ``cold =
    {state: {block: [F, I, W, B]}}`` what a job costs more when that state of its block is cold,
    from ``[(the block of each (rank, chunk), per-rank job_sequences), ...]`` of the profiled
    schedules (every job one action). The blocks are alike, so each kind's levels
    (:data:`LEVELS`) are ratios to its warm level: the ratio of the two means within each block
    that ran both (not an empty job, as stage 0's input backward), averaged over those blocks by
    their jobs at the level. A block's warm cost is the mean of its jobs, each divided by its
    level's ratio; a state's extra is that times the step in ratio it adds (split evenly when a
    step adds two; never below 0). A level no block ran beside the warm one adds nothing."""
    from paddle_ext.passes.schedule_ir import Action, Kind
    from paddle_ext.passes.static.job_model import cold_states

    seen: dict = {}
    for block_of, per_rank in profiled:
        for rank, steps in enumerate(per_rank):
            for _, _, jobs in steps:
                comp = [(KINDS[k], c, us / 1000) for k, c, _, us in jobs if k in KINDS]
                acts = [Action(c, Kind[kind], 0) for kind, c, _ in comp]
                for (kind, c, ms), states in zip(comp, cold_states(acts, split=True)):
                    level = () if kind == "W" else tuple(sorted(states))
                    seen.setdefault((kind, block_of[(rank, c)], level), []).append(max(0.0, ms - job))
    blocks_seen = sorted({b for _, b, _ in seen})
    blocks = {b: [0.0] * 4 for b in blocks_seen}
    cold: dict = {"weights": {b: [0.0] * 4 for b in blocks_seen}, "gradients": {b: [0.0] * 4 for b in blocks_seen}}
    for i, kind in enumerate("FIWB"):
        mean = {(b, lv): statistics.mean(seen[(kind, b, lv)]) for b in blocks_seen for lv in LEVELS[kind]
                if (kind, b, lv) in seen}
        base = LEVELS[kind][0]
        ratio = {base: 1.0}
        for lv in LEVELS[kind][1:]:   # within each block that ran both, weighted by its jobs at lv
            pairs = [(len(seen[(kind, b, lv)]), mean[(b, lv)] / mean[(b, base)]) for b in blocks_seen
                     if (b, lv) in mean and mean.get((b, base), 0.0) >= EMPTY_MS]
            if pairs:
                ratio[lv] = sum(n * r for n, r in pairs) / sum(n for n, _ in pairs)
        levels = [lv for lv in LEVELS[kind] if lv in ratio]
        for b in blocks_seen:
            normal = [x / ratio[lv] for lv in levels for x in seen.get((kind, b, lv), [])]
            if not normal:
                continue
            blocks[b][i] = warm = statistics.mean(normal)
            for lower, upper in zip(levels, levels[1:]):
                added = sorted(set(upper) - set(lower))
                for state in added:
                    cold[state][b][i] = max(0.0, warm * (ratio[upper] - ratio[lower])) / len(added)
    return blocks, cold


def stage_costs(blocks: dict, layer_meshes, chunks: int) -> dict:
    """Per pipeline stage of a plan (its blocks ``layer_meshes`` and ``chunks`` per rank), the
    ``(F, I, W, B)`` sums of its blocks' costs (``B`` = ``I + W`` for a block profiled without
    it), as the simulator's stage numbering has them; ``Costs(*stage)`` is the stage's cost.
    (Under a split the simulator moves the first stage's ``I`` into its ``W``:
    ``job_model.first_stage_in_w``.)"""
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
        full = [list(blocks[b]) + [blocks[b][1] + blocks[b][2]] * (len(blocks[b]) < 4) for b in picked]
        out[s] = tuple(sum(fig[k] for fig in full) for k in range(4))
    return out


def simulator_costs(profile: dict, layer_meshes, chunks: int) -> tuple:
    """``(StaticCosts, {stage: Costs}, {stage: {state: Costs}})`` for ``simulate_static`` from a
    profile (:func:`costs_from`) for a plan with these layer meshes and chunks per rank: the
    runtime's costs, each stage's warm compute and what each cold state adds (:func:`stage_costs`)."""
    from paddle_ext.passes import Costs
    from paddle_ext.passes.static.job_model import StaticCosts

    measured = profile.get("stages", {}).get(layout_key(layer_meshes, chunks))
    if measured:   # the layout's stages were profiled whole: their own costs
        by_stage, warm, cold_by_state = _by_int, measured["warm"], measured["cold"]
    else:          # else each stage sums its blocks'
        def by_stage(figures):
            return stage_costs(_by_int(figures), layer_meshes, chunks)

        warm, cold_by_state = profile["blocks"], profile.get("cold", {})
    per_stage = {s: Costs(*fiw) for s, fiw in by_stage(warm).items()}
    cold: dict = {}
    for state, figures in cold_by_state.items():
        for s, fiw in by_stage(figures).items():
            cold.setdefault(s, {})[state] = Costs(*fiw)
    costs = StaticCosts(1.0, 1.0, 1.0, job=profile["job"], message=profile["message"], latency=profile["latency"],
                        step=profile.get("step", 0.0), recv=profile.get("recv", "rendezvous"),
                        receive=profile.get("receive", 0.0))
    return costs, per_stage, cold


#: ``--binding`` -> run_ranks's pin_cpus
PIN = {"compute": "compute", "process": True, "none": False}


#: rounds of the profiled schedules (the profiler skips the first two): the cold levels are
#: ratios of means of skewed job times, and with 8 profiled rounds the split of a full backward's
#: cold cost between its weights and its gradients moved from launch to launch (gradients 0.0,
#: 0.18, 0.63 ms; weights 0.5, 0.12, 0.0 in three launches), with 28 it held (gradients 0.10-0.14,
#: weights 0.05-0.17): docs/static_engine.md, "Ninth pass"
PROFILE_STEPS = 30


def profile(hidden: int, acc: int, steps: int = PROFILE_STEPS, timeout: int = 600, env=None,
            binding: str = "process", rows: int = 4) -> dict:
    """Launch the profile (module doc): ``steps`` rounds, ``acc`` micro-batches of ``rows`` rows,
    the ranks' environment plus ``env``, each rank bound as ``binding`` says (:data:`PIN`), and
    return :func:`costs_from`'s figures."""
    common = {"acc": acc, "steps": steps, "vpp": 2, "hidden": hidden, "batch": rows * acc}
    cfgs = [dict(common, schedule="ZBV", layer_meshes=[0, 1, 1, 0]),
            dict(common, schedule="IR_VPP", layer_meshes=[0, 1, 0, 1]),
            dict(common, schedule="LoopedBFS", layer_meshes=[0, 1, 0, 1]),
            *[dict(common, schedule=mode, layer_meshes=TWO_BLOCK_MESHES, vpp=1) for mode in TWO_BLOCK]]
    return costs_from(*launch_and_read(cfgs, "static_profile_", timeout=timeout, env=env, binding=binding))


def launch_and_read(cfgs, prefix: str, timeout: int, env=None, binding: str = "process") -> tuple:
    """Launch :func:`profile_rank` on 2 ranks for ``cfgs`` (the first one ZBV) in a new
    directory named ``prefix``..., ranks bound as ``binding`` says, and read the traces:
    ``(ZBV's per-rank job_times, {schedule: per-rank job_sequences}, ZBV's communication-thread
    CPU per message)``, as :func:`costs_from` takes them."""
    from paddle_ext.launcher import run_ranks

    import static_profile as me  # importable by module name in the ranks

    out_dir = tempfile.mkdtemp(prefix=prefix)
    results = run_ranks(me.profile_rank, nproc=2, args=(cfgs, out_dir), timeout=timeout, pin_cpus=PIN[binding],
                        env=env, log_dir=os.path.join(out_dir, "logs"))
    traces = [job_times(r[0]["trace"], r[0]["window"]) for r in results]
    return (traces, {cfg["schedule"]: [job_sequences(r[i]["trace"], r[i]["window"]) for r in results]
                     for i, cfg in enumerate(cfgs)}, comm_ms_per_message([r[0] for r in results], traces))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--acc", type=int, default=8)
    parser.add_argument("--rows", type=int, default=4, help="rows per micro-batch")
    parser.add_argument("--glibc-default", action="store_true", help="run the ranks without MALLOC_ENV")
    parser.add_argument("--binding", choices=sorted(PIN), default="process",
                        help="compute: the ranks' compute on one CPU each, comm threads free; process: whole ranks; none: unbound")
    args = parser.parse_args(argv)
    print(json.dumps(profile(args.hidden, args.acc, env=None if args.glibc_default else MALLOC_ENV,
                             binding=args.binding, rows=args.rows), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
