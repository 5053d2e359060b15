"""Paddle's registry of static pipeline passes (``pipeline_scheduler_<NAME>``), as paddle-ext uses it.

An adapter registers its pass classes here (:func:`register_pipeline_pass`, subclasses of
:func:`pipeline_pass_base`); the Engine's ``schedule_mode`` is resolved against what is
registered (:func:`resolve_schedule_mode`, case-insensitive, listing the names when unknown).
Paddle's registered names that cannot build a plan (:data:`PADDLE_BROKEN`) are not offered
unless paddle-ext replaced them.
"""
from __future__ import annotations

import difflib

from paddle.distributed.passes.pass_base import PassBase
from paddle.distributed.passes.pass_base import register_pass
from paddle.distributed.passes.pipeline_scheduler_pass.pipeline_pass_base import PipelinePassBase
import paddle.distributed.passes  # noqa: F401 - registers Paddle's passes

from ...errors import ScheduleError
from ..version import require_paddle

PASS_PREFIX = "pipeline_scheduler_"
#: Paddle's registered names whose PIR pass cannot build a plan (no ``_partial_pir_programs``)
PADDLE_BROKEN = frozenset({"ZBH1", "ZBVPP", "Eager1F1B"})


def pipeline_pass_base():
    """Paddle's ``PipelinePassBase`` (subclass it and implement ``_create_job_list`` and
    ``_partial_pir_programs``)."""
    require_paddle("static pipeline passes")

    return PipelinePassBase


def register_pipeline_pass(name: str, cls) -> None:
    """Register ``cls`` as ``pipeline_scheduler_<name>`` (overwrites a broken Paddle pass)."""
    require_paddle("static pipeline passes")

    register_pass(PASS_PREFIX + name)(cls)


def registered_pipeline_passes() -> dict:
    """``{name: pass class}`` of every registered ``pipeline_scheduler_<name>`` (Paddle's and paddle-ext's)."""
    require_paddle("static pipeline passes")

    return {name[len(PASS_PREFIX):]: cls for name, cls in PassBase._REGISTERED_PASSES.items()
            if name.startswith(PASS_PREFIX)}


def available_schedule_modes() -> list[str]:
    """``schedule_mode`` values that build a plan: Paddle's working passes and paddle-ext's."""
    return sorted(n for n, cls in registered_pipeline_passes().items()
                  if n not in PADDLE_BROKEN or getattr(cls, "paddle_ext_schedule", None))


def resolve_schedule_mode(name: str) -> str:
    """The registered name for ``name`` (exact, else case-insensitive); raises with the list."""
    modes = available_schedule_modes()
    if name in modes:
        return name
    lower = {m.lower(): m for m in modes}
    if str(name).lower() in lower:
        return lower[str(name).lower()]
    close = difflib.get_close_matches(str(name).lower(), list(lower), n=3, cutoff=0.5)
    hint = f" (did you mean {', '.join(lower[c] for c in close)}?)" if close else ""
    raise ScheduleError(
        f"unknown pipeline schedule_mode {name!r}{hint}; available: {', '.join(modes)}. Set "
        f"strategy.pipeline.schedule_mode to one of them (paddle-ext's need paddle_ext.install())")
