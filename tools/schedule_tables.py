"""Print docs/schedules.md's table per schedule: makespan, longest stage span and peak activation
memory of every schedule ``paddle-ext schedule`` knows, beside the figure its paper publishes.

    python tools/schedule_tables.py                            # the markdown tables
    python tools/schedule_tables.py --check docs/schedules.md  # exit 1 unless the file holds them

Settings: unit costs (F = I = W = 1 per rank's share of the model) at p = 4, m = 8 and p = 8,
m = 16, and the zero-bubble paper's profiled costs (Table 9, 1.5B model, p = 8, m = 24:
``passes/schedules/zb_auto_paper.py``). A schedule with ``v`` chunks per rank gets ``1/v`` of each
cost per chunk, so every figure is in the same unit and schedules compare row by row. "bubble"
is the longest stage span minus ``m (F + I + W)`` (the zero-bubble paper's measure: the cost of
a stage is its longest execution time); "peak" is the most activations any rank holds, in whole
microbatches (stage activations / v). The paper's columns evaluate the published formula at the
same setting (:data:`PAPER`); "—" where the paper gives none for it.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

from paddle_ext.passes import Costs, get_schedule_info, schedule_names, simulate_schedule
from paddle_ext.passes.schedules.searched import generate_searched
from paddle_ext.passes.schedules.zb_auto import zb_auto
from paddle_ext.passes.schedules.zb_auto_paper import TABLE9

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # v_schedules_table's recorded figures
BEGIN, END = "<!-- schedule_tables: begin -->", "<!-- schedule_tables: end -->"
_PROFILED = TABLE9[0]  # 1.5B, p = 8, m = 24
SETTINGS: Tuple[Tuple[str, int, int, Tuple[float, float, float]], ...] = (
    ("unit", 4, 8, (1.0, 1.0, 1.0)),
    ("unit", 8, 16, (1.0, 1.0, 1.0)),
    (f"Table 9 {_PROFILED.model}", _PROFILED.p, _PROFILED.m, _PROFILED.costs),
)


class Paper(NamedTuple):
    """A schedule's published figures: where from, the bubble as a function of
    ``(p, m, F, I, W)`` (stage costs; None where not published for these costs) and the peak in
    microbatches as a function of ``(p, m)``."""

    source: str
    bubble: Optional[Callable[[int, int, float, float, float], Optional[float]]] = None
    peak: Optional[Callable[[int, int], object]] = None  # a number, or a formula as text


def _equal_costs_only(value: float):
    """A bubble the paper gives only for F = I = W."""
    return lambda p, m, f, i, w: value if f == i == w else None


#: the papers' formulas (bubble with stage costs F, I, W; peak in microbatches)
PAPER: Dict[str, Paper] = {
    "FThenB": Paper("GPipe (Huang et al. 2019): (p-1)(F+B)", lambda p, m, f, i, w: (p - 1) * (f + i + w),
                    lambda p, m: m),
    "1F1B": Paper("PipeDream-Flush (Narayanan et al. 2021); zero-bubble paper Table 1: (p-1)(F+B+W), peak p",
                  lambda p, m, f, i, w: (p - 1) * (f + i + w), lambda p, m: min(p, m)),
    "VPP": Paper("Megatron interleaved (Narayanan et al. 2021): (p-1)(F+B) with chunk costs",
                 lambda p, m, f, i, w: (p - 1) * (f + i + w)),
    "LoopedBFS": Paper("Breadth-first PP (Lamy-Poirier 2023): as VPP for m >= p, peak m",
                       lambda p, m, f, i, w: (p - 1) * (f + i + w) if m >= p else None, lambda p, m: m),
    "ZBH1": Paper("Zero Bubble (Qi et al. 2024) Table 1: (p-1)(F+B-W), peak p",
                  lambda p, m, f, i, w: (p - 1) * (f + i - w), lambda p, m: min(p, m)),
    "ZBH2": Paper("Zero Bubble Table 1: (p-1)(F+B-2W), peak 2p-1",
                  lambda p, m, f, i, w: (p - 1) * (f + i - 2 * w), lambda p, m: min(2 * p - 1, m)),
    "ZBV": Paper("Zero Bubble §6 (ZB-V): 0 when F = B = W, peak p (1F1B's)", _equal_costs_only(0.0),
                 lambda p, m: min(p, m)),
    "DualPipeV": Paper("DeepSeek-V3 Table 2: peak PP+1 = 2p+1 chunks (its bubble counts idle time with "
                       "overlapped F&B pairs: see DualPipeV above)", None, lambda p, m: (2 * p + 1) / 2),
    "InterleavedZB": Paper("torch's InterleavedZeroBubble: no published figure"),
    "ZBAuto": Paper("Zero Bubble ZB-1p/2p: another memory model (see ZBAuto above)"),
    "VMin": Paper("Controllable memory (Qi et al. 2024): the authors' V-Min span; peak about 1/3 of 1F1B's",
                  None, lambda p, m: "p/3 + O(1)"),
    "VHalf": Paper("Controllable memory: the authors' V-Half span; peak about 1/2 of 1F1B's", None,
                   lambda p, m: "p/2 + O(1)"),
    "VZB": Paper("Controllable memory (V-ZB): 0 when F = B = W, peak p", _equal_costs_only(0.0),
                 lambda p, m: min(p, m)),
    "Eager1F1B": Paper("Paddle's Eager1F1B: no published figure"),
}


def _authors_bubble(name: str, p: int, m: int, costs) -> Optional[float]:
    """The authors' V-Min / V-Half bubble (their published generator, recorded in
    tools/v_schedules_table.py) at unit costs, in this tool's units."""
    from v_schedules_table import AUTHORS

    span = AUTHORS.get((name, p, m, (1, 1, 1)))
    if span is None or tuple(costs) != (1.0, 1.0, 1.0):
        return None
    return span / 2 - 3 * m  # their spans are in chunk units (a chunk costs 1/2 here)


