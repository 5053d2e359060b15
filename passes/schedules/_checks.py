"""Parameter checks shared by the generators: each failure names the parameter and the fix.

The generators take ``(n_ranks, n_microbatches, n_chunks)``; on the command line these are
``--stages`` (pipeline ranks), ``--microbatches`` and ``--chunks`` (stages per rank).
"""
from __future__ import annotations

from paddle_ext.errors import ScheduleError

__all__ = ["check_sizes", "require_chunks", "require_microbatches", "require_divisible"]


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def check_sizes(name: str, n_ranks, n_microbatches, n_chunks) -> None:
    """All three are ints >= 1."""
    for param, flag, value in (("n_ranks", "--stages", n_ranks), ("n_microbatches", "--microbatches", n_microbatches),
                               ("n_chunks", "--chunks", n_chunks)):
        if not _is_count(value):
            raise ScheduleError(f"{name}: {param} ({flag}) must be an int >= 1, got {value!r}")


def require_chunks(name: str, n_chunks: int, allowed: int, why: str) -> None:
    """``n_chunks`` (stages per rank) must equal ``allowed``."""
    if n_chunks != allowed:
        raise ScheduleError(f"{name}: n_chunks (--chunks, stages per rank) must be {allowed} because {why}; "
                            f"got {n_chunks}: pass n_chunks={allowed}")


def require_microbatches(name: str, n_microbatches: int, minimum: int, why: str) -> None:
    """``n_microbatches >= minimum``."""
    if n_microbatches < minimum:
        raise ScheduleError(f"{name}: n_microbatches (--microbatches) must be >= {minimum} because {why}; "
                            f"got {n_microbatches}: use at least {minimum} microbatches")


def require_divisible(name: str, n_microbatches: int, n_ranks: int, why: str) -> None:
    """``n_microbatches`` is a multiple of ``n_ranks``."""
    if n_microbatches % n_ranks:
        lower, upper = n_microbatches // n_ranks * n_ranks, (n_microbatches // n_ranks + 1) * n_ranks
        hint = f"{lower} or {upper}" if lower else f"{upper}"
        raise ScheduleError(f"{name}: n_microbatches (--microbatches) must be a multiple of n_ranks ({n_ranks}) "
                            f"because {why}; got {n_microbatches}: use {hint}")
