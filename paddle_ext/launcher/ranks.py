"""Run a Python function on N CPU ranks through ``python -m paddle.distributed.launch`` (gloo).

    run_ranks(my_module.check_matmul, nproc=2, args=(4,), timeout=120)
    # -> [rank 0's return value, rank 1's return value]

The function must be importable by module and name (a module-level function of an importable
module; test modules work because the parent's ``sys.path`` is passed on). Each rank runs
``fn(*args, **kwargs)`` the way ``python -m paddle.distributed.launch script.py`` runs a
script: the harness adds no set-up (no ``set_device``, no ``dist.init_parallel_env()``, no
``paddle_ext.install()``), so a function that needs them calls them itself, as a user's script
would. Each rank sends back its pickled return value or its traceback, then leaves through
normal interpreter teardown; its exit code is checked, and a rank that crashes or hangs at exit
is a failure the report names.

Failure is bounded: the parent polls the ranks' result files, and as soon as one rank has
failed (raised, or exited without a result) or the timeout passes, the whole process group is
killed and :class:`~paddle_ext.errors.HarnessError` names the rank(s), with the traceback and the
tail of each failing rank's ``workerlog.N``. No process is left behind: the harness checks.
"""
from __future__ import annotations

import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from ..errors import HarnessError
from ..breadcrumbs import last_action
from ._worker import HARNESS_ENV, running, start_time

WORKER = Path(__file__).with_name("_worker.py")
TAG_ENV = "PADDLE_EXT_HARNESS_TAG"
GRACE_SECONDS = 2.0  # after one rank fails, how long the others get to report their own error
_LAUNCHED_TAGS: list[str] = []  # every run started from this process, for leftover checks


@dataclass
class RankFailure:
    rank: int
    kind: str          # "raised", "exited", "timeout", "stopped", "hung at exit", "failed at exit"
    detail: str        # traceback or reason
    log_tail: str
    at: float = float("inf")  # when the rank reported (its result file's mtime)
    action: str | None = None  # the rank's last record_action() note


def _log_tail(log_dir: Path, rank: int, lines: int = 30) -> str:
    path = log_dir / f"workerlog.{rank}"
    if not path.exists():
        return f"(no {path.name})"
    text = path.read_text(errors="replace").splitlines()
    return "\n".join(text[-lines:])


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM the launcher's whole process group, then SIGKILL what is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def tagged_processes(tag: str) -> list[int]:
    """PIDs of live processes whose environment carries ``PADDLE_EXT_HARNESS_TAG=tag``."""
    needle = f"{TAG_ENV}={tag}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in env.split(b"\0") and running(int(entry.name)):
            found.append(int(entry.name))
    return found


def leftover_processes() -> list[int]:
    """Live processes of any run this process started (should be empty between runs)."""
    return [pid for tag in _LAUNCHED_TAGS for pid in tagged_processes(tag)]


def _reap(tag: str, timeout: float = 5.0) -> list[int]:
    """Kill any process still carrying ``tag`` (ranks that escaped the group); returns leftovers."""
    deadline = time.monotonic() + timeout
    while True:
        left = tagged_processes(tag)
        if not left or time.monotonic() > deadline:
            break
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    return tagged_processes(tag)


def _abs_sys_path() -> list[str]:
    """The parent's import path with relative entries ('' and '.') made absolute."""
    return [os.path.abspath(p or os.getcwd()) for p in sys.path]


def _check_call(fn: Callable, nproc: int, teardown: str, pin_cpus) -> tuple[str, str]:
    """:func:`run_ranks`'s arguments checked; ``fn``'s module and qualified name."""
    if teardown not in ("raise", "warn"):
        raise HarnessError(f"teardown must be 'raise' or 'warn', got {teardown!r}")
    if type(pin_cpus) not in (bool, str) or pin_cpus not in (False, True, "compute"):
        raise HarnessError(f"pin_cpus must be False, True or 'compute', got {pin_cpus!r}")
    if nproc < 1:
        raise HarnessError(f"nproc must be >= 1, got {nproc}")
    module, name = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not module or not name or "<" in name:
        raise HarnessError(
            f"{fn!r} is not importable by module and name; define it at module level of an importable module")
    return module, name


