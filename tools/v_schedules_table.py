"""Print docs/schedules.md's V-Min / V-Half table: span and peak of paddle-ext's orders against the
controllable-memory paper's (Qi et al. 2024) at the same peak.

    python tools/v_schedules_table.py            # the markdown table
    python tools/v_schedules_table.py --check docs/schedules.md   # exit 1 unless the file holds it

"authors" is the makespan of the authors' published V-Min / V-Half orders (their generator run
for each size, its orders fed to paddle-ext's validate_schedule and simulate_schedule; unit costs
F = I = W = 1 per chunk, or the costs shown, B being I); "before" is paddle-ext's memory-capped
greedy before issue #38 (its order was built at unit costs whatever the costs). Both are recorded
figures; "now" and "peak" (stage activations, the most on any rank; all three have the same peak)
are computed here from the generators.
"""
from __future__ import annotations

import argparse
import sys
from typing import Dict, List, Tuple

from paddle_ext.passes import Costs, generate_schedule, simulate_schedule
from paddle_ext.passes.schedules.v_memory import v_half, v_min

Key = Tuple[str, int, int, Tuple[int, int, int]]
UNIT, SLOW_B = (1, 1, 1), (1, 2, 1)
SIZES = [(p, m) for p in (4, 6, 8) for m in (p, 2 * p, 4 * p, 8 * p)]
_AUTHORS_UNIT = {  # (p, m): (V-Min, V-Half)
    (4, 4): (35, 34), (4, 8): (59, 53), (4, 16): (107, 101), (4, 32): (203, 197),
    (6, 6): (53, 48), (6, 12): (89, 83), (6, 24): (161, 155), (6, 48): (305, 299),
    (8, 8): (75, 65), (8, 16): (123, 113), (8, 32): (219, 209), (8, 64): (411, 401)}
_AUTHORS_SLOW_B = {
    (4, 4): (61, 52), (4, 8): (109, 82), (4, 16): (205, 154), (4, 32): (397, 298),
    (6, 6): (93, 78), (6, 12): (165, 129), (6, 24): (309, 237), (6, 48): (597, 453),
    (8, 8): (131, 108), (8, 16): (227, 176), (8, 32): (419, 320), (8, 64): (803, 608)}
_BEFORE_UNIT = {
    (4, 4): (37, 32), (4, 8): (69, 57), (4, 16): (136, 105), (4, 32): (264, 201),
    (6, 6): (55, 50), (6, 12): (94, 87), (6, 24): (166, 159), (6, 48): (310, 303),
    (8, 8): (73, 68), (8, 16): (125, 119), (8, 32): (221, 215), (8, 64): (413, 407)}
_BEFORE_SLOW_B = {
    (4, 4): (60, 54), (4, 8): (107, 99), (4, 16): (195, 195), (4, 32): (379, 387),
    (6, 6): (93, 86), (6, 12): (170, 157), (6, 24): (314, 301), (6, 48): (602, 589),
    (8, 8): (125, 113), (8, 16): (229, 217), (8, 32): (421, 409), (8, 64): (805, 793)}


def _keyed(table) -> Dict[Key, int]:
    out = {}
    for costs, figures in table:
        for (p, m), (v_min_span, v_half_span) in figures.items():
            out[("VMin", p, m, costs)], out[("VHalf", p, m, costs)] = v_min_span, v_half_span
    return out


AUTHORS: Dict[Key, int] = _keyed(((UNIT, _AUTHORS_UNIT), (SLOW_B, _AUTHORS_SLOW_B)))
BEFORE: Dict[Key, int] = _keyed(((UNIT, _BEFORE_UNIT), (SLOW_B, _BEFORE_SLOW_B)))


def measure(name: str, p: int, m: int, costs: Tuple[int, int, int]) -> Tuple[float, int]:
    """``(makespan, peak stage activations)`` of paddle-ext's ``name`` order at ``costs``."""
    generate = v_min if name == "VMin" else v_half
    result = simulate_schedule(generate(p, m, costs=costs), Costs(*costs))
    return result.makespan, max(result.peak_activations)


def table() -> str:
    """The markdown tables (unit costs, then F,B,W = 1,2,1)."""
    lines: List[str] = []
    for costs in (UNIT, SLOW_B):
        with_1f1b = costs == UNIT
        lines += [f"F,B,W = {','.join(map(str, costs))}:", "",
                  "| p | m | V-Min authors | before | now | peak | V-Half authors | before | now | peak |"
                  + (" 1F1B |" if with_1f1b else ""),
                  "|---|---|---|---|---|---|---|---|---|---|" + ("---|" if with_1f1b else "")]
        for p, m in SIZES:
            cells = [str(p), str(m)]
            for name in ("VMin", "VHalf"):
                span, peak = measure(name, p, m, costs)
                cells += [str(AUTHORS[name, p, m, costs]), str(BEFORE[name, p, m, costs]), f"{span:g}", str(peak)]
            if with_1f1b:  # in chunk units: 1F1B's stages are twice a V chunk
                cells.append(f"{2 * simulate_schedule(generate_schedule('1F1B', p, m)).makespan:g}")
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", metavar="FILE", help="exit 1 unless FILE holds the table as printed")
    args = parser.parse_args(argv)
    text = table()
    if args.check:
        with open(args.check, encoding="utf-8") as f:
            if text not in f.read():
                print(f"{args.check} does not hold the current table; paste this:\n{text}", file=sys.stderr)
                return 1
        return 0
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
