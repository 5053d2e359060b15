"""Shared pytest setup: the project's bytecode compiled once, no multi-rank test may leave a
process behind, the long tail runs on request."""
import compileall
import os
from pathlib import Path

import pytest

from paddle_ext.launcher.ranks import leftover_processes


ROOT = Path(__file__).resolve().parents[1]


def pytest_sessionstart(session):
    """Compile the project's sources to bytecode once, before any rank starts: with
    PYTHONDONTWRITEBYTECODE set (as on these machines) nothing caches it, and every rank process
    compiled paddle_ext again (0.3 s of CPU each; 104 s -> 89 s over two multi-rank files)."""
    for part in ("paddle_ext", "spmd_rules", "passes", "tests", "tools", "examples"):
        if (ROOT / part).is_dir():
            compileall.compile_dir(str(ROOT / part), quiet=2)


@pytest.fixture(autouse=True)
def no_leftover_ranks(request):
    yield
    if request.node.get_closest_marker("multirank"):
        left = leftover_processes()
        assert not left, f"{request.node.nodeid} left harness processes behind: {left}"


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
