"""The rank process of :func:`paddle_ext.launcher.run_ranks`, started by ``_worker.py``.

It runs the function as ``python -m paddle.distributed.launch script.py`` runs a script: no
``set_device``, no ``init_parallel_env``, no ``paddle_ext.install()`` -- the function does what
it needs itself. It writes ``results/rank.N.pkl`` as ``("ok", value)`` or ``("error",
traceback)``, renamed into place so the parent never reads half a file, then leaves through
normal interpreter teardown (after the parent has every result: rank 0 hosts the TCP store), with
``faulthandler`` on: a crash at exit leaves the Python stack of every thread in the rank's log.

With ``pin_cpus`` in the payload (a measurement asked for it) the rank first binds itself to one
CPU, before it imports anything that starts threads: :func:`cpus_for` picks it. With
``pin_cpus="compute"`` it also names the CPUs it was allowed before in ``PADDLE_EXT_COMM_CPUS``
(:data:`COMM_CPUS_ENV`): paddle-ext's communication threads (the static gloo send thread, the
gloo I/O threads of the static Engine's communicators) move themselves there when they start,
so a message need not wait for this rank's compute to leave the CPU.
"""
import faulthandler
import importlib
import os
import pickle
import sys
import time
import traceback


def _write(results: str, rank: int, record) -> None:
    tmp = os.path.join(results, f".rank.{rank}.tmp")
    with open(tmp, "wb") as f:
        pickle.dump(record, f)
    os.replace(tmp, os.path.join(results, f"rank.{rank}.pkl"))


#: the CPUs communication threads may run on (``pin_cpus="compute"``), as "0,1"; read by
#: paddle_ext/csrc/gloo_ops.cc's send thread and compat/ports/static_collectives.py (spelled out there)
COMM_CPUS_ENV = "PADDLE_EXT_COMM_CPUS"


def cpus_for(rank: int, allowed) -> set:
    """The one CPU a pinned rank runs on: the allowed CPUs in ascending order, dealt round robin
    (4 ranks on CPUs {0, 1}: ranks 0 and 2 on CPU 0, ranks 1 and 3 on CPU 1)."""
    cpus = sorted(allowed)
    return {cpus[rank % len(cpus)]}


def pin_to_one_cpu(rank: int, compute_only: bool = False):
    """Bind this process (and the threads it starts later) to :func:`cpus_for`'s CPU; the CPU
    set, or ``None`` where the OS has no affinity call (the rank then runs unpinned).

    ``compute_only``: also set :data:`COMM_CPUS_ENV` to every CPU allowed before, which the
    communication threads take when they start (the main thread and the threads it starts,
    Paddle's executor workers among them, stay on the one CPU)."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    allowed = os.sched_getaffinity(0)
    cpus = cpus_for(rank, allowed)
    if compute_only:
        os.environ[COMM_CPUS_ENV] = ",".join(str(c) for c in sorted(allowed))
    else:
        os.environ.pop(COMM_CPUS_ENV, None)
    os.sched_setaffinity(0, cpus)
    return cpus


def main(payload_path: str) -> int:
    with open(payload_path, "rb") as f:
        payload = pickle.load(f)
    for p in reversed(payload["sys_path"]):
        if p not in sys.path:
            sys.path.insert(0, p)
    rank = int(os.environ.get("PADDLE_TRAINER_ID", "0"))
    if payload.get("pin_cpus"):
        pin_to_one_cpu(rank, compute_only=payload["pin_cpus"] == "compute")
    with open(os.path.join(payload["results"], f"rank.{rank}.pid"), "w") as f:
        f.write(str(os.getpid()))
    # paddle_ext.breadcrumbs.ACTION_FILE_ENV, spelled out: the rank imports nothing before its target does
    os.environ["PADDLE_EXT_ACTION_FILE"] = os.path.join(payload["results"], f"rank.{rank}.action")
    try:
        target = importlib.import_module(payload["module"])
        for part in payload["name"].split("."):
            target = getattr(target, part)
        value = target(*payload["args"], **payload["kwargs"])
        record = ("ok", value)
        try:
            pickle.dumps(record)
        except Exception as exc:  # noqa: BLE001 - report, never lose the rank's outcome
            record = ("error", f"rank {rank} returned an unpicklable value: {exc!r}")
    except BaseException:  # noqa: BLE001 - every failure must reach the parent
        record = ("error", traceback.format_exc())
    if record[0] == "error":   # the rank's own log says it too, as an uncaught error would
        sys.stderr.write(record[1])
    _write(payload["results"], rank, record)
    sys.stdout.flush()
    sys.stderr.flush()
    if record[0] == "ok":
        # rank 0 has a release of its own: it hosts Paddle's TCP store and leaves last (run_ranks)
        release = os.path.join(payload["results"], "release.0" if rank == 0 else "release")
        deadline = time.monotonic() + 3600
        while not os.path.exists(release) and time.monotonic() < deadline:
            time.sleep(0.05)
    # teardown follows: a fatal signal there writes every thread's Python stack to the rank's log.
    # Installed now, over the handler the function's imports set (Paddle's), which runs after it.
    faulthandler.enable(all_threads=True)
    return 0 if record[0] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
