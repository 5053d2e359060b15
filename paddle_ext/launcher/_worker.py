"""One rank of :func:`paddle_ext.launcher.run_ranks`: the script ``paddle.distributed.launch`` starts.

It adds nothing to the rank's process state. It starts the rank itself (``_rank.py``) as a
child with the launcher's environment unchanged, waits for it, and writes the child's exit code
to ``results/rank.N.exit``, so the parent sees how each rank ended its interpreter teardown
(a crash or a hang at exit is a failure the report names). Signals the launcher sends are
passed on to the rank.
"""
import os
import signal
import subprocess
import sys
from pathlib import Path

RANK_MAIN = Path(__file__).with_name("_rank.py")


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
    code = child.wait()
    tmp = results / f".rank.{rank}.exit.tmp"
    tmp.write_text(str(code))
    os.replace(tmp, results / f"rank.{rank}.exit")
    return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
