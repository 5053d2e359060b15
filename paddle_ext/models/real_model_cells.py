"""One cell of the real-model matrix (``paddle-ext compat --models``): a launch of
:func:`.real_models.train_rank`, judged against the dense reference, and a one-line summary of a
run that failed.
"""
from __future__ import annotations

import re

from . import grad_parity
from .real_models import PLANS, compare, train_rank

TOL = 1e-5


def judge(dense: dict, per_rank: list[dict], exec_mode: str, tol: float = TOL) -> tuple[bool, str]:
    """Losses (every rank holding the loss), every parameter's initial weight and first-step
    update, and in dygraph its gradient (:func:`.grad_parity.check_training`; under
    ``dist.to_static`` the gradient stays in the program) against the dense reference
    (:func:`.dense_reference.dense_run`)."""
    ok_losses, losses = compare(dense["losses"], per_rank, tol)
    ok_grads, grads = grad_parity.check_training(dense, per_rank, tol)
    return ok_losses and ok_grads, f"losses: {losses}; {grads}"

def summarize_failure(text: str) -> str:
    """One line for a failed run: a rank's crash and the Python line it hit (from faulthandler's
    stack, appended to ``text``), else the first failing rank's exception line. SIGTERM/SIGKILL
    are the launcher stopping peers, not a cause."""
    import signal

    lines = text.splitlines()
    teardown = re.search(r"exited with code (-?\d+) during interpreter teardown", text)
    if teardown:
        code = int(teardown.group(1))
        name = signal.Signals(-code).name if code < 0 and -code in signal.valid_signals() else f"code {code}"
        return f"returned its losses, then crashed at exit ({name} during interpreter teardown)"
    codes = [int(c) for c in re.findall(r"exit code (-\d+)", text)]
    crashes = [c for c in codes if -c not in (signal.SIGTERM, signal.SIGKILL)]
    if crashes:
        try:
            sig = signal.Signals(-crashes[0]).name
        except ValueError:
            sig = f"signal {-crashes[0]}"
        where = ""
        for i, line in enumerate(lines):  # faulthandler's stack, innermost frame first
            if line.startswith("Stack (most recent call first)") and i + 1 < len(lines):
                frame = re.search(r'File "([^"]+)", line (\d+) in (\S+)', lines[i + 1])
                if frame:
                    where = f" in {frame.group(3)} ({frame.group(1).split('site-packages/')[-1]}:{frame.group(2)})"
                break
        return f"crash: {sig}{where}"
    # the first failing rank that raised: its traceback ends with the exception line
    for part in text.split("--- rank ")[1:]:
        if not part.split("\n", 1)[0].endswith("(raised) ---"):
            continue
        section = part.split("--- tail of workerlog")[0].splitlines()
        for line in reversed(section):
            # Paddle's static errors wrap the cause: "NotImplementedError: In user code:" ...
            # "    UnimplementedError: Unimplemented cpu kernel ..."
            if re.match(r"^\s*[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b(?!: In user code)", line):
                return line.strip()[:200]
    return (lines[0] if lines else "failed")[:200]


def run_cell(model: str, plan: str, mode: str, exec_mode: str, dense: dict, log_dir,
             timeout: float = 600.0) -> tuple[str, str]:
    """One matrix cell, trained with SGD and judged by :func:`judge`: ("match" | "mismatch" |
    "error", detail)."""
    from ..errors import HarnessError
    from ..launcher import run_ranks

    try:
        res = run_ranks(train_rank, PLANS[plan].world_size, args=(model, plan, mode, exec_mode, "sgd", True),
                        timeout=timeout, log_dir=log_dir)
    except HarnessError as exc:
        from pathlib import Path

        text = str(exc)
        (Path(log_dir) / "failure.txt").write_text(text)
        # a crashed rank's faulthandler stack is in its full log, beyond the report's tail
        logs = sorted(Path(log_dir).glob("workerlog.*"))
        stacks = [p.read_text(errors="replace") for p in logs]
        stacks = [t[t.index("Fatal Python error"):] for t in stacks if "Fatal Python error" in t]
        return "error", summarize_failure(text + ("\n" + stacks[0] if stacks else ""))
    ok, why = judge(dense, res, exec_mode)
    return ("match" if ok else "mismatch"), why
