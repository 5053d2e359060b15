"""The static Engine's collectives on gloo (CPU): communicators by ranks, and the rewrite of a
program's collectives into paddle-ext's ring-aware gloo ops.

Why (the C++ source says it at length, ``paddle_ext/csrc/gloo_ops.cc``): on CPU every static
collective kernel uses the communicator of the first collective the process built, and
``send_v2``/``recv_v2`` have no CPU kernel. :func:`lower_collectives` rewrites ``send_v2``,
``recv_v2``, ``all_reduce``, ``all_gather``, ``broadcast`` and ``reduce_scatter`` (the ZeRO
gradient reshard, Partial -> Shard; no CPU kernel at all) into ``pe_gloo_*`` ops that look their
communicator up by name when they run.

Communicators are named by their ordered ranks (:func:`comm_key`), never by ring id (Paddle
numbers static groups in a rank-dependent order), and every rank creates its own in one global
order (:func:`wanted_communicators`, :func:`create_communicators`). Point-to-point uses one
channel per direction (:func:`p2p_key`), a TCP socket by default (:mod:`.p2p_sockets`: the send
op writes and returns, the receive op reads). On gloo's channels (``PADDLE_EXT_P2P_SOCKETS=0``)
a send enqueues and returns, a per-channel thread does the blocking gloo send, so a rank only
waits in receives, and receives are posted ahead: each carries its channel's byte sizes for one
step of the job list (:func:`recv_plans`), and a per-channel thread posts the step's receives
in turn from the step's first one.

Under ``run_ranks(pin_cpus="compute")`` (``PADDLE_EXT_COMM_CPUS`` set) the communicators'
gloo I/O threads start on those CPUs (:func:`comm_threads_free`), as the send threads move
themselves there (``pe_gloo_send``): the rank's compute keeps its CPU. The I/O threads are named
``pe_gloo_io`` under any binding.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import math
import os
import platform

from paddle.base import core
from paddle.distributed.auto_parallel.static.process_group import get_all_process_groups
from paddle.distributed.auto_parallel.static.process_group import get_process_group
from paddle.distributed.collective import _get_global_group
import paddle

from ...errors import ScheduleError
from ..native.cpp_build import build_and_load, paths
from . import p2p_sockets

logger = logging.getLogger("paddle_ext.static")


def gloo_ops_dir() -> str:
    """Where the ops are built (``PADDLE_EXT_CACHE`` or ~/.cache/paddle_ext), per Paddle version."""
    return paths("gloo_ops")[0]


@functools.cache
def load_gloo_ops():
    """Build (first use, ~30 s, then cached) and load the gloo collective ops; returns the module
    (loaded once per process).

    Ranks of one launch share the build (:mod:`paddle_ext.compat.native.cpp_build`)."""
    return build_and_load("gloo_ops")


def comm_key(ranks) -> str:
    """The communicator of an ordered group of global ranks (same text on every member)."""
    return "paddle_ext:" + ",".join(str(int(r)) for r in ranks)


def p2p_key(sender: int, receiver: int) -> str:
    """The one-direction point-to-point channel ``sender -> receiver`` (its ranks: [sender, receiver])."""
    return f"paddle_ext:p2p:{int(sender)}>{int(receiver)}"


def wanted_communicators() -> list:
    """``(key, ordered ranks)`` of every communicator the static groups need, in one global order.

    Paddle numbers static groups in a rank-dependent order (ranks 0,1 may call [0,1] ring 31
    while ranks 2,3 call [2,3] ring 31), so a communicator is named by its ranks, never by its
    ring id, and every rank creates its own in the same (sorted) order: rendezvous among the
    members of the first unfinished one always completes."""

    wanted = set()
    for group in get_all_process_groups():
        ranks = tuple(int(r) for r in group.ranks)
        if len(ranks) >= 2:
            wanted.add((comm_key(ranks), ranks))
        if group.group_type == "p2p" and len(ranks) == 2:
            for s_, r_ in (ranks, ranks[::-1]):
                wanted.add((p2p_key(s_, r_), (s_, r_)))
    return sorted(wanted, key=lambda item: (len(item[1]), item[1], item[0]))


_CREATED: set = set()  # communicators this process created (CommContextManager has no Python lookup)


#: the CPUs communication threads run on, as "0,1" (paddle_ext.launcher._rank.COMM_CPUS_ENV, spelled out)
COMM_CPUS_ENV = "PADDLE_EXT_COMM_CPUS"
IO_THREAD_NAME = "pe_gloo_io"


def _tasks() -> set:
    try:
        return set(os.listdir("/proc/self/task"))
    except OSError:
        return set()


@contextlib.contextmanager
def comm_threads_free():
    """Threads the calling thread starts inside run on the CPUs ``PADDLE_EXT_COMM_CPUS`` names
    (a new thread takes its creator's affinity); without the variable (or the OS call) nothing
    changes. (:func:`create_communicators` names them ``pe_gloo_io`` under any binding.)"""
    wanted = os.environ.get(COMM_CPUS_ENV, "")
    if not wanted or not hasattr(os, "sched_setaffinity"):
        yield
        return
    cpus = {int(c) for c in wanted.split(",") if c.strip().isdigit()}
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)   # this thread only: the rank's other threads keep theirs
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


#: how short a scheduler slice paddle-ext's communication threads ask for (microseconds; 0: the
#: kernel's default); the send thread reads it in C++ (gloo_ops.cc, ShortSlice)
COMM_SLICE_ENV = "PADDLE_EXT_COMM_SLICE_US"
#: sched_setattr's system call number, which the os module does not wrap (Linux)
_SCHED_SETATTR = {"x86_64": 314, "aarch64": 274}


def short_slice(tids) -> int:
    """Give the threads ``tids`` of this process a short scheduler slice (``PADDLE_EXT_COMM_SLICE_US``,
    100 by default), as the send thread gives itself: on Linux >= 6.12 a woken thread with a
    shorter slice than the running one preempts it, so a gloo I/O thread that wakes for a
    message while this rank computes runs at once instead of after the compute's slice (1.4 ms
    on a 2-CPU machine). Only SCHED_OTHER threads, nice kept; best effort (another OS, an older
    kernel or a refusal leaves the default). Returns how many threads took it."""
    class SchedAttr(ctypes.Structure):  # struct sched_attr, its first 48 bytes (SCHED_ATTR_SIZE_VER0)
        _fields_ = [("size", ctypes.c_uint32), ("policy", ctypes.c_uint32), ("flags", ctypes.c_uint64),
                    ("nice", ctypes.c_int32), ("priority", ctypes.c_uint32), ("runtime", ctypes.c_uint64),
                    ("deadline", ctypes.c_uint64), ("period", ctypes.c_uint64)]

    try:
        us = int(os.environ.get(COMM_SLICE_ENV) or 100)
    except ValueError:
        us = 100
    number = _SCHED_SETATTR.get(platform.machine())
    if us <= 0 or number is None or not hasattr(os, "sched_getscheduler"):
        return 0
    libc, done = ctypes.CDLL(None, use_errno=True), 0
    for tid in tids:
        try:
            if os.sched_getscheduler(int(tid)) != os.SCHED_OTHER:
                continue
            nice = os.getpriority(os.PRIO_PROCESS, int(tid))
        except OSError:   # the thread ended
            continue
        attr = SchedAttr(size=ctypes.sizeof(SchedAttr), policy=os.SCHED_OTHER, nice=nice, runtime=us * 1000)
        done += libc.syscall(number, int(tid), ctypes.byref(attr), 0) == 0
    return done


def create_communicators(sockets: bool = True) -> list:
    """Create this rank's communicators of :func:`wanted_communicators`; returns the new keys.
    With ``sockets`` (and :func:`.p2p_sockets.enabled`) its point-to-point channels are also
    connected as sockets, which the rewritten send and receive ops then use."""

    rank = paddle.distributed.get_rank()
    store = core.create_or_get_global_tcp_store()
    made = []
    before = _tasks()
    with comm_threads_free():
        for key, ranks in wanted_communicators():
            if rank in ranks and key not in _CREATED:
                core.CommContextManager.create_gloo_comm_context(store, key, ranks.index(rank), len(ranks))
                _CREATED.add(key)
                made.append(key)
    if sockets and p2p_sockets.enabled():
        p2p_sockets.connect(store, rank, [(k, r) for k, r in wanted_communicators() if ":p2p:" in k and rank in r])
    new = _tasks() - before   # the communicators' gloo I/O threads
    _name(new, IO_THREAD_NAME)   # under any binding: their CPU time is read by name (profile_static.comm_cpu_ns)
    short_slice(new)
    return made


def _name(tids, name: str) -> None:
    """Name this process's threads ``tids`` ``name`` (only a label; a thread that ended is skipped)."""
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/comm", "w") as f:
                f.write(name)
        except OSError:
            pass


