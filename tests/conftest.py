"""Shared pytest setup: no multi-rank test may leave a process behind."""
import pytest

from paddle_ext.testing.launch import leftover_processes


@pytest.fixture(autouse=True)
def no_leftover_ranks(request):
    yield
    if request.node.get_closest_marker("multirank"):
        left = leftover_processes()
        assert not left, f"{request.node.nodeid} left harness processes behind: {left}"