def run_ranks(fn: Callable, nproc: int = 2, args: Sequence = (), kwargs: dict | None = None,
              timeout: float = 120.0, log_dir: str | os.PathLike | None = None,
              env: dict | None = None, keep_logs: bool = False, exit_timeout: float = 60.0,
              teardown: str = "raise", pin_cpus: bool | str = False) -> list[Any]:
    """Run ``fn(*args, **kwargs)`` on ``nproc`` CPU ranks; return each rank's result, by rank.

    Raises :class:`HarnessError` if any rank raises, exits without a result, or the run takes
    longer than ``timeout`` seconds, or if a rank that returned does not then exit with code 0
    within ``exit_timeout`` seconds; the message names each failing rank with its traceback and
    log tail. ``log_dir`` defaults to a fresh temporary directory (removed on success unless
    ``keep_logs``); pass one to keep the ``workerlog.N`` files. The harness adds no set-up:
    ``fn`` calls ``dist.init_parallel_env()`` and ``paddle_ext.install()`` itself if it needs them.
    ``teardown="warn"`` (a measurement: a profile, a plan's run; a baseline run of Paddle alone)
    returns the results when every rank returned and only its exit failed, with a
    ``RuntimeWarning`` naming the rank. ``pin_cpus=True`` (a measurement; Linux) binds each rank
    to one CPU of this process's allowed set, dealt round robin, before ``fn``'s module is
    imported: with more ranks than CPUs, which ranks share a CPU is then the same in every run.
    ``pin_cpus="compute"`` binds the compute only: the rank's main thread and the threads it
    starts (Paddle's executor workers) as ``True`` does, while paddle-ext's communication
    threads (the static gloo send thread, the gloo I/O threads of the static Engine's
    communicators) run on every CPU of this process's allowed set (with two ranks on two busy
    CPUs that made no schedule faster: docs/static_engine.md, "Third pass").
    """
    module, name = _check_call(fn, nproc, teardown, pin_cpus)
    work = Path(tempfile.mkdtemp(prefix="paddle_ext_ranks_"))
    logs = Path(log_dir).resolve() if log_dir else work / "log"   # the launcher runs in another cwd
    logs.mkdir(parents=True, exist_ok=True)
    results_dir = work / "results"
    results_dir.mkdir()
    payload = work / "payload.pkl"
    with open(payload, "wb") as f:
        pickle.dump({"module": module, "name": name, "args": tuple(args), "kwargs": dict(kwargs or {}),
                     "sys_path": _abs_sys_path(), "results": str(results_dir), "pin_cpus": pin_cpus}, f)
    tag = uuid.uuid4().hex
    _LAUNCHED_TAGS.append(tag)
    child_env = dict(os.environ)
    child_env.update(env or {})
    child_env[TAG_ENV] = tag
    child_env[HARNESS_ENV] = f"{os.getpid()}:{start_time(os.getpid())}"   # the ranks end if this process dies
    child_env.setdefault("GLOG_minloglevel", "2")
    child_env["PYTHONPATH"] = os.pathsep.join(_abs_sys_path())
    cmd = [sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", str(nproc),
           "--log_dir", str(logs), str(WORKER), str(payload)]
    launcher_out = open(work / "launcher.out", "wb")
    proc = subprocess.Popen(cmd, stdout=launcher_out, stderr=subprocess.STDOUT, env=child_env,
                            start_new_session=True, cwd=str(work))
    start = time.monotonic()
    failures: list[RankFailure] = []
    first_failure_at = None
    all_returned = False
    try:
        while True:
            done = {int(p.stem.split(".")[1]) for p in results_dir.glob("rank.*.pkl")}
            errors = sorted(r for r in done if _read(results_dir, r)[0] != "ok")
            if errors and first_failure_at is None:
                first_failure_at = time.monotonic()
            if len(done) == nproc and not errors:
                _release_rank_0_last(results_dir, nproc, exit_timeout / 2)
                all_returned = True
                failures = _wait_for_exits(results_dir, nproc, logs, exit_timeout)
                break
            exited = proc.poll() is not None
            now = time.monotonic()
            if exited or (first_failure_at is not None and now - first_failure_at > GRACE_SECONDS) \
                    or now - start > timeout:
                # give ranks that are writing their result a moment
                if exited:
                    time.sleep(0.2)
                    done = {int(p.stem.split(".")[1]) for p in results_dir.glob("rank.*.pkl")}
                timed_out = now - start > timeout
                for r in range(nproc):
                    if r in done:
                        status, value = _read(results_dir, r)
                        if status != "ok":
                            failures.append(RankFailure(r, "raised", value, _log_tail(logs, r),
                                                        (results_dir / f"rank.{r}.pkl").stat().st_mtime))
                    elif _rank_process_gone(results_dir, r):
                        code = _exit_code(results_dir, r)
                        failures.append(RankFailure(r, "exited", "the rank's process exited without a result "
                                                    + (f"(exit code {code}; " if code is not None else "(")
                                                    + "os._exit, a signal or a crash; see its log)",
                                                    _log_tail(logs, r)))
                    elif timed_out:
                        failures.append(RankFailure(r, "timeout", f"no result after {timeout:.0f} s",
                                                    _log_tail(logs, r)))
                    elif first_failure_at is not None:
                        failures.append(RankFailure(r, "stopped", "killed after another rank failed",
                                                    _log_tail(logs, r)))
                    else:
                        failures.append(RankFailure(r, "exited", "exited without a result",
                                                    _log_tail(logs, r)))
                break
            time.sleep(0.05)
        for f in failures:
            f.action = last_action(str(results_dir / f"rank.{f.rank}.action"))
    finally:
        _kill_group(proc)
        launcher_out.close()
        leftovers = _reap(tag)
    if leftovers:
        raise HarnessError(f"processes {leftovers} of this run could not be killed")
    if failures:
        shutil.copy(work / "launcher.out", logs / "launcher.out")
        err = HarnessError(_format_failures(fn, nproc, failures, logs))
        err.failures = failures
        # every rank returned and only teardown went wrong: the values stay readable
        if all_returned:
            err.results = [_read(results_dir, r)[1] for r in range(nproc)]
        if log_dir and not keep_logs:
            _drop_work(work, logs)
        if all_returned and teardown == "warn":   # its values stand, the crash is said
            head = str(err).splitlines()[0]
            warnings.warn(f"paddle-ext: every rank returned its result, then: {head}", RuntimeWarning, stacklevel=2)
            return err.results
        raise err
    results = [_read(results_dir, r)[1] for r in range(nproc)]
    if not keep_logs:   # with log_dir the logs are there; otherwise in work, kept only if asked
        shutil.rmtree(work, ignore_errors=True)
    return results


