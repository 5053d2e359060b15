"""Measure the static Engine's runtime costs: a profile's ``static_engine`` section (an adapter:
imports Paddle, launches two ranks).

One 2-rank launch trains a four-block MLP (``[b, h] @ [h, h]`` and a ReLU per block, SGD) with
``dist.to_static`` under paddle-ext's ZBV pass (layer meshes ``[0, 1, 1, 0]``: the V, backward
split into I and W, every action a job of its own), ``paddle.profiler`` on from the third step.
Paddle's executor records one event per job (``<job type><chunk>-<micro-batch>``) and one per op;
from the two ranks' traces (:func:`job_times`, :func:`handoffs`):

* ``job_s``: the median of (a compute job's time - its ops' time), the executor's fixed cost;
* ``message_s``: the median time of a gloo send op (the copy and hand-off to the send thread);
* ``latency_s``: the mean time from the later of a message's send and receive ops starting to the
  end of its receive (the mean: the hand-off runs on a send thread and gloo's I/O thread, which
  share the sender's core with its compute, and their waits are a long tail the step pays); with
  receives posted ahead (``recv`` ``"ahead"``, the default) from the send's start, over the
  messages whose receive op waited (:func:`handoffs`);
* ``recv``: how the receives were posted (:func:`recv_mode`), so the simulator models them alike;
* ``receive_s``: posted ahead, the mean time of a receive op whose message had landed
  (:func:`landed_receives`; 0 with ``"rendezvous"``, where that work is inside ``latency_s``).

:mod:`.static_engine_cost` turns them into the simulator's
:class:`~paddle_ext.passes.static.job_model.StaticCosts`. ``tools/static_profile.py`` reads the
same traces for the benchmark's per-block costs.
"""
from __future__ import annotations

import bisect
import functools
import json
import os
import re
import statistics
import tempfile
import time

import numpy as np
import paddle
import paddle.distributed as dist
import paddle.nn.functional as F
import paddle.profiler as profiler

from .. import install
from ..compat.ports import p2p_sockets
from ..compat.ports.static_collectives import recv_ahead
from ..launcher import run_ranks
from ..passes.static import passes as static_passes

_JOB = re.compile(r"^([a-z_]+?)(\d+)-(\d+)\[")
_OP = re.compile(r"^(pd_op|custom_op)\.[a-z_0-9]+\[")
COMPUTE_JOBS = ("forward", "backward_b", "backward_w")
#: the profiled model's hidden size, micro-batches per step and steps (the profiler skips the first two)
DEFAULTS = {"hidden": 256, "acc": 8, "steps": 8}


def window(cfg) -> str:
    """The name of the profiler event around each step of config ``cfg``."""
    return f"profiled_step:{cfg['schedule']}"


