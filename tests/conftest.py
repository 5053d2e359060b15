"""Shared pytest setup: the project's bytecode compiled once, no multi-rank test may leave a
process behind, the long tail runs on request, and the split of work between CI's two pytest-xdist
workers (``-n 2``, scheduled by :class:`RanksApart`): every test that launches ranks in one scope,
run one after another on one worker as before, but for :data:`SECOND_RANKS` (a second scope, run
on the other worker beside the first); the one-process tests, a module per scope, on the other
worker's spare CPU (SCHED_IDLE)."""
import compileall
import os
from pathlib import Path

import pytest

from paddle_ext.launcher.ranks import leftover_processes


ROOT = Path(__file__).resolve().parents[1]


def pytest_sessionstart(session):
    """Compile the project's sources to bytecode once (under xdist: in the controller), before
    any rank starts: with PYTHONDONTWRITEBYTECODE set (as on these machines) nothing caches it, and
    every rank process compiled paddle_ext again (0.3 s of CPU each; 104 s -> 89 s over two
    multi-rank files)."""
    if hasattr(session.config, "workerinput"):
        return
    for part in ("paddle_ext", "spmd_rules", "passes", "tests", "tools", "examples"):
        if (ROOT / part).is_dir():
            compileall.compile_dir(str(ROOT / part), quiet=2)


@pytest.fixture(autouse=True)
def no_leftover_ranks(request):
    yield
    if request.node.get_closest_marker("multirank"):
        left = leftover_processes()
        assert not left, f"{request.node.nodeid} left harness processes behind: {left}"


#: test directories whose tests launch ranks (``run_ranks``): one xdist scope, one at a time
RANK_DIRS = ("multirank", "docs")
RANKS_GROUP = "ranks"
#: rank-launching modules that form a second scope of their own: the other worker runs them beside
#: the first scope's launches, on the CPU those leave idle (a load of about 1 on 2 cores), at the
#: normal policy; each launch has its own tag, log dir and timeout, and Paddle's launcher picks
#: free ports, so two launches at a time do not meet. PaddleNLP's models: ~260 s of launches, each
#: with a 300 s bound.
SECOND_RANKS = {"tests/multirank/test_real_models.py": "ranks-models"}
#: the scheduling policy of a worker while it runs a one-process test under xdist: SCHED_IDLE
#: runs only on a CPU nothing else wants, and a waking rank takes the CPU from it at once (under
#: nice 10 the launches slowed by nearly all the time the one-process tests took: 25 s saved of 23 min)
ONE_PROCESS_POLICY = getattr(os, "SCHED_IDLE", None)

def _group(nodeid: str) -> str:
    """:data:`RANKS_GROUP` for a test under ``tests/<RANK_DIRS>`` (:data:`SECOND_RANKS`' scope for
    those modules), else its module's path."""
    path = nodeid.split("::", 1)[0]
    parts = path.split("/")
    if len(parts) > 2 and parts[-2] in RANK_DIRS:
        return SECOND_RANKS.get(path, RANKS_GROUP)
    return path


def _launches(group: str) -> bool:
    return group == RANKS_GROUP or group in SECOND_RANKS.values()


try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:   # without pytest-xdist (the test extra has it) the suite runs in one process
    pass
else:
    class RanksApart(LoadScopeScheduling):
        """xdist's scope scheduling with the scopes of :func:`_group`: the rank launchers are one
        scope (largest first, so it starts at once), every other module its own."""

        def _split_scope(self, nodeid: str) -> str:
            return _group(nodeid)

    def pytest_xdist_make_scheduler(config, log):
        return RanksApart(config, log)


@pytest.fixture(autouse=True)
def xdist_priority(request):
    """Under xdist, a worker runs one-process tests under SCHED_IDLE (:data:`ONE_PROCESS_POLICY`)
    and the ranks group under the normal policy: the one-process tests take only the CPU the
    launches leave idle (load ~1 on 2 cores). Without xdist nothing changes; where the policy
    cannot be set (not Linux) or set back (not root), the worker keeps the one it has."""
    if hasattr(request.config, "workerinput") and ONE_PROCESS_POLICY is not None:
        want = os.SCHED_OTHER if _launches(_group(request.node.nodeid)) else ONE_PROCESS_POLICY
        if os.sched_getscheduler(0) != want:
            try:
                os.sched_setscheduler(0, want, os.sched_param(0))
            except PermissionError:
                pass
    yield

LONG_TAIL_ENV = "PADDLE_EXT_LONG_TAIL"


def pytest_collection_modifyitems(config, items):
    """Tests marked ``long_tail`` (README: what CI leaves out to keep its 25-minute budget) are
    skipped, with the reason in pytest's summary, unless PADDLE_EXT_LONG_TAIL=1."""
    if os.environ.get(LONG_TAIL_ENV) == "1":
        return
    skip = pytest.mark.skip(reason=f"long tail, outside CI's 25-minute budget: run with {LONG_TAIL_ENV}=1 (README)")
    for item in items:
        if item.get_closest_marker("long_tail"):
            item.add_marker(skip)