def measure(name: str, p: int, m: int, costs) -> dict:
    """Makespan, longest span, bubble and peak (microbatches) of ``name`` at stage costs
    ``costs`` divided by its chunks."""
    info = get_schedule_info(name)
    v = info.default_chunks
    chunk = tuple(c / v for c in costs)
    if info.name == "ZBAuto":
        schedule = zb_auto(p, m, v, memory_limit=None, latency=0.0, costs=chunk)
    else:
        schedule = generate_searched(info.name, p, m, v, memory_limit=None, costs=chunk, latency=0.0)
    result = simulate_schedule(schedule, Costs(*chunk))
    span = max(result.spans)
    return {"makespan": result.makespan, "span": span, "bubble": span - m * sum(costs),
            "peak": max(result.peak_activations) / v, "chunks": v}


def _fmt(x) -> str:
    if isinstance(x, str):
        return x
    return "—" if x is None else f"{round(x, 2):g}"


def table_for(name: str) -> str:
    """One schedule's markdown table."""
    paper = PAPER[name]
    lines = [f"**{name}** — {paper.source}", "",
             "| setting | p | m | F,B,W | makespan | span | bubble | paper's bubble | peak (mb) | paper's peak |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for label, p, m, costs in SETTINGS:
        got = measure(name, p, m, costs)
        v = got["chunks"]
        stage = [c / v for c in costs]
        if name in ("VMin", "VHalf"):
            published = _authors_bubble(name, p, m, costs)
        else:
            published = paper.bubble(p, m, *stage) if paper.bubble else None
        paper_peak = paper.peak(p, m) if paper.peak else None
        lines.append(f"| {label} | {p} | {m} | {','.join(_fmt(c) for c in costs)} | {_fmt(got['makespan'])} | "
                     f"{_fmt(got['span'])} | {_fmt(got['bubble'])} | {_fmt(published)} | {_fmt(got['peak'])} | "
                     f"{_fmt(paper_peak)} |")
    return "\n".join(lines) + "\n"


def tables() -> str:
    """Every schedule's table, between the markers docs/schedules.md keeps them in."""
    parts: List[str] = [BEGIN, ""]
    for name in schedule_names():
        if name in PAPER:
            parts += [table_for(name)]
    missing = sorted(set(schedule_names()) - set(PAPER))
    if missing:
        raise SystemExit(f"schedules without a PAPER entry in tools/schedule_tables.py: {missing}; add one "
                         "(Paper(source) with no figures where none is published)")
    parts.append(END)
    return "\n".join(parts) + "\n"


def check(path: str, text: Optional[str] = None) -> Optional[str]:
    """None if ``path`` holds the generated tables, else what differs (first differing line)."""
    text = tables() if text is None else text
    with open(path, encoding="utf-8") as f:
        doc = f.read()
    if BEGIN not in doc or END not in doc:
        return f"{path} has no {BEGIN} ... {END} block"
    held = doc[doc.index(BEGIN):doc.index(END) + len(END)] + "\n"
    if held == text:
        return None
    for a, b in zip(held.splitlines(), text.splitlines()):
        if a != b:
            return f"{path} holds\n  {a}\nthe tool prints\n  {b}"
    return f"{path}'s block and the tool's differ in length"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", metavar="FILE", help="exit 1 unless FILE holds the tables as printed")
    args = parser.parse_args(argv)
    text = tables()
    if args.check:
        diff = check(args.check, text)
        if diff:
            print(f"{diff}\nregenerate with: python tools/schedule_tables.py", file=sys.stderr)
            return 1
        return 0
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