def build_mlp(cfg):
    """``(net, optimizer, loader, loss_fn, strategy)`` of the profiled MLP on this rank: blocks on
    the meshes ``cfg["layer_meshes"]`` (1-D meshes ``[rank]``), the pipeline strategy of
    ``cfg["schedule"]`` with ``cfg["acc"]`` micro-batches of 4 samples and ``cfg["vpp"]`` chunks."""

    h, meshes_of, acc = cfg["hidden"], cfg["layer_meshes"], cfg["acc"]
    meshes = [dist.ProcessMesh([s], dim_names=["dp"]) for s in range(max(meshes_of) + 1)]
    rng = np.random.default_rng(0)

    class Block(paddle.nn.Layer):  # the name vpp_seg_method cuts at
        def __init__(self, mesh):
            super().__init__()
            init = paddle.nn.initializer.Assign((rng.standard_normal((h, h)) / np.sqrt(h)).astype("float32"))
            self.w = dist.shard_tensor(self.create_parameter([h, h], default_initializer=init), mesh,
                                       [dist.Replicate()])

        def forward(self, x):
            return F.relu(paddle.matmul(x, self.w))

    class Net(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.blocks = paddle.nn.LayerList([Block(meshes[s]) for s in meshes_of])

        def forward(self, x):
            for i, block in enumerate(self.blocks):
                if i and meshes_of[i] != meshes_of[i - 1]:
                    x = dist.reshard(x, meshes[meshes_of[i]], [dist.Replicate()])
                x = block(x)
            return x

    batch = 4 * acc
    xs = rng.standard_normal((cfg["steps"] * batch, h)).astype("float32")
    ys = rng.standard_normal((cfg["steps"] * batch, h)).astype("float32")

    net = Net()
    opt = paddle.optimizer.SGD(learning_rate=1e-3, parameters=net.parameters())
    first, last = meshes[meshes_of[0]], meshes[meshes_of[-1]]
    data = paddle.io.TensorDataset([paddle.to_tensor(xs), paddle.to_tensor(ys)])
    loader = dist.shard_dataloader(paddle.io.DataLoader(data, batch_size=batch, shuffle=False),
                                   meshes=[first, last] if first != last else [first], shard_dims="dp")
    strategy = dist.Strategy()
    strategy.pipeline.enable = True
    strategy.pipeline.schedule_mode = cfg["schedule"]
    strategy.pipeline.accumulate_steps = acc
    strategy.pipeline.micro_batch_size = batch // acc
    strategy.pipeline.pp_degree = len(meshes)
    strategy.pipeline.vpp_degree = cfg["vpp"]
    if cfg["vpp"] > 1:
        strategy.pipeline.vpp_seg_method = "Block"
    return net, opt, loader, F.mse_loss, strategy


def profile_rank(cfgs, out_dir: str, build=build_mlp) -> list:
    """Rank function: ``build(cfg)`` each of ``cfgs``' models (one job per action), then step them
    in turn (one step of each per round, after a barrier: a burst of other load hits every
    schedule alike), ``paddle.profiler`` on from the third round, each step inside a profiler
    event named :func:`window`; write this rank's Chrome trace to ``out_dir``; per config the
    trace's path, its window's name and the step times."""
    dist.init_parallel_env()
    install(static_engine=True)
    static_passes.MERGE_JOBS = False  # one job per action: each job's fixed cost is seen apart
    models = []
    for cfg in cfgs:
        net, opt, loader, loss_fn, strategy = build(cfg)
        dist.barrier()
        dm = dist.to_static(net, loader, loss_fn, opt, strategy=strategy)
        dm.train()
        models.append((dm, [b for _, b in zip(range(cfg["steps"]), loader())], []))
    prof = profiler.Profiler(targets=[profiler.ProfilerTarget.CPU])
    comm_ns = [0] * len(cfgs)   # per config, its profiled steps' communication-thread CPU
    for step in range(max(cfg["steps"] for cfg in cfgs)):
        if step == 2:
            prof.start()
        for i, (cfg, (dm, batches, times)) in enumerate(zip(cfgs, models)):
            x, y = batches[step % len(batches)]
            dist.barrier()
            before = comm_cpu_ns()
            start = time.perf_counter()
            with profiler.RecordEvent(window(cfg)):
                dm(x, y)
            times.append(time.perf_counter() - start)
            comm_ns[i] += (comm_cpu_ns() - before) if step >= 2 else 0
    prof.stop()
    path = os.path.join(out_dir, f"trace_{dist.get_rank()}.json")
    prof.export(path, format="json")
    return [{"trace": path, "window": window(cfg), "step_seconds": times, "comm_ns": ns}
            for cfg, (_, _, times), ns in zip(cfgs, models, comm_ns)]


#: how paddle-ext names a rank's communication threads: the channels' ``pe_gloo_send`` and
#: ``pe_gloo_recv`` (gloo_ops.cc), gloo's I/O threads ``pe_gloo_io`` (static_collectives)
COMM_THREAD_PREFIX = "pe_gloo_"


def comm_cpu_ns() -> int:
    """The CPU time (ns) this process's communication threads (:data:`COMM_THREAD_PREFIX`) have
    run so far, from the kernel's per-thread ``schedstat``; 0 where there is none (not Linux)."""
    total = 0
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return 0
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if not f.read().startswith(COMM_THREAD_PREFIX):
                    continue
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):   # the thread ended meanwhile
            continue
    return total


def comm_ms_per_message(results, traces) -> float:
    """The communication threads' CPU (ms) per message a rank sends or receives: per rank, the
    ``comm_ns`` :func:`profile_rank` measured over its profiled steps over the gloo sends and
    receives its trace (:func:`job_times`, the same steps) holds, averaged over the ranks."""
    per_rank = [r["comm_ns"] / 1e6 / (len(t["send"]) + len(t["gloo_recv"])) for r, t in zip(results, traces)
                if len(t["send"]) + len(t["gloo_recv"])]
    return statistics.mean(per_rank) if per_rank else 0.0


def _complete_events(trace_path: str) -> list:
    """The complete (``"ph": "X"``) events of a Chrome trace file (read once per version of the
    file: :func:`job_times` and :func:`job_sequences` read the same two ranks' traces in turn)."""
    info = os.stat(trace_path)
    return _read_events(trace_path, info.st_mtime_ns, info.st_size)