# phi ReduceType (kRedSum, kRedMax, kRedMin, kRedProd) -> the reduce_type GlooCommContext::AllReduce
# takes: the same codes (gloo_utils.h's SetReduceFunc switches on phi::ReduceType; 4, kRedAvg, it
# refuses). An earlier table took ReduceOp's numbering (MAX 2, MIN 3, PRODUCT 4): max then reduced
# by min, min by product, prod failed.
_GLOO_REDUCE = {0: 0, 1: 1, 2: 2, 3: 3}
COLLECTIVES = ("pd_op.send_v2", "pd_op.recv_v2", "pd_op.all_reduce", "pd_op.all_reduce_", "pd_op.all_gather",
               "pd_op.broadcast", "pd_op.broadcast_", "pd_op.reduce_scatter")
#: collectives Paddle has no CPU kernel for (send/recv aside): lowered even on a single ring
NO_CPU_KERNEL = ("pd_op.reduce_scatter",)
#: what a program keeps until the pipeline pass has classified its jobs by op name
NOT_P2P = tuple(n for n in COLLECTIVES if n not in ("pd_op.send_v2", "pd_op.recv_v2"))


def recv_ahead() -> bool:
    """Whether pipeline receives are posted ahead (``PADDLE_EXT_RECV_AHEAD``, default on; ``0``
    receives each message when its op runs, as before)."""
    return os.environ.get("PADDLE_EXT_RECV_AHEAD", "1").strip() not in ("0", "false", "no", "off")


