"""``static_collectives.short_slice``: a short scheduler slice for the static Engine's gloo I/O
threads (``PADDLE_EXT_COMM_SLICE_US``), read back from ``/proc/self/task/<tid>/sched``."""
import os

import pytest


def _slice_of(tid: int) -> int:
    with open(f"/proc/self/task/{tid}/sched") as f:
        lines = f.read().splitlines()
    return int(float(next(x for x in lines if x.startswith("se.slice")).split(":")[1]))


def test_short_slice_gives_a_thread_the_slice_asked_and_zero_leaves_it(monkeypatch):
    import platform
    import threading

    from paddle_ext.compat.ports.static_collectives import short_slice

    release = tuple(int(x) for x in platform.release().split("-")[0].split(".")[:2])
    if platform.system() != "Linux" or release < (6, 12):
        pytest.skip("the kernel takes no per-thread slice before Linux 6.12")
    stop, ready = threading.Event(), threading.Event()

    def normal_thread():   # xdist runs one-process tests under SCHED_IDLE (tests/conftest.py)
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        ready.set()
        stop.wait()

    thread = threading.Thread(target=normal_thread)
    thread.start()
    idle = threading.Thread(target=stop.wait)   # another policy: passed over
    idle.start()
    try:
        ready.wait()
        tid = thread.native_id
        default = _slice_of(tid)
        monkeypatch.setenv("PADDLE_EXT_COMM_SLICE_US", "0")
        assert short_slice([tid]) == 0 and _slice_of(tid) == default
        monkeypatch.setenv("PADDLE_EXT_COMM_SLICE_US", "250")
        assert short_slice([tid]) == 1 and _slice_of(tid) == 250_000
        monkeypatch.delenv("PADDLE_EXT_COMM_SLICE_US")
        assert short_slice([tid, 2 ** 30]) == 1 and _slice_of(tid) == 100_000   # a gone thread is passed over
        os.sched_setscheduler(idle.native_id, os.SCHED_IDLE, os.sched_param(0))
        assert short_slice([idle.native_id]) == 0 and os.sched_getscheduler(idle.native_id) == os.SCHED_IDLE
    finally:
        stop.set()
        thread.join()
        idle.join()