def _drop_work(work: Path, logs: Path) -> None:
    """After a failed run whose logs live in ``log_dir``: the payload and results go, a crashed
    rank's core dump (the ranks' cwd is ``work``) joins the logs."""
    for core in work.glob("core*"):
        shutil.move(str(core), str(logs / core.name))
    shutil.rmtree(work, ignore_errors=True)


def _exit_code(results_dir: Path, rank: int) -> int | None:
    """The rank's exit code as its supervisor wrote it, or None while it runs."""
    try:
        return int((results_dir / f"rank.{rank}.exit").read_text())
    except (OSError, ValueError):
        return None


def _exit_codes(results_dir: Path, ranks, seconds: float) -> dict:
    """{rank: exit code} of ``ranks`` once all have exited, or of those that had after ``seconds``."""
    deadline = time.monotonic() + seconds
    codes = {}
    while len(codes) < len(ranks) and time.monotonic() < deadline:
        codes = {r: c for r in ranks if (c := _exit_code(results_dir, r)) is not None}
        time.sleep(0.05)
    return codes


def _release_rank_0_last(results_dir: Path, nproc: int, seconds: float) -> None:
    """Let every rank leave, rank 0 last. Rank 0 hosts Paddle's TCP store: a peer whose store
    connection closes while rank 0 runs its C++ static destructors sends the store's thread into a
    log call on a torn-down logger (abort, then SIGSEGV in Paddle's signal handler: exit code -11,
    no output). So the others go first, and rank 0 once they have exited or ``seconds`` later (a
    peer that hangs at exit is then still named alone)."""
    (results_dir / "release").touch()
    _exit_codes(results_dir, range(1, nproc), seconds)
    (results_dir / "release.0").touch()


