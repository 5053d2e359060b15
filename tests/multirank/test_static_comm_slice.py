"""The static Engine's communication threads ask for a short scheduler slice
(``PADDLE_EXT_COMM_SLICE_US``, 100 us by default): a channel's send and receive threads where it has
them (``gloo_ops.cc``: gloo's channels, ``PADDLE_EXT_P2P_SOCKETS=0``, or a full socket) and the gloo I/O thread of each communicator the Engine creates
(``static_collectives.short_slice``); every other thread keeps the kernel's slice. Read back from
``/proc/self/task/<tid>/sched`` (``se.slice``, ns) after a ZBV run of 2 ranks."""
import os
import platform

import pytest

from paddle_ext.testing import run_ranks

pytestmark = pytest.mark.multirank

CFG = {"schedule": "ZBV", "layer_meshes": [0, 1, 1, 0], "vpp": 2, "acc": 4, "steps": 2}


def _kernel_has_custom_slices() -> bool:
    """Linux >= 6.12 takes a SCHED_OTHER thread's own slice (sched_attr.sched_runtime)."""
    release = platform.release().split("-")[0].split(".")
    return platform.system() == "Linux" and tuple(int(x) for x in release[:2] if x.isdigit()) >= (6, 12)


def _slices() -> dict:
    """``{tid: (name, se.slice ns)}`` of this process's threads."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/self/task/{tid}/sched") as f:
                line = next(x for x in f.read().splitlines() if x.startswith("se.slice"))
        except (OSError, StopIteration):
            continue
        out[int(tid)] = (name, int(float(line.split(":")[1])))
    return out


def comm_slices(cfg):
    """Rank function: threads before the Engine, ZBV training, then every thread's slice, the
    main thread's id and how many communicators the Engine made for this rank."""
    import threading

    import paddle.distributed as dist
    import paddle_ext
    import static_ranks as sr
    from paddle_ext.compat.ports.static_collectives import wanted_communicators

    dist.init_parallel_env()
    before = set(_slices())
    paddle_ext.install()
    losses = sr.train_losses(cfg)["losses"]
    rank = dist.get_rank()
    return {"slices": _slices(), "before": sorted(before), "main": threading.get_native_id(), "losses": losses,
            "comms": sum(rank in ranks for _, ranks in wanted_communicators())}


@pytest.mark.skipif(not _kernel_has_custom_slices(), reason="the kernel takes no per-thread slice before Linux 6.12")
def test_the_engines_communication_threads_take_a_short_slice_and_nothing_else_does(tmp_path):
    results = run_ranks(comm_slices, nproc=2, args=(CFG,), timeout=300, log_dir=tmp_path)
    for r in results:
        slices = r["slices"]
        short = {t: v for t, v in slices.items() if v[1] == 100_000}
        send = [t for t, (name, _) in slices.items() if name == "pe_gloo_send"]
        recv = [t for t, (name, _) in slices.items() if name == "pe_gloo_recv"]  # gloo's channels only
        # sockets (the default) start a channel's writer only when a socket is full: none here
        assert all(t in short for t in send + recv), (send, recv, slices)
        # one gloo I/O thread per communicator the Engine created, besides the channels' threads
        assert len(short) - len(send) - len(recv) == r["comms"] >= 2, (short, r["comms"])
        assert not set(short) & set(r["before"])          # not init_parallel_env's threads
        assert slices[r["main"]][1] != 100_000             # nor the compute
        assert all(loss == loss for loss in r["losses"])   # the run trained (no NaN)
