"""One rank of :func:`paddle_ext.launcher.run_ranks`: the script ``paddle.distributed.launch`` starts.

It adds nothing to the rank's process state. It starts the rank itself (``_rank.py``) as a
child with the launcher's environment unchanged, waits for it, and writes the child's exit code
to ``results/rank.N.exit``, so the parent sees how each rank ended its interpreter teardown
(a crash or a hang at exit is a failure the report names). Signals the launcher sends are
passed on to the rank. If the harness process that launched it is gone (killed: its own
timeout and clean-up died with it), the rank is ended (SIGTERM, then SIGKILL) and the worker
exits, so no rank outlives its harness.
"""
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

RANK_MAIN = Path(__file__).with_name("_rank.py")
#: ``"<pid>:<start time>"`` of the harness process (run_ranks sets it; the start time, field 22
#: of ``/proc/<pid>/stat``, tells the harness from a later process that reused its pid)
HARNESS_ENV = "PADDLE_EXT_HARNESS_PID"
POLL_SECONDS = 1.0


def stat_fields(pid: int):
    """The fields of ``/proc/<pid>/stat`` after the command name (``[0]``: the state, ``"Z"`` for a
    zombie; ``[19]``: field 22, the start in clock ticks), or None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and has not ended (not a zombie, not dead)."""
    fields = stat_fields(pid)
    return bool(fields) and fields[0] not in ("Z", "X")


def start_time(pid: int):
    """Field 22 of ``/proc/<pid>/stat`` (the process's start, in clock ticks), None if it is gone."""
    fields = stat_fields(pid)
    return fields[19] if fields is not None and len(fields) > 19 else None


def harness_alive(spec: str) -> bool:
    """Whether the process ``spec`` (``HARNESS_ENV``'s value) still runs; True when unset."""
    if not spec:
        return True
    pid, _, started = spec.partition(":")
    return start_time(int(pid)) == started


def _end(child) -> None:
    child.terminate()
    try:
        child.wait(timeout=5)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def main(payload_path: str) -> int:
    results = Path(payload_path).parent / "results"
    rank = int(os.environ.get("PADDLE_TRAINER_ID", "0"))
    child = subprocess.Popen([sys.executable, str(RANK_MAIN), payload_path])

    def forward(signum, _frame):
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    harness = os.environ.get(HARNESS_ENV, "")
    orphaned = threading.Event()

    def watch():   # a blocking wait below, this thread's check once a second beside it
        while child.poll() is None:
            if not harness_alive(harness):
                orphaned.set()
                _end(child)
                return
            time.sleep(POLL_SECONDS)

    threading.Thread(target=watch, name="pe_harness_watch", daemon=True).start()
    code = child.wait()
    if orphaned.is_set():
        return 1
    tmp = results / f".rank.{rank}.exit.tmp"
    tmp.write_text(str(code))
    os.replace(tmp, results / f"rank.{rank}.exit")
    return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