def _wait_for_exits(results_dir: Path, nproc: int, logs: Path, exit_timeout: float) -> list[RankFailure]:
    """After every rank returned: each must finish interpreter teardown with exit code 0."""
    codes = _exit_codes(results_dir, range(nproc), exit_timeout)
    # a rank that exits with an error code of its own failed; the launcher then stops its peers
    # (SIGTERM/SIGKILL, or killed before they could report): those are "stopped", not the cause
    failed = [r for r, c in codes.items() if c > 0]
    failures = []
    for r in range(nproc):
        code = codes.get(r)
        if failed and r not in failed and code != 0:
            failures.append(RankFailure(r, "stopped", f"stopped by the launcher after rank {failed[0]} "
                                        f"failed at exit", _log_tail(logs, r)))
        elif code is None:
            failures.append(RankFailure(r, "hung at exit", f"returned its result but had not exited "
                                        f"{exit_timeout:.0f} s later (interpreter teardown hangs)",
                                        _log_tail(logs, r)))
        elif code != 0:
            failures.append(RankFailure(r, "failed at exit", f"returned its result, then exited with "
                                        f"code {code} during interpreter teardown", _log_tail(logs, r)))
    return failures


def _rank_process_gone(results_dir: Path, rank: int) -> bool:
    """True if rank ``rank`` started (wrote its pid) and its process is no longer running."""
    try:
        pid = int((results_dir / f"rank.{rank}.pid").read_text())
    except (OSError, ValueError):
        return False
    return not running(pid)


def _read(results_dir: Path, rank: int):
    path = results_dir / f"rank.{rank}.pkl"
    for _ in range(20):  # the file is renamed into place, but be patient with slow disks
        try:
            with open(path, "rb") as f:
                return pickle.load(f)
        except (EOFError, pickle.UnpicklingError):
            time.sleep(0.05)
    return ("error", f"rank {rank} wrote an unreadable result file {path}")


def _format_failures(fn: Callable, nproc: int, failures: list[RankFailure], logs: Path) -> str:
    primary = [f for f in failures if f.kind != "stopped"] or failures
    # the likely cause first: a rank whose process vanished (its peers then see "connection
    # reset"), else the first rank to report an error
    primary.sort(key=lambda f: (f.kind != "exited", f.at))
    head = ", ".join(f"rank {f.rank} {f.kind}" for f in primary)
    if len(primary) > 1 and (primary[0].kind == "exited" or primary[0].at < float("inf")):
        head += f"; rank {primary[0].rank} failed first"
    parts = [f"{fn.__module__}.{fn.__qualname__} on {nproc} ranks failed: {head} (logs in {logs})"]
    for f in primary:
        where = f"\nlast action: {f.action}" if f.action else ""
        parts.append(f"--- rank {f.rank} ({f.kind}) ---\n{f.detail.rstrip()}{where}\n"
                     f"--- tail of workerlog.{f.rank} ---\n{f.log_tail}")
    if all(f.log_tail.startswith("(no workerlog") for f in primary):
        launcher = logs / "launcher.out"
        tail = launcher.read_text(errors="replace").splitlines()[-25:] if launcher.exists() else []
        parts.append("--- the launcher itself failed; tail of its output ---\n" + "\n".join(tail))
    others = [f for f in failures if f not in primary]
    if others:
        parts.append("stopped after the failure above: " + "; ".join(
            f"rank {f.rank}" + (f" (last action: {f.action})" if f.action else "") for f in others))
    return "\n".join(parts)
