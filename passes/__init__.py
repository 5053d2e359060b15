"""Pipeline schedules as data (pure Python, no Paddle import).

* :mod:`.schedule_ir` -- ``Action(stage, kind, microbatch)`` ("2F0"), schedules as
  ``{rank: [Action | None]}``, text grid, CSV in torch.distributed.pipelining's layout.
* :mod:`.schedules` -- one generator per file, each registering itself (``@register_schedule``):
  FThenB/GPipe, 1F1B, VPP/Interleaved1F1B, LoopedBFS, ZBH1, ZBH2, ZBV, DualPipeV, InterleavedZB,
  Eager1F1B, ZBAuto (searched under a memory limit), VMin, VHalf, VZB; ``get_schedule_generator(name)``.
* :mod:`.stage_placement` -- stage -> rank for the ``loop`` and ``v`` placements.
* :mod:`.lowering` -- ``add_send_recv``: SEND/RECV pairs, deadlock-free with blocking sends.
* :mod:`.validate` / :mod:`.simulate` -- ``validate_schedule``, ``simulate_schedule``.
* :mod:`.render` -- ASCII timeline, Chrome trace, matplotlib figure (imported lazily).
* :mod:`.runtime` -- every schedule on Paddle's dygraph pipelining: ``get_schedule("ZBV")``.
* :mod:`.static` -- the schedules as Paddle's static ``pipeline_scheduler_<NAME>`` passes.
"""
from .lowering import add_send_recv
from .render import chrome_trace, draw_timeline, format_timeline, write_chrome_trace
from .schedule_ir import (COMM_KINDS, COMPUTE_KINDS, Action, Kind, Schedule, compute_only,
                          dump_csv, format_grid, format_schedule, load_csv, parse_action,
                          parse_schedule, schedule_from_csv, schedule_to_csv)
from .schedules import (SCHEDULES, ScheduleInfo, generate_schedule, get_schedule_generator,
                        get_schedule_info, schedule_names)
from .simulate import Costs, SimulationResult, simulate_schedule
from .stage_placement import (loop_stage_to_rank, stage_to_rank, stage_to_rank_map,
                              stages_on_rank, v_stage_to_rank)
from .validate import ScheduleShape, validate_schedule


def __getattr__(name: str):
    """``get_schedule`` (the Paddle-runtime classes by name) loads :mod:`.runtime`, which imports
    Paddle, on first use (PEP 562): ``import paddle_ext.passes`` stays Paddle-free."""
    if name == "get_schedule":
        from .runtime import get_schedule

        return get_schedule
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "get_schedule", "Action", "Kind", "Schedule", "COMPUTE_KINDS", "COMM_KINDS", "parse_action", "compute_only", "format_grid",
    "format_schedule", "parse_schedule", "schedule_to_csv", "schedule_from_csv", "dump_csv", "load_csv",
    "SCHEDULES", "ScheduleInfo", "generate_schedule", "get_schedule_generator", "get_schedule_info",
    "schedule_names", "loop_stage_to_rank", "v_stage_to_rank", "stage_to_rank", "stages_on_rank",
    "stage_to_rank_map", "add_send_recv", "validate_schedule", "ScheduleShape", "simulate_schedule", "Costs",
    "SimulationResult", "format_timeline", "chrome_trace", "write_chrome_trace", "draw_timeline",
]