@functools.lru_cache(maxsize=2)
def _read_events(trace_path: str, mtime_ns: int, size: int) -> list:
    with open(trace_path, encoding="utf-8") as f:
        data = json.load(f)
    return [e for e in (data["traceEvents"] if isinstance(data, dict) else data) if e.get("ph") == "X"]


def _spans(events, name: str) -> list:
    """``(start, end)`` us of the events called ``name`` (the profiled steps), in order."""
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["name"].split("[")[0] == name)
    if not spans:
        raise ValueError(f"no profiler event {name!r} in the trace: the steps were not profiled")
    return spans


def _in_windows(events, name: str) -> list:
    """The events that start inside an event called ``name`` (all of them when ``name`` is None)."""
    if name is None:
        return events
    spans = _spans(events, name)
    starts = [lo for lo, _ in spans]
    out = []
    for e in events:
        i = bisect.bisect_right(starts, e["ts"]) - 1
        if i >= 0 and e["ts"] <= spans[i][1]:
            out.append(e)
    return out


def job_times(trace_path: str, name: str = None) -> dict:
    """``{(job kind, chunk): [(job us, its ops' us), ...]}``, ``"send"``: [gloo send op us],
    ``"gloo_send"``/``"gloo_recv"``: their ``(start, end)`` us and ``"messages"``: ``{(send_X or
    recv_X, micro-batch): [(start, end)]}`` from a trace, from the steps inside the profiler
    events called ``name`` (:func:`window`) when given."""
    events = _in_windows(_complete_events(trace_path), name)
    ops = sorted((e for e in events if _OP.match(e["name"])), key=lambda e: e["ts"])
    starts = [o["ts"] for o in ops]
    out: dict = {"send": [o["dur"] for o in ops if "gloo_send" in o["name"]], "messages": {},
                 "gloo_send": [(o["ts"], o["ts"] + o["dur"]) for o in ops if "gloo_send" in o["name"]],
                 "gloo_recv": [(o["ts"], o["ts"] + o["dur"]) for o in ops if "gloo_recv" in o["name"]]}
    for e in sorted(events, key=lambda e: e["ts"]):
        found = _JOB.match(e["name"])
        if not found:
            continue
        lo, hi = bisect.bisect_left(starts, e["ts"]), bisect.bisect_right(starts, e["ts"] + e["dur"])
        inside = sum(o["dur"] for o in ops[lo:hi])
        out.setdefault((found.group(1), int(found.group(2))), []).append((e["dur"], inside))
        gloo = [o for o in ops[lo:hi] if "gloo_" in o["name"]]
        if gloo and found.group(1).startswith(("send_", "recv_")):
            out["messages"].setdefault((found.group(1), int(found.group(3))), []).append(
                (gloo[0]["ts"], gloo[0]["ts"] + gloo[0]["dur"]))
    return out


def job_sequences(trace_path: str, name: str) -> list:
    """Per profiled step (each profiler event called ``name``, :func:`window`): ``(step start us,
    step end us, [(job kind, chunk, start us, us), ...])``, the step's micro-batch jobs (compute
    and messages) in the order they ran."""
    events = _complete_events(trace_path)
    steps = _spans(events, name)
    jobs = sorted((e["ts"], e["dur"], found.group(1), int(found.group(2))) for e in events
                  for found in [_JOB.match(e["name"])] if found)
    return [(lo, hi, [(kind, chunk, ts, dur) for ts, dur, kind, chunk in jobs if lo <= ts <= hi]) for lo, hi in steps]


def step_overhead_ms(sequences) -> float:
    """The median, over the profiled steps of every rank's :func:`job_sequences`, of a step's time
    outside the span of its micro-batch jobs (feeding the batch, the optimizer, fetching the
    loss): the Engine's fixed cost per step, in milliseconds."""
    outside = [(hi - lo) - (jobs[-1][2] + jobs[-1][3] - jobs[0][2]) for seq in sequences for lo, hi, jobs in seq if jobs]
    if not outside:
        raise ValueError("the profiled steps ran no micro-batch job")
    return statistics.median(outside) / 1000


def message_pairs(traces):
    """``(send start, receive start, receive end)`` us of every message between the two ranks'
    :func:`job_times`: the n-th gloo send of one rank and the n-th receive of the other are one
    message (one ring per pair of ranks, sends drained in order), both directions."""
    for a, b in ((0, 1), (1, 0)):
        for (s_start, _), (r_start, r_end) in zip(traces[a]["gloo_send"], traces[b]["gloo_recv"]):
            yield s_start, r_start, r_end


