"""ZBAuto at the zero-bubble paper's Table 5 settings: makespan and longest stage span of ZB-H2
and of ZBAuto (each objective leading) at K = 2p, with the lower bounds, the paper's bubble rates
and the search time (CPU seconds).

    python tools/zb_auto_table5.py [--memory-limit-factor 2] [--rows 1.5B,6.2B] [--json]

The costs are Table 9's (passes/schedules/zb_auto_paper.py); a figure is "makespan / span
(bubble rate)", the bubble rate being the paper's (span - m(F+B+W)) / span. docs/schedules.md's
ZBAuto table is this tool's output.
"""
from __future__ import annotations

import argparse
import json
import time

from paddle_ext.passes import Costs, generate_schedule, simulate_schedule
from paddle_ext.passes.schedules.zb_auto import search_zb_auto
from paddle_ext.passes.schedules.zb_auto_paper import TABLE5_BUBBLE_RATES, TABLE9


def rate(span: float, ideal: float) -> float:
    return (span - ideal) / span


def measure(row, factor: int) -> dict:
    """Every figure of one Table 9 row at ``K = factor * p``."""
    k = factor * row.p
    ideal = row.m * sum(row.costs)
    h2 = simulate_schedule(generate_schedule("ZBH2", row.p, row.m), Costs(*row.costs), row.latency)
    out = {"model": row.model, "p": row.p, "m": row.m, "memory_limit": k,
           "ZBH2": {"makespan": h2.makespan, "max_span": max(h2.spans), "bubble_rate": rate(max(h2.spans), ideal),
                    "peak": max(h2.peak_activations)},
           "paper": TABLE5_BUBBLE_RATES[(row.model, row.m)]}
    for objective in ("makespan", "span"):
        start = time.process_time()
        res = search_zb_auto(row.p, row.m, row.costs, k, row.latency, objective=objective)
        out[objective] = {"makespan": res.makespan, "max_span": res.max_span, "bubble_rate": res.bubble_rate,
                          "peak": max(res.peak_activations), "source": res.source,
                          "seconds": round(time.process_time() - start, 2)}
        out["lower_bounds"] = {"makespan": res.lower_bounds[0], "max_span": res.lower_bounds[1],
                               "bubble_rate": rate(res.lower_bounds[1], ideal)}
    return out


def fig(d: dict) -> str:
    return f"{d['makespan']:.2f} / {d['max_span']:.2f} ({d['bubble_rate']:.4f})"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memory-limit-factor", type=int, default=2, help="K = factor * p (default 2)")
    parser.add_argument("--rows", default="", help="model sizes to run, e.g. 1.5B,6.2B (default all)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a markdown table")
    args = parser.parse_args(argv)
    wanted = {r.strip() for r in args.rows.split(",") if r.strip()}
    rows = [measure(row, args.memory_limit_factor) for row in TABLE9 if not wanted or row.model in wanted]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print("| setting | K | ZB-H2 | paper ZB-H2 | ZBAuto, makespan first | ZBAuto, span first | lower bounds "
          "| paper ZB-2p | seconds |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} p={r['p']} m={r['m']} | {r['memory_limit']} | {fig(r['ZBH2'])} "
              f"| {r['paper']['ZBH2']:.4f} | {fig(r['makespan'])} | {fig(r['span'])} | {fig(r['lower_bounds'])} "
              f"| {r['paper']['ZB-2p']:.4f} | {r['makespan']['seconds']:.2f} / {r['span']['seconds']:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
