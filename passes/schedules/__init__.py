"""Schedule generators by name: pure functions ``(n_ranks, n_microbatches, n_chunks) -> schedule``.

Every generator returns ``{rank: [Action, ...]}`` with compute actions only (F, B, I, W), checks
its own constraints (raising :class:`~paddle_ext.errors.ScheduleError` with the fix) and lives in
one file of this package, which registers it (``@register_schedule`` in :mod:`._registry`); the
package imports its modules in sorted order and lists the schedules by their ``order``. Names are
case-insensitive; Paddle's names are kept, torch's are aliases.

>>> get_schedule_generator("gpipe") is get_schedule_generator("FThenB")
True
>>> get_schedule_info("interleaved1f1b").name, get_schedule_info("zbv").placement
('VPP', 'v')
>>> get_schedule_generator("ZB-H3")
Traceback (most recent call last):
...
paddle_ext.errors.ScheduleError: unknown schedule 'ZB-H3' (did you mean ZBH2, ZBH1?); known schedules: FThenB (alias GPipe), 1F1B, ..., VZB (alias V-ZB)...; names are case-insensitive
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import Dict, Optional, Tuple

from ..schedule_ir import Schedule
from ._checks import SizeRule
from ._registry import Generator, ScheduleInfo, lookup, register_schedule, registered

SCHEDULES: Dict[str, ScheduleInfo] = {}
_BY_LOWER_NAME: Dict[str, ScheduleInfo] = {}


def schedule_names() -> Tuple[str, ...]:
    """Canonical names, in the order above."""
    return tuple(SCHEDULES)


def get_schedule_info(name: str) -> ScheduleInfo:
    """The :class:`ScheduleInfo` of ``name`` (case-insensitive, aliases accepted)."""
    info = _BY_LOWER_NAME.get(str(name).lower())
    return info if info is not None else lookup(name)   # lookup names the close names and the list


def get_schedule_generator(name: str) -> Generator:
    """The generator function of ``name``."""
    return get_schedule_info(name).generate


def generate_schedule(name: str, n_ranks: int, n_microbatches: int, n_chunks: Optional[int] = None) -> Schedule:
    """``get_schedule_generator(name)(n_ranks, n_microbatches, n_chunks)``; ``n_chunks`` defaults
    to the schedule's own (1 for single-stage schedules, 2 for VPP, LoopedBFS, ZBV, DualPipeV...)."""
    info = get_schedule_info(name)
    return info.generate(n_ranks, n_microbatches, info.default_chunks if n_chunks is None else n_chunks)


def _collect() -> None:
    """Import every module of the package (sorted by name) so each generator registers itself,
    then fill :data:`SCHEDULES` in ``order`` and bind each generator under its function name."""
    for module in sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")):
        importlib.import_module(f"{__name__}.{module}")
    for info in registered():
        SCHEDULES[info.name] = info
        globals()[info.generate.__name__] = info.generate
    _BY_LOWER_NAME.update({name.lower(): info for info in SCHEDULES.values() for name in (info.name,) + info.aliases})


_collect()
__all__ = ["ScheduleInfo", "SizeRule", "SCHEDULES", "get_schedule_info", "get_schedule_generator",
           "generate_schedule", "schedule_names", "register_schedule"] + [
    info.generate.__name__ for info in SCHEDULES.values()]
