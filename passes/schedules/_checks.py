"""Parameter checks shared by the generators: each failure names the parameter and the fix.

The generators take ``(n_ranks, n_microbatches, n_chunks)``; on the command line these are
``--stages`` (pipeline ranks), ``--microbatches`` and ``--chunks`` (stages per rank).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from paddle_ext.errors import ScheduleError

__all__ = ["SizeRule", "check_sizes", "require_chunks", "require_microbatches", "require_divisible"]


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


@dataclass(frozen=True)
class SizeRule:
    """The sizes one generator accepts; the generator checks them with :meth:`check`, so what it
    refuses and what :meth:`accepts` says are one rule. Beyond ints >= 1: ``chunks``, the one
    ``n_chunks`` allowed (None: any); ``min_microbatches_per_rank``, ``n_microbatches >= k *
    n_ranks``; ``multiple_of_ranks``, ``n_microbatches % n_ranks == 0``. Each ``*_why`` ends up in
    the error message (``{n_ranks}`` is filled in).

    >>> rule = SizeRule(chunks=2, chunks_why="a V", min_microbatches_per_rank=2, min_why="one per stage")
    >>> rule.accepts(2, 4, 2), rule.accepts(2, 3, 2), rule.accepts(2, 4, 1)
    (True, False, False)
    >>> rule.nearest(2, 3, 1)
    (2, 4, 2)
    """

    chunks: Optional[int] = None
    chunks_why: str = ""
    min_microbatches_per_rank: int = 1
    min_why: str = ""
    multiple_of_ranks: bool = False
    multiple_why: str = ""

    def check(self, name: str, n_ranks, n_microbatches, n_chunks) -> None:
        """Raise :class:`ScheduleError` naming the parameter and the fix unless the sizes are accepted."""
        check_sizes(name, n_ranks, n_microbatches, n_chunks)
        if self.chunks is not None:
            require_chunks(name, n_chunks, self.chunks, self.chunks_why)
        if self.min_microbatches_per_rank > 1:
            require_microbatches(name, n_microbatches, self.min_microbatches_per_rank * n_ranks,
                                 self.min_why.format(n_ranks=n_ranks))
        if self.multiple_of_ranks:
            require_divisible(name, n_microbatches, n_ranks, self.multiple_why)

    def accepts(self, n_ranks, n_microbatches, n_chunks) -> bool:
        """True if :meth:`check` passes."""
        try:
            self.check("", n_ranks, n_microbatches, n_chunks)
        except ScheduleError:
            return False
        return True

    def nearest(self, n_ranks: int, n_microbatches: int, n_chunks: int) -> Tuple[int, int, int]:
        """The accepted sizes an error message points to: the required ``n_chunks``, and
        ``n_microbatches`` raised to the minimum and then to the next multiple of ``n_ranks``."""
        p, m = max(1, n_ranks), max(1, n_microbatches, self.min_microbatches_per_rank * max(1, n_ranks))
        if self.multiple_of_ranks:
            m = -(-m // p) * p
        return p, m, self.chunks if self.chunks is not None else max(1, n_chunks)
