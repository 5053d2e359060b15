"""``paddle-ext reshard-matrix``: every placement pair, Paddle native vs paddle-ext, on real ranks.

    paddle-ext reshard-matrix --nproc 2 [--json] [--out docs/reshard_matrix.md] [--time-limit SECONDS]

``--nproc 2``: every pair of R/S(0)/S(1)/P(sum|avg|max|min) on a 1-D mesh of 2, on an even
(4x6), an uneven (5x7) and an empty-shard (1x6) shape. ``--nproc 4``: every pair of
R/S(0)/S(1)/P(sum) on a 2x2 mesh (uneven 5x7) plus Paddle's known-bad 2-D cases on three shapes,
and cross-mesh pairs ([0,1]->[2,3], ->[1,0], ->[0,2], 1-D -> 2x2, 2x2 -> [2,3]).

For each pair: Paddle native (ok / error / crash / wrong), paddle-ext (ok / error), bit-exact
against the dense tensor, and bytes received per rank vs the plan's minimum. Native cases run in
batches; a batch that crashes or hangs is split in halves until the crashing case is alone, so one
crash never takes the matrix down; ``--max-launches`` and ``--time-limit`` bound the launches (a
launch gets at most the time left; what is left over is reported "not run"). Cross-mesh native cases run one representative per mesh pair
(each one segfaults on Paddle 3.3.1 CPU) and the rest of that mesh pair is reported as such.
"""
from __future__ import annotations

import json
import sys
import time
from collections import Counter

from ..errors import HarnessError


def register(subparsers) -> None:
    p = subparsers.add_parser("reshard-matrix", help="every reshard pair: Paddle native vs paddle-ext")
    p.add_argument("--nproc", type=int, choices=(2, 4), default=2)
    p.add_argument("--json", action="store_true", help="print JSON instead of a Markdown table")
    p.add_argument("--out", help="also write the Markdown report to this file")
    p.add_argument("--max-launches", type=int, default=60, help="budget for native bisection launches")
    p.add_argument("--time-limit", type=float, default=None,
                   help="seconds for every launch together; later launches are not started, the report is still written")
    p.set_defaults(func=run)


def _cases(nproc: int):
    from ..reshard import matrix_cases as mc

    return mc.one_d_cases(2) if nproc == 2 else mc.two_d_cases() + mc.cross_cases()


def matrix_rank(cases, native: bool) -> dict:
    """One rank of the matrix, as a user's script: join the gloo world, install, run the cases."""
    import paddle.distributed as dist

    import paddle_ext
    from ..reshard.checks import run_cases

    dist.init_parallel_env()
    paddle_ext.install()
    return run_cases(cases, native)


MIN_LAUNCH_SECONDS = 20.0   # a launch with less time left than this is not started


def _run(cases, nproc, native, budget, deadline=None):
    """{case.id: [Outcome per rank] | "crash: ..."} with bisection on launch failures; no launch
    starts after ``deadline`` (``time.monotonic()``) and none runs past it."""
    from ..launcher import run_ranks

    out: dict = {}

    def go(batch):
        if not batch:
            return
        left = deadline - time.monotonic() if deadline is not None else float("inf")
        if budget[0] <= 0 or left < MIN_LAUNCH_SECONDS:
            for c in batch:
                out[c.id] = "not run (launch budget spent)" if budget[0] <= 0 else "not run (time limit)"
            return
        budget[0] -= 1
        try:
            per_rank = run_ranks(matrix_rank, nproc=nproc, args=(batch, native),
                                 timeout=min(40 + 0.5 * len(batch), left))
        except HarnessError as exc:
            if len(batch) == 1:
                first = str(exc).splitlines()
                detail = next((line for line in first if "Error" in line or "signal" in line.lower()
                               or "TIMEOUT" in line or "timeout" in line), first[0])
                out[batch[0].id] = "crash: " + detail.strip()[:160]
                return
            half = len(batch) // 2
            go(batch[:half])
            go(batch[half:])
            return
        for c in batch:
            out[c.id] = [r[c.id] for r in per_rank]

    if native:
        groups: dict = {}
        for c in cases:
            key = c.id.split(":")[0] if c.src_mesh != c.dst_mesh else ""
            groups.setdefault(key, []).append(c)
        for key, batch in groups.items():
            if key:  # cross-mesh: one representative per mesh pair
                go(batch[:1])
                verdict = out[batch[0].id]
                for c in batch[1:]:
                    out[c.id] = (f"not run ({batch[0].id} crashed)" if isinstance(verdict, str)
                                 and verdict.startswith("crash") else None)
                rest = [c for c in batch[1:] if out[c.id] is None]
                go(rest)
            else:
                go(batch)
    else:
        go(cases)
    return out


def _classify(case, result, native: bool) -> tuple[str, str]:
    from ..reshard.checks import assemble_case

    if isinstance(result, str):
        return ("crash" if result.startswith("crash") else "not run"), result
    ok, why = assemble_case(case, result)
    if ok:
        return "ok", ""
    if any(o.error for o in result):
        return "error", why
    return ("wrong" if native else "error"), why


def build(nproc: int, max_launches: int = 60, time_limit: float | None = None) -> list[dict]:
    from ..reshard.checks import expected_bytes

    cases = _cases(nproc)
    deadline = time.monotonic() + time_limit if time_limit is not None else None
    ext = _run(cases, nproc, False, [max_launches], deadline)
    native = _run(cases, nproc, True, [max_launches], deadline)
    rows = []
    for c in cases:
        n_status, n_why = _classify(c, native.get(c.id, "not run"), True)
        e_status, e_why = _classify(c, ext.get(c.id, "not run"), False)
        received = max((o.received for o in ext[c.id]), default=0) if isinstance(ext.get(c.id), list) else None
        rows.append({"case": c.id, "native": n_status, "native_detail": n_why, "ext": e_status,
                     "ext_detail": e_why, "bit_exact": e_status == "ok", "bytes": received,
                     "min_bytes": expected_bytes(c)})
    return rows


def render(rows: list[dict], nproc: int) -> str:
    native = Counter(r["native"] for r in rows)
    ext = Counter(r["ext"] for r in rows)
    exact_bytes = sum(1 for r in rows if r["bytes"] is not None and r["bytes"] == r["min_bytes"])
    lines = [f"## {nproc} ranks: {len(rows)} pairs", "",
             "- Paddle native: " + ", ".join(f"{k} {v}" for k, v in sorted(native.items())),
             "- paddle-ext: " + ", ".join(f"{k} {v}" for k, v in sorted(ext.items())),
             f"- bit-exact: {sum(r['bit_exact'] for r in rows)} of {len(rows)}; bytes received == plan "
             f"minimum on {exact_bytes} of {len(rows)} (the others receive less: a multi-step plan's "
             f"minimum sums per-step maxima)", "",
             "| pair | Paddle native | paddle-ext | bit-exact | bytes/rank (plan) | native detail |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        detail = (r["native_detail"] or "").replace("|", "/")[:110]
        lines.append(f"| `{r['case']}` | {r['native']} | {r['ext']} | {'yes' if r['bit_exact'] else 'no'} | "
                     f"{r['bytes']} ({r['min_bytes']}) | {detail} |")
    return "\n".join(lines) + "\n"


def run(args) -> int:
    rows = build(args.nproc, args.max_launches, args.time_limit)
    text = render(rows, args.nproc)
    if args.out:
        with open(args.out, "a") as f:
            f.write(text + "\n")
    if args.json:
        json.dump(rows, sys.stdout, indent=1)
        print()
    else:
        print(text)
    return 0 if all(r["ext"] == "ok" for r in rows) else 1