def handoffs(traces, recv: str = "rendezvous") -> list:
    """Per message (:func:`message_pairs`), the time (us) from the later of its send and receive
    ops starting to the end of its receive. ``recv="ahead"`` (receives posted ahead by the
    channel's thread): from the send's start, over the messages whose receive op waited for them
    (started before the send): the others had landed before their op asked."""
    if recv == "ahead":
        return [r_end - s_start for s_start, r_start, r_end in message_pairs(traces) if r_start < s_start]
    return [r_end - max(r_start, s_start) for s_start, r_start, r_end in message_pairs(traces)]


def landed_receives(traces, after_us: float = 1000.0) -> list:
    """The time (us) of each receive op asked for at least ``after_us`` after its message's send
    started: with receives posted ahead its message has landed, and the op only takes it from
    the channel's thread and copies it out (a receive's own cost, ``StaticCosts.receive``)."""
    return [r_end - r_start for s_start, r_start, r_end in message_pairs(traces) if r_start - s_start >= after_us]


def message_costs_ms(traces) -> dict:
    """The runtime's figures the simulator takes from the two ranks' :func:`job_times`, in ms:
    ``job`` (:func:`job_overhead_ms`), ``message`` (a send op's median), ``recv``
    (:func:`recv_mode`), ``latency`` (the mean of :func:`handoffs` under it) and ``receive`` (the
    mean of :func:`landed_receives` with receives posted ahead, else 0); 0 where none ran."""
    sends = [d for t in traces for d in t["send"]]
    recv = recv_mode()
    waits = handoffs(traces, recv)
    landed = landed_receives(traces) if recv == "ahead" else []
    return {"job": job_overhead_ms(traces), "message": statistics.median(sends) / 1000 if sends else 0.0,
            "recv": recv, "latency": statistics.mean(waits) / 1000 if waits else 0.0,
            "receive": statistics.mean(landed) / 1000 if landed else 0.0}


def recv_mode() -> str:
    """How this process's static Engine receives (``passes.static.job_model.RECV_MODELS``):
    ``"ahead"`` when a message lands without waiting for its receive op, on a socket (the
    default) or on gloo's channels with receives posted ahead; ``"rendezvous"`` on gloo's
    channels with ``PADDLE_EXT_RECV_AHEAD=0``."""
    return "ahead" if p2p_sockets.enabled() or recv_ahead() else "rendezvous"


def job_overhead_ms(traces) -> float:
    """The median of (compute job - its ops) in ms over the ranks' :func:`job_times`."""
    over = [job - ops for t in traces for key, v in t.items() if isinstance(key, tuple) and key[0] in COMPUTE_JOBS
            for job, ops in v]
    return statistics.median(over) / 1000


def runtime_from(traces) -> dict:
    """The ``static_engine`` section (seconds) from the two ranks' :func:`job_times`."""
    if not any(t["send"] for t in traces) or not handoffs(traces, recv_mode()):
        raise ValueError("the profiled steps hold no gloo send or receive: not a pipeline run")
    ms = message_costs_ms(traces)
    return {"job_s": ms["job"] / 1000, "message_s": ms["message"] / 1000, "latency_s": ms["latency"] / 1000,
            "recv": ms["recv"], "receive_s": ms["receive"] / 1000}


def measure_static_engine(timeout: float = 600.0, log_dir=None, **sizes) -> dict:
    """The ``static_engine`` section measured here (module doc), ``sizes`` over :data:`DEFAULTS`,
    with what it was measured on."""

    cfg = dict(DEFAULTS, **sizes, schedule="ZBV", layer_meshes=[0, 1, 1, 0], vpp=2)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="paddle_ext_static_profile_") as out_dir:   # the ranks' traces, read here
        results = run_ranks(profile_rank, nproc=2, args=([cfg], out_dir), timeout=timeout, pin_cpus=True,
                            log_dir=log_dir, teardown="warn")
        section = runtime_from([job_times(r[0]["trace"], r[0]["window"]) for r in results])
    section["measured"] = (f"ZBV, 2 ranks, 4 blocks of hidden {cfg['hidden']}, {cfg['acc']} micro-batches, one job "
                           f"per action; load average {load:.2f} before")
    return section


__all__ = ["build_mlp", "comm_cpu_ns", "comm_ms_per_message", "handoffs", "job_sequences", "job_times",
           "landed_receives", "measure_static_engine", "message_costs_ms", "message_pairs", "profile_rank", "recv_mode",
           "runtime_from", "step_overhead_ms", "window"]
