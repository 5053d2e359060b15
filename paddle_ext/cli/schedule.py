"""``paddle-ext schedule``: generate, check, simulate and draw a pipeline schedule.

    paddle-ext schedule NAME --stages P --microbatches M [--chunks V] [--costs F,B,W] [--memory-limit K]
                        [--latency L] [--objective makespan|span] [--lowered] [--recv blocking|early]
                        [--overlap max|sum|off] [--json] [--csv FILE] [--out FILE.png|.svg] [--trace FILE.json]
    paddle-ext schedule --compare 1F1B,ZBH1,ZBV -P 4 -M 8

``--stages`` is the number of pipeline ranks ``p`` (Paddle's ``pp_degree``); ``--chunks`` is
stages per rank ``v`` (default: the schedule's own, 2 for VPP, LoopedBFS, ZBV, DualPipeV,
InterleavedZB), so the model is cut into ``p * v`` stages. ``--costs F,B,W`` are the times of a
forward, of a backward for inputs (``I``; a full ``B`` costs ``B + W``) and of a backward for
weights, per stage; the default ``1,1,1`` is the zero-bubble paper's equal-cost case.
``--recv`` picks the runtime model of a receive in the lowered schedule (``blocking``: it waits
where it sits; ``early``: posted there, waited by the compute that needs it) and implies
``--lowered``; ``--overlap max|sum`` times DualPipeV's overlapped F&B pairs as one slot (``off``,
the default, runs them one after the other). ``--compare`` adds both receive models side by side.
``--objective`` tells ZBAuto which figure leads its search: ``makespan`` (default; then the
longest stage span) or ``span`` (the longest stage span, the zero-bubble paper's bubble-rate
measure; then the makespan); ZBAuto's text and JSON output give both figures.
Everything runs in pure Python; no Paddle is imported.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..errors import ScheduleError

_MAX_TIMELINE_CELLS = 240  # wider timelines are not printed; use --out or --trace


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "schedule", help="generate, validate, simulate and draw a pipeline schedule",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    from ..passes.schedules import SCHEDULES  # the listing is the table's (a new schedule appears by itself)
    names = ", ".join("/".join((info.name,) + info.aliases) for info in SCHEDULES.values())
    parser.add_argument("name", nargs="?", help=f"schedule name (case-insensitive): {names}")
    parser.add_argument("-P", "--stages", type=int, required=True, help="pipeline ranks p (Paddle's pp_degree)")
    parser.add_argument("-M", "--microbatches", type=int, required=True, help="microbatches m per step")
    parser.add_argument("-V", "--chunks", type=int, default=None, help="stages per rank v (default: the schedule's)")
    parser.add_argument("--costs", default="1,1,1", help="F,B,W times; B is the backward for inputs (I), a full "
                        "backward costs B+W (default 1,1,1)")
    parser.add_argument("--latency", type=float, default=0.0, help="point-to-point latency in cost units (default 0)")
    parser.add_argument("--memory-limit", type=int, default=None, metavar="K",
                        help="ZBAuto: peak activations per rank in microbatches (default ceil(1.5 P)); VMin/VHalf/"
                        "VZB: in stage activations (default their own budget)")
    parser.add_argument("--objective", choices=("makespan", "span"), default=None,
                        help="ZBAuto: the figure its search minimises first, the other one breaking ties: "
                        "makespan (default) or span (longest stage span, the zero-bubble paper's bubble rate)")
    parser.add_argument("--lowered", action="store_true", help="add SEND/RECV (add_send_recv) and simulate them "
                        "as blocking rendezvous, as with gloo")
    parser.add_argument("--recv", choices=("blocking", "early"), default=None,
                        help="receive model of the lowered schedule (implies --lowered): blocking = waits where it "
                        "sits (default with --lowered), early = posted there and waited at first use")
    parser.add_argument("--overlap", choices=("max", "sum", "off"), default="off",
                        help="time DualPipeV's overlapped F&B pairs as one slot of max(F,B) or F+B (default off: "
                        "one after the other)")
    parser.add_argument("--compare", metavar="A,B,...", help="print a comparison table of these schedules, "
                        "with the blocking and early receive models side by side")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument("--csv", metavar="FILE", help="write the schedule as CSV (torch.distributed.pipelining layout)")
    parser.add_argument("--out", metavar="FILE", help="draw the timeline to FILE (.png, .svg or .pdf; needs matplotlib)")
    parser.add_argument("--trace", metavar="FILE", help="write a Chrome trace (chrome://tracing, Perfetto) to FILE")
    parser.set_defaults(func=run)


def _build(name, args, costs):
    """(info, v, schedule, result) for one schedule name."""
    from ..passes import add_send_recv, get_schedule_info, simulate_schedule
    from ..passes.overlap import mark_dualpipe_overlaps
    from ..passes.schedules.searched import generate_searched

    info = get_schedule_info(name)
    chunks = info.default_chunks if args.chunks is None else args.chunks
    limit = args.memory_limit if not args.compare or info.name == "ZBAuto" else None  # --compare: ZBAuto's limit
    if args.objective is not None and info.name != "ZBAuto" and not args.compare:
        raise ScheduleError(f"--objective applies to ZBAuto (which figure its search minimises first); "
                            f"{info.name} is not searched: drop --objective or use ZBAuto")
    if info.name == "ZBAuto":
        from ..passes.schedules.zb_auto import zb_auto

        schedule = zb_auto(args.stages, args.microbatches, chunks, memory_limit=limit, latency=args.latency,
                           costs=(costs.forward, costs.backward_input, costs.backward_weight),
                           objective=args.objective or "makespan")
    else:
        schedule = generate_searched(info.name, args.stages, args.microbatches, chunks, memory_limit=limit,
                                     costs=(costs.forward, costs.backward_input, costs.backward_weight),
                                     latency=args.latency)
    if args.overlap != "off" and info.name == "DualPipeV":
        schedule = mark_dualpipe_overlaps(schedule)
    if args.lowered or args.recv:
        schedule = add_send_recv(schedule, costs=costs, comm_latency=args.latency)
    result = simulate_schedule(schedule, costs=costs, comm_latency=args.latency, recv=args.recv or "blocking",
                               overlap=args.overlap)
    return info, chunks, schedule, result


def _recv_models(schedule, args, costs) -> dict:
    """Makespan of the lowered schedule under each receive model (lowered with unit costs when
    some cost is 0: the costs only steer where the SEND/RECV go)."""
    from ..passes import Costs, add_send_recv, compute_only, simulate_schedule

    steer = costs if min(costs.forward, costs.backward_input, costs.backward_weight) > 0 else Costs()
    lowered = add_send_recv(compute_only(schedule), costs=steer, comm_latency=args.latency)
    return {recv: simulate_schedule(lowered, costs=costs, comm_latency=args.latency, recv=recv,
                                    overlap=args.overlap).makespan for recv in ("blocking", "early")}


def _zb_auto_figures(args, costs) -> dict:
    """ZBAuto's own figures (its search's, compute only): both objectives and their lower bounds."""
    from ..passes.schedules.zb_auto import zb_auto_result

    res = zb_auto_result(args.stages, args.microbatches, memory_limit=args.memory_limit, latency=args.latency,
                         costs=(costs.forward, costs.backward_input, costs.backward_weight),
                         objective=args.objective or "makespan")
    return {"objective": res.objective, "makespan": res.makespan, "max_span": res.max_span,
            "bubble_rate": res.bubble_rate, "lower_bounds": {"makespan": res.lower_bounds[0],
                                                             "max_span": res.lower_bounds[1]},
            "memory_limit": res.memory_limit, "source": res.source}


def _figures(info, chunks, args, result, costs) -> dict:
    extra = {"zb_auto": _zb_auto_figures(args, costs)} if info.name == "ZBAuto" else {}
    return {
        "name": info.name, "stages": args.stages, "chunks": chunks, "total_stages": args.stages * chunks,
        "placement": info.placement, "microbatches": args.microbatches,
        "costs": {"F": costs.forward, "I": costs.backward_input, "W": costs.backward_weight, "B": costs.backward},
        "comm_latency": args.latency, "lowered": bool(args.lowered or args.recv), "recv": result.recv,
        "overlap": result.overlap, "overlapped_pairs": list(result.overlapped_pairs), "idle": list(result.idle),
        "makespan": result.makespan, "ideal": result.ideal, "bubble_ratio": result.bubble_ratio,
        "bubble_vs_ideal": result.bubble_vs_ideal, "steady_bubble_vs_ideal": result.steady_bubble_vs_ideal,
        "peak_activations": list(result.peak_activations),
        "peak_activations_full_microbatch": [n / chunks for n in result.peak_activations],
    } | extra


def run(args) -> int:
    from ..passes import Costs

    costs = Costs.parse(args.costs)
    if args.compare:
        return _compare(args, costs)
    if not args.name:
        raise ScheduleError("give a schedule NAME (e.g. `paddle-ext schedule 1F1B -P 4 -M 8`) or --compare A,B,...")
    info, chunks, schedule, result = _build(args.name, args, costs)
    figures = _figures(info, chunks, args, result, costs)
    _write_files(args, schedule, result, info)
    if args.json:
        figures["actions"] = {str(rank): [str(a) for a in result.actions[i] if a.is_compute]
                              for i, rank in enumerate(result.ranks)}
        print(json.dumps(figures, indent=1))
        return 0
    from ..passes import format_timeline

    print(f"{info.name}: {args.stages} ranks x {chunks} chunk(s) = {args.stages * chunks} stages "
          f"({info.placement} placement), {args.microbatches} microbatches, costs F={costs.forward:g} "
          f"I={costs.backward_input:g} W={costs.backward_weight:g} B={costs.backward:g}"
          + (f", lowered (blocking SEND/RECV), {result.recv} receives" if args.lowered or args.recv else "")
          + (f", overlapped F&B pairs timed as {result.overlap} ({sum(result.overlapped_pairs)} pairs)"
             if args.overlap != "off" else ""))
    unit = min((c for c in (costs.forward, costs.backward_input, costs.backward_weight) if c > 0), default=1.0)
    if result.makespan / unit <= _MAX_TIMELINE_CELLS:
        print(format_timeline(result, unit=unit))
    else:
        print(f"(timeline {result.makespan:g} units wide, not printed; use --out FILE.png or --trace FILE.json)")
    print(f"makespan {result.makespan:g} (ideal {result.ideal:g}); bubble {result.bubble_vs_ideal:.2%} of ideal, "
          f"{result.steady_bubble_vs_ideal:.2%} with overlapped iterations; idle fraction {result.bubble_ratio:.2%}")
    print(f"peak activations per rank (stage activations): {list(result.peak_activations)}")
    if "zb_auto" in figures:
        z = figures["zb_auto"]
        print(f"ZBAuto ({z['objective']} first, memory limit {z['memory_limit']}): makespan {z['makespan']:g} "
              f"(lower bound {z['lower_bounds']['makespan']:g}), longest stage span {z['max_span']:g} (lower bound "
              f"{z['lower_bounds']['max_span']:g}), bubble rate {z['bubble_rate']:.4f} = (span - ideal) / span")
    return 0


TIMELINE_SUFFIXES = (".png", ".svg", ".pdf")


def _check_targets(args) -> None:
    """Refuse a bad --out suffix or a missing directory before any file is written."""
    if args.out:
        suffix = Path(args.out).suffix.lower()
        if suffix not in TIMELINE_SUFFIXES:
            raise ScheduleError(f"--out {args.out!r}: the timeline is drawn as {', '.join(TIMELINE_SUFFIXES)}, "
                                f"not {suffix or 'a file without suffix'!r}; name the file e.g. timeline.png "
                                f"(or use --trace FILE.json for a Chrome trace)")
    for flag, target in (("--csv", args.csv), ("--trace", args.trace), ("--out", args.out)):
        if target:
            parent = Path(target).parent
            if not parent.is_dir():
                raise ScheduleError(f"{flag} {target!r}: the directory {str(parent)!r} does not exist; "
                                    f"create it first or write the file elsewhere")


def _write_files(args, schedule, result, info) -> None:
    from ..passes import draw_timeline, dump_csv, write_chrome_trace

    _check_targets(args)
    try:
        if args.csv:
            dump_csv(schedule, args.csv)
            print(f"wrote {args.csv}", file=sys.stderr)
        if args.trace:
            write_chrome_trace(result, args.trace)
            print(f"wrote {args.trace}", file=sys.stderr)
        if args.out:
            title = f"{info.name}, p={args.stages}, m={args.microbatches}"
            draw_timeline(result, args.out, title=title)
            print(f"wrote {args.out}", file=sys.stderr)
    except OSError as exc:
        raise ScheduleError(f"cannot write {exc.filename or 'the output file'!r}: {exc.strerror or exc}") from None


def _compare(args, costs) -> int:
    if args.name or args.csv or args.out or args.trace:
        raise ScheduleError("--compare takes no NAME, --csv, --out or --trace; run one schedule at a time for files")
    rows = []
    for name in [n.strip() for n in args.compare.split(",") if n.strip()]:
        try:
            info, chunks, schedule, result = _build(name, args, costs)
        except ScheduleError as exc:
            if "unknown schedule" in str(exc):
                raise
            rows.append({"name": name, "error": str(exc)})
            continue
        rows.append(dict(_figures(info, chunks, args, result, costs), recv_models=_recv_models(schedule, args, costs)))
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    header = ("schedule", "v", "makespan", "bubble/ideal", "steady", "idle", "peak act", "peak (full mb)",
              "recv blocking", "recv early")
    table, errors = [header], []
    for row in rows:
        if "error" in row:
            errors.append(f"{row['name']}: n/a, {row['error'].split(': ', 1)[-1]}")
            continue
        peak = max(row["peak_activations"])
        table.append((row["name"], str(row["chunks"]), f"{row['makespan']:g}", f"{row['bubble_vs_ideal']:.2%}",
                      f"{row['steady_bubble_vs_ideal']:.2%}", f"{row['bubble_ratio']:.2%}", str(peak),
                      f"{peak / row['chunks']:g}", f"{row['recv_models']['blocking']:g}",
                      f"{row['recv_models']['early']:g}"))
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    print(f"p={args.stages} ranks, m={args.microbatches} microbatches, costs F,B,W={args.costs}, latency "
          f"{args.latency:g}, overlap {args.overlap}; recv blocking / early: makespan of the lowered schedule "
          f"with receives waited where they sit / posted early and waited at first use")
    for r in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip())
    for line in errors:
        print(line)
    return 0
