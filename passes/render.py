"""Pictures of a simulated schedule: ASCII timeline, Chrome trace, matplotlib figure.

All three read a :class:`~paddle_ext.passes.simulate.SimulationResult`, so what you see is what
the simulator timed. matplotlib is imported only by :func:`draw_timeline`.

>>> from paddle_ext.passes.schedule_ir import parse_schedule
>>> from paddle_ext.passes.simulate import simulate_schedule
>>> r = simulate_schedule(parse_schedule("rank 0: 0F0 0F1 0B0 0B1\\nrank 1: 1F0 1B0 1F1 1B1"))
>>> print(format_timeline(r))
rank 0 | 0F0 0F1  .   .  0B0 ~~~  .  0B1 ~~~
rank 1 |  .  1F0 1B0 ~~~ 1F1 1B1 ~~~
"""
from __future__ import annotations

import json
from typing import Dict, List

from paddle_ext.errors import ScheduleError
from .schedule_ir import Kind
from .simulate import SimulationResult

__all__ = ["format_timeline", "chrome_trace", "write_chrome_trace", "draw_timeline", "KIND_COLORS"]

# one colour per compute kind (colour-blind friendly), grey for communication waits
KIND_COLORS = {Kind.F: "#4C72B0", Kind.B: "#55A868", Kind.I: "#DD8452", Kind.W: "#8172B3"}
COMM_COLOR = "#BBBBBB"


def format_timeline(result: SimulationResult, unit: float = 1.0) -> str:
    """One row per rank, one cell per ``unit`` of time: the action that starts there, ``~`` while
    it continues, ``.`` when the rank computes nothing. Communication and zero-cost actions are
    not drawn; the two actions of an overlapped F&B pair share their slot (the second in its
    second cell, when the slot has one)."""
    if unit <= 0:
        raise ScheduleError(f"unit must be > 0, got {unit}")
    width = max((len(str(a)) for acts in result.actions for a in acts if a.is_compute), default=1)
    n_cells = int(round(result.makespan / unit))
    labels = [f"rank {rank}" for rank in result.ranks]
    pad = max(len(label) for label in labels)
    idle = ".".center(width)
    lines = []
    for index, label in enumerate(labels):
        cells = [idle] * n_cells
        used = 0
        previous = None  # (start, end) of the last drawn compute action
        for action, start, end in result.timed(index):
            if not action.is_compute or end <= start:  # zero-cost actions take no cell
                continue
            first, last = int(round(start / unit)), int(round(end / unit))
            if previous == (start, end):  # the second action of an overlapped pair: next cell of the slot
                if first + 1 < min(last, n_cells):
                    cells[first + 1] = str(action).rjust(width)
                continue
            previous = (start, end)
            if first < n_cells:
                cells[first] = str(action).rjust(width)
            for cell in range(first + 1, min(last, n_cells)):
                cells[cell] = "~" * width
            used = max(used, last)
        lines.append(f"{label.ljust(pad)} | " + " ".join(cells[:used]))
    return "\n".join(lines)


def chrome_trace(result: SimulationResult, time_scale: float = 1000.0) -> Dict:
    """A Chrome/Perfetto trace (``chrome://tracing``): one thread per rank, one complete event
    per action, times multiplied by ``time_scale`` (default: 1 cost unit = 1 ms)."""
    events: List[Dict] = []
    for index, rank in enumerate(result.ranks):
        events.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": rank, "args": {"name": f"rank {rank}"}})
        for action, start, end in result.timed(index):
            events.append({"name": str(action), "cat": action.kind.value, "ph": "X", "pid": 0, "tid": rank,
                           "ts": start * time_scale, "dur": (end - start) * time_scale,
                           "args": {"stage": action.stage, "microbatch": action.microbatch}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_chrome_trace(result: SimulationResult, path: str, time_scale: float = 1000.0) -> None:
    """Write :func:`chrome_trace` as JSON to ``path``."""
    with open(path, "w", encoding="utf-8") as stream:
        json.dump(chrome_trace(result, time_scale), stream)


def draw_timeline(result: SimulationResult, path: str, title: str = "") -> None:
    """Save a timeline figure (``.png``, ``.svg``, ``.pdf``): one lane per rank, one box per
    compute action coloured by kind and labelled with its microbatch (and stage when a rank
    holds several). Needs matplotlib: ``pip install paddle-ext[plot]``."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError:
        raise ScheduleError("drawing a timeline needs matplotlib; install it with `pip install paddle-ext[plot]` "
                            "(or use --trace FILE.json for a Chrome trace)") from None
    multi_stage = any(len({a.stage for a in acts if a.is_compute}) > 1 for acts in result.actions)
    n_ranks = len(result.ranks)
    fig, ax = plt.subplots(figsize=(min(6 + result.makespan * 0.25, 40), 1.1 + 0.45 * n_ranks))
    for index, rank in enumerate(result.ranks):
        lane = n_ranks - 1 - index
        for action, start, end in result.timed(index):
            if end <= start:
                continue
            color = KIND_COLORS.get(action.kind, COMM_COLOR)
            ax.broken_barh([(start, end - start)], (lane + 0.1, 0.8), facecolors=color, edgecolor="white",
                           linewidth=0.6)
            if action.is_compute:
                label = f"{action.stage}:{action.microbatch}" if multi_stage else str(action.microbatch)
                ax.text((start + end) / 2, lane + 0.5, label, ha="center", va="center", fontsize=7, color="white")
    ax.set_yticks([n_ranks - 1 - i + 0.5 for i in range(n_ranks)])
    ax.set_yticklabels([f"rank {r}" for r in result.ranks])
    ax.set_xlim(0, result.makespan)
    ax.set_ylim(0, n_ranks)
    ax.set_xlabel("time (cost units)")
    kinds = sorted({a.kind for acts in result.actions for a in acts if a.is_compute}, key=lambda k: "FBIW".index(k.value))
    names = {Kind.F: "F forward", Kind.B: "B backward", Kind.I: "I backward (inputs)", Kind.W: "W backward (weights)"}
    ax.legend(handles=[Patch(color=KIND_COLORS[k], label=names[k]) for k in kinds], loc="lower right",
              bbox_to_anchor=(1.0, 1.0), ncol=len(kinds), fontsize=8, frameon=False, borderaxespad=0.2)
    subtitle = (f"makespan {result.makespan:g}, bubble {result.bubble_vs_ideal:.1%} of ideal, "
                f"peak activations {max(result.peak_activations)}")
    ax.set_title(f"{title}  ({subtitle})" if title else subtitle, fontsize=9, loc="left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