def _p2p_recv(op, rank: int):
    """``(channel, bytes)`` of a ``recv_v2`` between two ranks (bytes ``None`` when a dimension is
    dynamic), else ``None``."""
    if op.name() != "pd_op.recv_v2":
        return None
    attrs = op.attrs()
    group = get_process_group(attrs["ring_id"])
    if group is None or len(group.ranks) < 2:
        return None
    shape = [int(d) for d in attrs["out_shape"]]
    size = None if any(d < 0 for d in shape) else math.prod(shape) * core.size_of_dtype(attrs["dtype"])
    return p2p_key(int(group.ranks[attrs["peer"]]), rank), size


def recv_plans(plan, rank: int) -> dict:
    """Per channel into ``rank``, the byte sizes of its receives in one step of the job list
    ``plan`` (``core.Plan``), in the order they run: the gloo receive op posts a step's receives
    ahead from it (``paddle_ext/csrc/gloo_ops.cc``, ``RecvQueue``). A channel with a dynamic
    shape gets no plan (its receives block when they run); none at all when
    :func:`recv_ahead` is off."""
    if plan is None or not recv_ahead():
        return {}
    received = {t: [r for r in map(lambda op: _p2p_recv(op, rank), plan.ir_program(t).global_block().ops) if r]
                for t in plan.job_types()}
    sizes: dict = {}
    for job in plan.job_list():
        for channel, size in received.get(job.type(), ()):
            sizes.setdefault(channel, []).append(size)
    return {channel: s for channel, s in sizes.items() if None not in s}


