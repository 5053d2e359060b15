"""``run_ranks(pin_cpus="compute")``: the static Engine's compute on the rank's one CPU, its
communication threads free on every allowed CPU; ``pin_cpus=True`` still binds every thread.

One ZBV launch per binding (2 ranks, 4 micro-batches, 3 steps). After the steps each rank
lists its threads from ``/proc/self/task`` (name, ``Cpus_allowed_list``, the kernel's wait
channel). gloo's I/O threads are found by what the kernel says they do (waiting in
``epoll_wait``), not by the name paddle-ext gives them: one per gloo device, so one per
communicator of the Engine (:func:`wanted_communicators`, the ones its jobs' ops use), and one
per dygraph group (the world group of ``init_parallel_env``, told apart by thread id, and the
groups ``dist.to_static`` makes; idle while the static jobs run), which stay bound.
"""
import os

import pytest

from paddle_ext.errors import HarnessError
from paddle_ext.testing import run_ranks

pytestmark = [pytest.mark.multirank,
              pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is a Linux call")]

CFG = {"schedule": "ZBV", "layer_meshes": [0, 1, 1, 0], "vpp": 2, "acc": 4, "steps": 3}


def _cpu_list(text: str) -> list:
    out = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def _threads(samples: int = 20) -> dict:
    """``{tid: (name, [cpus], wait channel)}`` of this process's threads; the wait channel is
    ``epoll`` if the thread was seen waiting in epoll in any of ``samples`` looks 10 ms apart
    (a look catches a thread where it is at that moment), else the last one seen."""
    import time

    out = {}
    for _ in range(samples):
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/comm") as f:
                    name = f.read().strip()
                with open(f"/proc/self/task/{tid}/status") as f:
                    cpus = next(line.split(":", 1)[1].strip() for line in f if line.startswith("Cpus_allowed_list"))
                with open(f"/proc/self/task/{tid}/wchan") as f:
                    wchan = f.read().strip()
            except OSError:  # the thread ended meanwhile
                continue
            seen = out.get(int(tid), (None, None, ""))[2]
            out[int(tid)] = (name, _cpu_list(cpus), "epoll" if "epoll" in seen + wchan else wchan)
        time.sleep(0.01)
    return out


def thread_binding(cfg):
    """Rank function: ZBV training; this rank's losses, its threads after the steps, the tids
    of the world group's threads, its main thread's id, how many communicators the Engine made
    for it and ``PADDLE_EXT_COMM_CPUS``."""
    import threading

    import paddle.distributed as dist
    import paddle_ext
    import static_ranks as sr
    from paddle_ext.compat.ports.static_collectives import wanted_communicators

    dist.init_parallel_env()
    world = sorted(_threads(samples=1))
    paddle_ext.install()
    out = sr.train_losses(cfg)
    rank = dist.get_rank()
    return {"losses": out["losses"], "threads": _threads(), "world": world, "main": threading.get_native_id(),
            "comms": sum(rank in ranks for _, ranks in wanted_communicators()),
            "env": os.environ.get("PADDLE_EXT_COMM_CPUS")}


def _split(result):
    """(main, the channels' send and receive threads, gloo I/O threads started after ``init_parallel_env``, every other
    thread) as {tid: info}."""
    threads = result["threads"]
    send = {t: v for t, v in threads.items() if v[0] in ("pe_gloo_send", "pe_gloo_recv")}
    io = {t: v for t, v in threads.items() if "epoll" in v[2] and t not in result["world"]}
    rest = {t: v for t, v in threads.items() if t not in send and t not in io and t != result["main"]}
    return threads[result["main"]], send, io, rest


@pytest.mark.long_tail   # a benchmark-only binding (bench_static --binding compute); 18 s of CI's budget
def test_compute_binding_frees_the_comm_threads_only(tmp_path):
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip(f"this process may run on {len(allowed)} CPU: the binding is the same either way")
    gloo = {"PADDLE_EXT_P2P_SOCKETS": "0"}   # gloo's channels: a send and a receive thread each, to bind
    compute = run_ranks(thread_binding, nproc=2, args=(CFG,), timeout=300, pin_cpus="compute",
                        log_dir=tmp_path / "compute", env=gloo)
    whole = run_ranks(thread_binding, nproc=2, args=(CFG,), timeout=300, pin_cpus=True, log_dir=tmp_path / "whole",
                      env=gloo)
    for rank, (c, w) in enumerate(zip(compute, whole)):
        own = [allowed[rank % len(allowed)]]
        main, send, io, rest = _split(c)
        assert c["env"] == ",".join(map(str, allowed))
        assert main[1] == own
        assert send and all(v[1] == allowed for v in send.values()), send
        # one gloo device per communicator of the Engine (p2p both ways, the pair's rings): free
        free = {t: v for t, v in io.items() if v[1] == allowed}
        assert c["comms"] >= 2 and len(free) == c["comms"], (c["comms"], io)
        assert all(v[0] == "pe_gloo_io" for v in free.values()), free
        assert all(v[1] == own for t, v in io.items() if t not in free), io   # dygraph groups'
        assert rest and all(v[1] == own for v in rest.values()), rest   # executor workers, world group
        w_main, w_send, w_io, w_rest = _split(w)
        assert w["env"] is None and w_send and len(w_io) >= w["comms"] >= 2
        assert all(v[1] == own for v in [w_main, *w_send.values(), *w_io.values(), *w_rest.values()])
        assert c["losses"] == w["losses"]   # the binding moves threads, not results


def test_an_unknown_binding_is_named():
    with pytest.raises(HarnessError, match="pin_cpus must be False, True or 'compute'"):
        run_ranks(thread_binding, nproc=2, args=(CFG,), pin_cpus="comm")
