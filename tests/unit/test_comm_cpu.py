"""The communication threads' CPU per message (``profile_static.comm_cpu_ns``,
``comm_ms_per_message``): what the static simulator charges a rank per message it sends or
receives (``StaticCosts.comm``)."""
import os
import threading
import time

import pytest

from paddle_ext.plan import profile_static as ps


def _busy(name: str, seconds: float, done: threading.Event, release: threading.Event) -> threading.Thread:
    """A thread named ``name`` that runs ``seconds`` of CPU, then waits (alive: its CPU time is
    read from its /proc entry, gone once it ends) until ``release``."""
    def run():
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as f:
            f.write(name)
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass
        done.set()
        release.wait(10)

    return threading.Thread(target=run)


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="per-thread CPU time is read from Linux's /proc")
def test_only_threads_named_as_communication_threads_are_counted():
    counted = {}
    for name in ("pe_gloo_io", "worker"):
        done, release = threading.Event(), threading.Event()
        before = ps.comm_cpu_ns()
        thread = _busy(name, 0.05, done, release)
        thread.start()
        assert done.wait(10)
        counted[name] = (ps.comm_cpu_ns() - before) / 1e6
        release.set()
        thread.join()
    # the named thread ran 50 ms of CPU and is counted; the other is not (its name is the label)
    assert counted["pe_gloo_io"] >= 45 and counted["worker"] < 5, counted


def test_cpu_per_message_is_each_ranks_cpu_over_its_sends_and_receives():
    # rank 0: 12 ms over 3 sends and 3 receives (2 ms each); rank 1: 8 ms over 2 + 2 (2 ms)
    results = [{"comm_ns": 12_000_000}, {"comm_ns": 8_000_000}]
    traces = [{"send": [1.0] * 3, "gloo_recv": [(0, 1)] * 3}, {"send": [1.0] * 2, "gloo_recv": [(0, 1)] * 2}]
    assert ps.comm_ms_per_message(results, traces) == pytest.approx(2.0)
    # a rank that moved no message says nothing; none at all: 0
    assert ps.comm_ms_per_message(results[:1] + [{"comm_ns": 5}], traces[:1] + [{"send": [], "gloo_recv": []}]) == 2.0
    assert ps.comm_ms_per_message([{"comm_ns": 5}], [{"send": [], "gloo_recv": []}]) == 0.0