def lower_collectives(program, rank: int, names=COLLECTIVES, ops=None, plans=None) -> dict:
    """Rewrite the collectives ``names`` of ``program`` into the gloo ops; returns counts by op
    name. Groups of one rank are left to Paddle (which removes them); an unsupported reduce or
    a ring that is not a static process group raises :class:`ScheduleError`. ``plans`` (from
    :func:`recv_plans`) gives each receiving channel its step's plan."""

    ops = ops or load_gloo_ops()
    counts: dict = {}
    with paddle.static.program_guard(program):
        for op in list(program.global_block().ops):
            name = op.name()
            if name not in names:
                continue
            attrs = op.attrs()
            group = get_process_group(attrs["ring_id"])
            if group is None:
                raise ScheduleError(f"{name} on ring {attrs['ring_id']}: no static process group with that id; "
                                    "the program was not built by the Engine's reshard pass")
            if len(group.ranks) < 2:
                continue
            ring = comm_key(group.ranks)
            paddle.pir.set_insertion_point(op)
            if name in ("pd_op.send_v2", "pd_op.recv_v2"):
                peer = int(group.ranks[attrs["peer"]])
                if name == "pd_op.send_v2":
                    new = ops.pe_gloo_send(op.operand_source(0), p2p_key(rank, peer), 1)
                else:
                    like = paddle._C_ops.empty(list(attrs["out_shape"]), attrs["dtype"], paddle.CPUPlace())
                    channel = p2p_key(peer, rank)
                    new = ops.pe_gloo_recv(like, channel, 0, list((plans or {}).get(channel, ())))
                    op.result(0).replace_all_uses_with(new)
            else:
                x = op.operand_source(0)
                if name.startswith("pd_op.all_reduce"):
                    if attrs["reduce_type"] not in _GLOO_REDUCE:
                        raise ScheduleError(f"{name} on {ring} with reduce_type {attrs['reduce_type']}: gloo "
                                            "supports sum, max, min and prod; use one of them")
                    new = ops.pe_gloo_all_reduce(x, ring, _GLOO_REDUCE[attrs["reduce_type"]])
                elif name == "pd_op.all_gather":
                    new = ops.pe_gloo_all_gather(x, ring, attrs["nranks"])
                elif name == "pd_op.reduce_scatter":  # sum only (Paddle's static P -> S asserts it)
                    new = ops.pe_gloo_reduce_scatter(x, ring, attrs["nranks"])
                else:
                    new = ops.pe_gloo_broadcast(x, ring, attrs["root"])
                op.result(0).replace_all_uses_with(new)
            op.erase()
            counts[name] = counts.get(name, 0) + 1
    return counts


_EVENT_ATTRS = ("force_record_event", "event_to_record", "events_to_wait")


def strip_stream_events(program) -> int:
    """Remove the cross-job stream events Paddle's 1F1B/VPP passes put around send/recv.

    They order GPU streams; the CPU executor runs every op in order on the host, and an event
    recorded by an op that the gloo rewrite replaced would be waited for forever."""
    count = 0
    for op in program.global_block().ops:
        for attr in _EVENT_ATTRS:
            if op.has_attr(attr):
                op.erase_attr(attr)
                count += 1
    return count


def eager_barrier() -> None:
    """A barrier on the world's dygraph gloo group, whatever mode Paddle is in (``dist.barrier``
    builds a static op in static mode)."""

    _get_global_group().process_group.barrier().wait()


def engine_programs(engine, mode) -> list:
    """What ``engine`` runs for ``mode``: each job program of the pipeline plan, else the dense
    main program."""
    plan = engine._job_plan
    return ([plan.ir_program(t) for t in plan.job_types()] if plan is not None
            else [engine._pir_dense_main_progs[mode]])


def collective_rings(programs, names=NOT_P2P) -> list:
    """The communicators (:func:`comm_key`, sorted) the collectives ``names`` of ``programs``
    run on; groups of one rank and rings that are not static process groups are left out."""
    rings = set()
    for program in programs:
        for op in program.global_block().ops:
            if op.name() in names:
                group = get_process_group(op.attrs()["ring_id"])
                if group is not None and len(group.ranks) >= 2:
                    rings.add(comm_key(group.ranks))
    return sorted(rings)


def lower_engine_collectives(engine, mode, names=COLLECTIVES) -> dict:
    """:func:`lower_collectives` of ``names`` (default: send/recv included) on what ``engine``
    runs for ``mode`` (:func:`engine_programs`), stream events stripped."""

    rank = paddle.distributed.get_rank()
    plans = recv_plans(engine._job_plan, rank) if "pd_op.recv_v2" in names else {}
    total: dict = {}
    for program in engine_programs(engine, mode):
        strip_stream_events(program)
        for name, n in lower_collectives(program, rank, names=names, plans=plans).items():
            total[name] = total.get(name, 0) + n
    logger.info("rank %d: collectives on gloo ops: %s", rank, total)
    return total
