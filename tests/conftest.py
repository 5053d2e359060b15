"""Shared pytest setup: no multi-rank test may leave a process behind."""
import pytest

from paddle_ext.testing.launch import TAG_ENV


def _harness_processes():
    import os
    from pathlib import Path

    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            env = (entry / "environ").read_bytes()
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if f"{TAG_ENV}=".encode() in env and ") Z" not in stat:
            found.append(int(entry.name))
    return found


@pytest.fixture(autouse=True)
def no_leftover_ranks(request):
    yield
    if request.node.get_closest_marker("multirank"):
        left = _harness_processes()
        assert not left, f"{request.node.nodeid} left harness processes behind: {left}"
