"""Schedule generators by name: pure functions ``(n_ranks, n_microbatches, n_chunks) -> schedule``.

Every generator returns ``{rank: [Action, ...]}`` with compute actions only (F, B, I, W), checks
its own constraints (raising :class:`~paddle_ext.errors.ScheduleError` with the fix) and has one
file in this package. Names are case-insensitive; Paddle's names are kept, torch's are aliases.

>>> get_schedule_generator("gpipe") is get_schedule_generator("FThenB")
True
>>> get_schedule_info("interleaved1f1b").name, get_schedule_info("zbv").placement
('VPP', 'v')
>>> get_schedule_generator("ZB-H3")
Traceback (most recent call last):
...
paddle_ext.errors.ScheduleError: unknown schedule 'ZB-H3' (did you mean ZBH2, ZBH1?); known schedules: FThenB (alias GPipe), 1F1B, VPP (alias Interleaved1F1B), LoopedBFS, ZBH1, ZBH2, ZBV (alias ZBVZeroBubble), DualPipeV, InterleavedZB (alias InterleavedZeroBubble), ZBAuto (alias ZB-Auto), VMin (alias V-Min), VHalf (alias V-Half), VZB (alias V-ZB); names are case-insensitive
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

from paddle_ext.errors import ScheduleError
from ..schedule_ir import Schedule
from ._checks import SizeRule
from .dualpipe_v import SIZES as _DUALPIPE_V, dualpipe_v
from .fthenb import SIZES as _FTHENB, fthenb
from .interleaved_1f1b import SIZES as _INTERLEAVED_1F1B, interleaved_1f1b
from .interleaved_zb import SIZES as _INTERLEAVED_ZB, interleaved_zb
from .looped_bfs import SIZES as _LOOPED_BFS, looped_bfs
from .one_f_one_b import SIZES as _ONE_F_ONE_B, one_f_one_b
from .zb_h1 import SIZES as _ZB_H1, zb_h1
from .zb_h2 import SIZES as _ZB_H2, zb_h2
from .zb_v import SIZES as _ZB_V, zb_v
from .zb_auto import SIZES as _ZB_AUTO, zb_auto
from .v_memory import SIZES as _V_MEMORY, v_half, v_min, v_zb

__all__ = ["ScheduleInfo", "SizeRule", "SCHEDULES", "get_schedule_info", "get_schedule_generator",
           "generate_schedule", "schedule_names"] + ["fthenb", "one_f_one_b", "interleaved_1f1b", "looped_bfs",
                                                     "zb_h1", "zb_h2", "zb_v", "dualpipe_v", "interleaved_zb",
                                                     "zb_auto", "v_min", "v_half", "v_zb"]

Generator = Callable[[int, int, int], Schedule]


@dataclass(frozen=True)
class ScheduleInfo:
    """A generator and what a caller needs to know about it, the sizes it accepts included
    (``sizes`` is the rule the generator itself checks).

    >>> info = get_schedule_info("DualPipeV")
    >>> info.valid_sizes(2, 4), info.valid_sizes(2, 3), info.valid_sizes(2, 4, n_chunks=1)
    (True, False, False)
    >>> info.nearest_valid_sizes(2, 3, 1), get_schedule_info("VPP").nearest_valid_sizes(4, 6, 3)
    ((2, 4, 2), (4, 6, 3))
    """

    name: str
    generate: Generator
    placement: str  # "loop" (stage s on rank s % p) or "v"
    default_chunks: int  # stages per rank when not given
    sizes: SizeRule  # the (n_ranks, n_microbatches, n_chunks) the generator accepts
    aliases: Tuple[str, ...] = ()
    summary: str = ""

    def valid_sizes(self, n_ranks: int, n_microbatches: int, n_chunks: Optional[int] = None) -> bool:
        """True if the generator accepts these sizes (``n_chunks`` defaults to the schedule's);
        if False, the generator raises a :class:`~paddle_ext.errors.ScheduleError` naming the fix."""
        return self.sizes.accepts(n_ranks, n_microbatches, self.default_chunks if n_chunks is None else n_chunks)

    def nearest_valid_sizes(self, n_ranks: int, n_microbatches: int,
                            n_chunks: Optional[int] = None) -> Tuple[int, int, int]:
        """``(n_ranks, n_microbatches, n_chunks)`` the generator accepts, as close as the error's fix."""
        return self.sizes.nearest(n_ranks, n_microbatches, self.default_chunks if n_chunks is None else n_chunks)


SCHEDULES: Dict[str, ScheduleInfo] = {info.name: info for info in (
    ScheduleInfo("FThenB", fthenb, "loop", 1, _FTHENB, ("GPipe",), "all forwards, then all backwards"),
    ScheduleInfo("1F1B", one_f_one_b, "loop", 1, _ONE_F_ONE_B, (), "warm-up forwards, then one forward one backward"),
    ScheduleInfo("VPP", interleaved_1f1b, "loop", 2, _INTERLEAVED_1F1B, ("Interleaved1F1B",),
                 "1F1B over v interleaved chunks"),
    ScheduleInfo("LoopedBFS", looped_bfs, "loop", 2, _LOOPED_BFS, (), "breadth-first over v looped chunks"),
    ScheduleInfo("ZBH1", zb_h1, "loop", 1, _ZB_H1, (), "split backward, W deferred, 1F1B memory"),
    ScheduleInfo("ZBH2", zb_h2, "loop", 1, _ZB_H2, (), "split backward, more warm-up, 2x 1F1B memory"),
    ScheduleInfo("ZBV", zb_v, "v", 2, _ZB_V, ("ZBVZeroBubble",), "zero bubble on a V placement, 1F1B memory"),
    ScheduleInfo("DualPipeV", dualpipe_v, "v", 2, _DUALPIPE_V, (),
                 "DeepSeek's DualPipeV order (F&B pairs run in sequence)"),
    ScheduleInfo("InterleavedZB", interleaved_zb, "loop", 2, _INTERLEAVED_ZB, ("InterleavedZeroBubble",),
                 "interleaved 1F1B with split backward, W deferred"),
    ScheduleInfo("ZBAuto", zb_auto, "loop", 1, _ZB_AUTO, ("ZB-Auto",),
                 "searched under a memory limit (by name: costs 1,1,1, limit ceil(1.5p) microbatches)"),
    ScheduleInfo("VMin", v_min, "v", 2, _V_MEMORY, ("V-Min",),
                 "V shape, peak min(p, (p+4)//3) microbatches (about 1/3 of 1F1B)"),
    ScheduleInfo("VHalf", v_half, "v", 2, _V_MEMORY, ("V-Half",),
                 "V shape, peak min(p, (p+2)//2) microbatches (about 1/2 of 1F1B)"),
    ScheduleInfo("VZB", v_zb, "v", 2, _V_MEMORY, ("V-ZB",), "V shape, zero bubble, peak p microbatches (1F1B's)"),
)}
_BY_LOWER_NAME = {name.lower(): info for info in SCHEDULES.values() for name in (info.name,) + info.aliases}


def schedule_names() -> Tuple[str, ...]:
    """Canonical names, in the order above."""
    return tuple(SCHEDULES)


def get_schedule_info(name: str) -> ScheduleInfo:
    """The :class:`ScheduleInfo` of ``name`` (case-insensitive, aliases accepted)."""
    info = _BY_LOWER_NAME.get(str(name).lower())
    if info is None:
        close = difflib.get_close_matches(str(name).lower(), list(_BY_LOWER_NAME), n=3, cutoff=0.6)
        suggestions = list(dict.fromkeys(_BY_LOWER_NAME[c].name for c in close))
        hint = f" (did you mean {', '.join(suggestions)}?)" if close else ""
        known = ", ".join(i.name + (f" (alias {', '.join(i.aliases)})" if i.aliases else "") for i in SCHEDULES.values())
        raise ScheduleError(f"unknown schedule {name!r}{hint}; known schedules: {known}; names are case-insensitive")
    return info


def get_schedule_generator(name: str) -> Generator:
    """The generator function of ``name``."""
    return get_schedule_info(name).generate


def generate_schedule(name: str, n_ranks: int, n_microbatches: int, n_chunks: Optional[int] = None) -> Schedule:
    """``get_schedule_generator(name)(n_ranks, n_microbatches, n_chunks)``; ``n_chunks`` defaults
    to the schedule's own (1 for single-stage schedules, 2 for VPP, LoopedBFS, ZBV, DualPipeV...)."""
    info = get_schedule_info(name)
    return info.generate(n_ranks, n_microbatches, info.default_chunks if n_chunks is None else n_chunks)
