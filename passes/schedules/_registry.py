"""What a schedule is to its callers (:class:`ScheduleInfo`) and how a generator file declares it.

Each generator file registers its own schedule with :func:`register_schedule`, next to the
function; the package collects the registrations by importing every one of its modules in sorted
name order, and lists the schedules by their ``order`` (so a new schedule is its file and its test,
and the listing never depends on file names):

>>> from paddle_ext.passes.schedules import get_schedule_info
>>> info = get_schedule_info("DualPipeV")
>>> info.valid_sizes(2, 4), info.valid_sizes(2, 3), info.valid_sizes(2, 4, n_chunks=1)
(True, False, False)
>>> info.nearest_valid_sizes(2, 3, 1), get_schedule_info("VPP").nearest_valid_sizes(4, 6, 3)
((2, 4, 2), (4, 6, 3))
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Tuple

from paddle_ext.errors import ScheduleError
from ..schedule_ir import Schedule
from ._checks import SizeRule

__all__ = ["Generator", "ScheduleInfo", "register_schedule", "registered"]

Generator = Callable[[int, int, int], Schedule]


@dataclass(frozen=True)
class ScheduleInfo:
    """A generator and what a caller needs to know about it, the sizes it accepts included
    (``sizes`` is the rule the generator itself checks; ``order`` is where it lists)."""

    name: str
    generate: Generator
    placement: str  # "loop" (stage s on rank s % p) or "v"
    default_chunks: int  # stages per rank when not given
    sizes: SizeRule  # the (n_ranks, n_microbatches, n_chunks) the generator accepts
    aliases: Tuple[str, ...] = ()
    summary: str = ""
    order: int = field(default=1000, compare=False)  # position in listings (schedule_names, CLI, errors)

    def valid_sizes(self, n_ranks: int, n_microbatches: int, n_chunks: Optional[int] = None) -> bool:
        """True if the generator accepts these sizes (``n_chunks`` defaults to the schedule's);
        if False, the generator raises a :class:`~paddle_ext.errors.ScheduleError` naming the fix."""
        return self.sizes.accepts(n_ranks, n_microbatches, self.default_chunks if n_chunks is None else n_chunks)

    def nearest_valid_sizes(self, n_ranks: int, n_microbatches: int,
                            n_chunks: Optional[int] = None) -> Tuple[int, int, int]:
        """``(n_ranks, n_microbatches, n_chunks)`` the generator accepts, as close as the error's fix."""
        return self.sizes.nearest(n_ranks, n_microbatches, self.default_chunks if n_chunks is None else n_chunks)


_REGISTERED: List[ScheduleInfo] = []


def register_schedule(*, name: str, placement: str, default_chunks: int, sizes: SizeRule, order: int,
                      aliases: Tuple[str, ...] = (), summary: str = "") -> Callable[[Generator], Generator]:
    """Decorator: declare the decorated generator as schedule ``name`` (returns it unchanged)."""
    if placement not in ("loop", "v"):
        raise ValueError(f"schedule {name!r}: placement must be 'loop' or 'v', got {placement!r}")

    def decorate(generate: Generator) -> Generator:
        _REGISTERED.append(ScheduleInfo(name, generate, placement, default_chunks, sizes, tuple(aliases), summary,
                                        order))
        return generate
    return decorate


def lookup(name: str) -> ScheduleInfo:
    """The registered :class:`ScheduleInfo` of ``name`` (case-insensitive, aliases accepted); an
    unknown name is a :class:`~paddle_ext.errors.ScheduleError` with the close names and the list."""
    infos = registered()
    by_lower = {n.lower(): info for info in infos for n in (info.name,) + info.aliases}
    info = by_lower.get(str(name).lower())
    if info is None:
        close = difflib.get_close_matches(str(name).lower(), list(by_lower), n=3, cutoff=0.6)
        suggestions = list(dict.fromkeys(by_lower[c].name for c in close))
        hint = f" (did you mean {', '.join(suggestions)}?)" if close else ""
        known = ", ".join(i.name + (f" (alias {', '.join(i.aliases)})" if i.aliases else "") for i in infos)
        raise ScheduleError(f"unknown schedule {name!r}{hint}; known schedules: {known}; names are case-insensitive")
    return info


def registered() -> Tuple[ScheduleInfo, ...]:
    """Every registration so far, by ``order`` (a name registered twice raises)."""
    infos = sorted(_REGISTERED, key=lambda info: (info.order, info.name))
    names = [n.lower() for info in infos for n in (info.name,) + info.aliases]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"schedule names registered twice: {', '.join(twice)}")
    return tuple(infos)
