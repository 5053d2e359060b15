"""Benchmark: the demo's training step (``paddle-ext demo`` plans tp2 and sp2-tp2) three ways.

On 2 CPU ranks (gloo), in one launch, each rank builds the demo GPT for a plan three times and
times its training step (forward, backward, AdamW step, the loss read back) as

* **Paddle alone**: built before ``paddle_ext.install()``, timed with every paddle-ext fix
  reverted (Paddle's own ``dist.reshard`` and functions); a plan Paddle alone cannot run
  (sp2-tp2: its ``P -> S(1)`` reduce-scatter has no CPU kernel) is reported with Paddle's error;
* **install()**: after ``paddle_ext.install()``;
* **install()+enable()**: the same, with ``paddle_ext.enable()``'s rules on.

The modes are interleaved: every round runs each mode (in a rotating order) for one untimed
warm-up step and ``--steps`` timed steps, each timed step started by a barrier so both ranks
begin it together (paced). A step's time is the slower rank's; each step figure (ms) is the
median over the rounds. Each ratio is *paired*: per round, a mode's median step over the base
mode's median step in the same round, then the median of those per-round ratios, with their
interquartile range in brackets (the machine's speed drifts by more than the 3% a ratio is
asked to show; a ratio within one round does not see that drift), and the median's 95%
confidence interval (:func:`median_ci`: whether the run can tell a ratio from 1.03 at all). Before timing, the first step's loss of every mode that runs is checked to agree.
The load average is printed beside the figures; on a shared machine, run it alone (under the
machine's CPU lock, if it has one):

    python tools/bench_step.py [--rounds 12] [--steps 3] [--write]

``--write`` replaces the table between ``<!-- step:start -->`` and ``<!-- step:end -->`` in
docs/dispatch.md.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DOC = os.path.join(HERE, "..", "docs", "dispatch.md")
PLANS = ("tp2", "sp2-tp2")
MODES = ("alone", "install", "enable")
LABELS = {"alone": "Paddle alone", "install": "install()", "enable": "install()+enable()"}


def _set_mode(mode: str) -> None:
    """Put this process in ``mode``: every paddle-ext patch reverted, install(), or both switches."""
    import paddle_ext
    from paddle_ext.compat import uninstall as uninstall_fixes
    from paddle_ext.compat.fixes.table import uninstall_rings
    from paddle_ext.compat.ports.static_reshard import uninstall_static_reshard
    from paddle_ext.reshard.install import uninstall_reshard

    paddle_ext.disable()
    if mode == "alone":
        uninstall_reshard()
        uninstall_static_reshard()
        uninstall_rings()
        uninstall_fixes()
        return
    paddle_ext.install()
    if mode == "enable":
        paddle_ext.enable()


def _build(plan_name: str):
    """The demo's one-mesh runner for ``plan_name`` (``paddle_ext.demo.train.setup_parallel``) and
    one batch; built under the current mode (its blocks keep the ``dist.reshard`` of that moment)."""
    from paddle_ext.demo.data import make_batches
    from paddle_ext.demo.plans import parse_plan
    from paddle_ext.demo.train import RunConfig, model_for, setup_parallel

    plan = parse_plan(plan_name)
    mcfg = model_for(plan)
    cfg = RunConfig(plan=plan_name)
    batch = make_batches(1, cfg.batch, mcfg.seq_len, mcfg.vocab, cfg.seed)[0]
    return setup_parallel(plan, mcfg, cfg.seed, cfg.lr), batch


def _first_steps(plans) -> tuple[dict, dict, dict]:
    """Per plan and mode, the runner and its first step's loss, or Paddle's error for a mode
    that cannot run the plan. Paddle alone first, then the others after install()."""
    runners, losses, errors = {}, {}, {}
    for mode in MODES:
        _set_mode(mode)
        for name in plans:
            runner, batch = _build(name)
            try:
                losses[name, mode] = runner.train_step(*batch)
            except Exception as exc:   # Paddle alone on a plan it cannot run: reported, not timed
                if mode != "alone":
                    raise
                why = str(exc).strip().splitlines()[-1].split(" (at ")[0]   # Paddle's message, not its source path
                errors[name] = f"{type(exc).__name__}: {why[:160]}"
                continue
            runners[name, mode] = (runner, batch)
    return runners, losses, errors


def step_rank(plans, rounds: int, steps: int) -> dict:
    """On each rank: the step times (seconds) per (plan, mode), the first losses and errors."""
    import paddle.distributed as dist

    dist.init_parallel_env()
    runners, losses, errors = _first_steps(plans)
    times = {key: [] for key in runners}
    for r in range(rounds):
        order = MODES[r % len(MODES):] + MODES[:r % len(MODES)]
        for mode in order:
            _set_mode(mode)
            for name in plans:
                if (name, mode) not in runners:
                    continue
                runner, batch = runners[name, mode]
                runner.train_step(*batch)   # warm-up: caches dropped by the switch are refilled
                for _ in range(steps):
                    dist.barrier()
                    t0 = time.perf_counter()
                    runner.train_step(*batch)
                    times[name, mode].append(time.perf_counter() - t0)
    _set_mode("install")
    return {"times": times, "losses": losses, "errors": errors}


def summarize(results, plans, rounds: int) -> list[dict]:
    """Per plan: each mode's median step (ms, the slower rank per step) and its paired ratio to
    the base mode (Paddle alone, else install()): the median and quartiles over the rounds of
    (this round's median step of the mode / this round's median step of the base)."""
    rows = []
    for name in plans:
        row = {"plan": name, "alone_error": results[0]["errors"].get(name)}
        per_round = {}
        for mode in MODES:
            per_rank = [res["times"].get((name, mode)) for res in results]
            if per_rank[0] is None:
                row[mode] = None
                continue
            slower = np.max(np.array(per_rank), axis=0)
            row[mode] = float(np.median(slower) * 1e3)
            row[mode + "_n"] = len(slower)
            per_round[mode] = np.median(slower.reshape(rounds, -1), axis=1)
        row["base"] = "alone" if row["alone"] is not None else "install"
        for mode in ("install", "enable"):
            if mode == row["base"]:
                row[mode + "_ratio"] = None
                continue
            paired = per_round[mode] / per_round[row["base"]]
            row[mode + "_ratio"] = float(np.median(paired))
            row[mode + "_iqr"] = (float(np.percentile(paired, 25)), float(np.percentile(paired, 75)))
            row[mode + "_ci"] = median_ci(paired)
        rows.append(row)
    return rows


def median_ci(values, z: float = 1.96) -> tuple[float, float]:
    """A distribution-free confidence interval of the median of ``values`` (95% for ``z`` = 1.96):
    the order statistics at ranks ``(n - z sqrt(n)) / 2`` and ``(n + z sqrt(n)) / 2`` (the number
    of values below the true median is binomial(n, 1/2)); the whole range when ``n`` is too small
    for that."""
    v = np.sort(np.asarray(values, dtype=float))
    n = len(v)
    if n == 0:
        raise ValueError("median_ci: no values")
    k = int(np.floor((n - z * np.sqrt(n)) / 2))
    return (float(v[k]), float(v[n - 1 - k])) if k >= 0 else (float(v[0]), float(v[-1]))


def check_losses(results, plans) -> None:
    """Every mode that ran gives the same first-step loss as the others (on every rank)."""
    for res in results:
        for name in plans:
            got = {m: res["losses"][name, m] for m in MODES if (name, m) in res["losses"]}
            ref = got["install"]
            for mode, value in got.items():
                if not np.isclose(value, ref, rtol=1e-5, atol=0):
                    raise AssertionError(f"{name}: first-step loss {LABELS[mode]} {value} vs install() {ref}")


def _ratio(row, mode: str) -> str:
    low, high = row[mode + "_iqr"]
    ci_low, ci_high = row[mode + "_ci"]
    return f"{row[mode + '_ratio']:.3f}x [{low:.3f}-{high:.3f}] (95% CI {ci_low:.3f}-{ci_high:.3f})"


def table(rows) -> str:
    lines = ["| plan | Paddle alone (ms) | install() (ms) | install()+enable() (ms) | install() / base | "
             "install()+enable() / base |", "|---|---|---|---|---|---|"]
    for r in rows:
        alone = f"{r['alone']:.1f}" if r["alone"] is not None else f"cannot ({r['alone_error']})"
        base = "Paddle alone" if r["base"] == "alone" else "install()"
        inst = _ratio(r, "install") if r["install_ratio"] is not None else "(base)"
        lines.append(f"| {r['plan']} | {alone} | {r['install']:.1f} | {r['enable']:.1f} | {inst} | "
                     f"{_ratio(r, 'enable')} (base: {base}) |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plans", nargs="+", default=list(PLANS), choices=PLANS)
    ap.add_argument("--rounds", type=int, default=12, help="rounds of every mode (interleaved)")
    ap.add_argument("--steps", type=int, default=3, help="timed steps per mode per round")
    ap.add_argument("--write", action="store_true", help="write the table into docs/dispatch.md")
    args = ap.parse_args(argv)
    load_before = os.getloadavg()
    sys.path.insert(0, HERE)
    from paddle_ext.launcher import run_ranks

    import bench_step as me
    results = run_ranks(me.step_rank, nproc=2, args=(tuple(args.plans), args.rounds, args.steps), timeout=900)
    load_after = os.getloadavg()
    check_losses(results, args.plans)
    rows = summarize(results, args.plans, args.rounds)
    text = table(rows)
    summary = (f"2 gloo ranks; median of {args.rounds} rounds x {args.steps} paced steps per mode (the slower "
               f"rank's time per step), modes interleaved; ratios paired per round: median [quartiles] over the "
               f"rounds (95% CI: of that median); first-step losses agree across modes; load average "
               f"(1/5/15 min) before {'/'.join(f'{v:.2f}' for v in load_before)}, after "
               f"{'/'.join(f'{v:.2f}' for v in load_after)}")
    print(text)
    print(summary)
    if args.write:
        with open(DOC) as f:
            doc = f.read()
        block = f"<!-- step:start -->\n{text}\n\n{summary}\n<!-- step:end -->"
        if "<!-- step:start -->" not in doc:
            raise SystemExit(f"{DOC} has no <!-- step:start --> ... <!-- step:end --> block to replace")
        doc = re.sub(r"<!-- step:start -->.*?<!-- step:end -->", lambda _: block, doc, flags=re.S)
        with open(DOC, "w") as f:
            f.write(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
