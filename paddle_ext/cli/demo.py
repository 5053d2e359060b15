"""``paddle-ext demo``: train a small GPT on CPU (or GPU) ranks under a named plan and check it against dense.

Launches the ranks through ``paddle.distributed.launch`` (via :func:`paddle_ext.launcher.run_ranks`),
shows a progress bar from rank 0, runs the single-process reference with the same seed and data,
and prints the loss table, per-rank peak memory and the bytes per collective kind. The last line
is ``max_rel_loss_diff=<value>``. Artifacts (JSON results, the schedule picture for pipeline
plans) go to ``--out``.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

DEFAULT_PLAN = "pp2-sp2-tp2"
TOLERANCE = 1e-4


def _progress(path: Path, steps: int, stop: threading.Event, stream=sys.stdout) -> None:
    """Render rank 0's per-step records as a progress bar until ``stop`` is set."""
    seen = 0
    width = 30
    while not stop.is_set() or seen < steps:
        records = []
        if path.exists():
            records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        if len(records) > seen:
            seen = len(records)
            last = records[-1]
            filled = int(width * seen / steps)
            stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] step {seen}/{steps}  "
                         f"loss {last['loss']:.4f}  {last['elapsed']:.1f}s")
            stream.flush()
        if stop.is_set():
            break
        time.sleep(0.2)
    stream.write("\n")


def _table(ref, results) -> tuple[str, float]:
    worst = 0.0
    lines = [f"{'step':>4}  {'reference':>11}  {'this plan':>11}  {'rel diff':>9}"]
    for step, r in enumerate(ref):
        values = [res["losses"][step] for res in results]
        diff = max(abs(v - r) / max(abs(r), 1e-12) for v in values)
        worst = max(worst, diff)
        lines.append(f"{step:>4}  {r:>11.6f}  {values[0]:>11.6f}  {diff:>9.2e}")
    return "\n".join(lines), worst


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return str(n)


def _artifacts(plan, args, results, out: Path) -> list[str]:
    """Write the replication audit and, for pipeline plans, the schedule picture."""
    lines = []
    audit_text = "\n\n".join(f"rank {r['rank']}:\n{r.get('audit', '(no audit)')}" for r in results)
    (out / "audit.txt").write_text(audit_text + "\n")
    fell_back = sum(r.get("audit_count", 0) for r in results)
    lines.append(f"replication audit: {fell_back} op call(s) fell back to Replicate on any rank -> {out}/audit.txt")
    if plan.pp > 1:
        from ..passes import generate_schedule, simulate_schedule
        from ..passes.render import draw_timeline

        p, name, m = plan.pp, plan.schedule, plan.microbatches
        result = simulate_schedule(generate_schedule(name, p, m, plan.chunks))
        picture = out / f"schedule_{name}.png"
        try:
            draw_timeline(result, str(picture), title=f"{name}: {p} ranks, {m} microbatches")
            lines.append(f"schedule picture: {picture} (simulated makespan {result.makespan:g} unit steps)")
        except Exception as exc:  # noqa: BLE001 - a missing matplotlib must not hide the training result
            lines.append(f"schedule picture not written: {exc}")
    else:
        lines.append("schedule picture: this plan has no pipeline (use a ppN plan)")
    return lines


def rank_devices(nproc: int, cuda_build: bool, gpus: int, backend: str | None) -> tuple[str, dict]:
    """Where the demo's ranks run: ``("GPU" | "CPU", extra environment for the ranks)``.

    A CPU build, a CUDA build that sees no GPU, or ``PADDLE_DISTRI_BACKEND=gloo``: CPU ranks on
    gloo. A CUDA build with at least ``nproc`` GPUs: one GPU per rank, as the launcher assigns
    them, on Paddle's own backend. Fewer GPUs than ranks is an error that says what would work.

    >>> rank_devices(4, False, 0, None), rank_devices(4, True, 8, None)
    (('CPU', {}), ('GPU', {}))
    >>> rank_devices(2, True, 0, None)
    ('CPU', {'PADDLE_DISTRI_BACKEND': 'gloo', 'CUDA_VISIBLE_DEVICES': ''})
    """
    if not cuda_build or (backend or "").lower() == "gloo":
        return "CPU", {}
    if gpus == 0:
        return "CPU", {"PADDLE_DISTRI_BACKEND": "gloo", "CUDA_VISIBLE_DEVICES": ""}
    if gpus < nproc:
        raise ValueError(f"the plan runs on {nproc} ranks, one GPU each, but {gpus} GPU(s) are visible; choose a "
                         f"plan for {gpus} ranks (paddle-ext demo --list-plans), make more GPUs visible "
                         f"(CUDA_VISIBLE_DEVICES), or run on CPU ranks with PADDLE_DISTRI_BACKEND=gloo")
    return "GPU", {}


def _this_machine(nproc: int) -> tuple[str, dict]:
    import paddle

    cuda = bool(paddle.is_compiled_with_cuda())
    gpus = int(paddle.device.cuda.device_count()) if cuda else 0
    return rank_devices(nproc, cuda, gpus, os.environ.get("PADDLE_DISTRI_BACKEND"))


def run(args) -> int:
    from ..demo.plans import PLANS, parse_plan
    from ..demo.train import RunConfig, reference_losses, train_rank
    from ..errors import HarnessError
    from ..launcher import run_ranks

    if args.list_plans:
        for name, text in PLANS.items():
            print(f"{name:<14} {parse_plan(name).world_size} ranks  {text}")
        return 0
    plan = parse_plan(args.plan)
    nproc = args.nproc or plan.world_size
    if nproc != plan.world_size:
        print(f"paddle-ext demo: error: plan {plan.name} runs on exactly {plan.world_size} ranks "
              f"(mesh {' x '.join(f'{d}{n}' for d, n in plan.degrees)}), but --nproc {nproc} was given; "
              f"drop --nproc or choose a plan for {nproc} ranks (paddle-ext demo --list-plans)", file=sys.stderr)
        return 2
    if args.steps < 1:
        print("paddle-ext demo: error: --steps must be at least 1", file=sys.stderr)
        return 2
    if plan.pp > 1 and plan.schedule is None:   # a plan text's own :Schedule:mM part wins over the flags
        from ..passes.schedules import get_schedule_info

        get_schedule_info(args.schedule)  # an unknown name raises with the list of names
        if 8 % args.microbatches:
            print(f"paddle-ext demo: error: --microbatches {args.microbatches} does not divide the batch of 8; "
                  f"use 1, 2, 4 or 8", file=sys.stderr)
            return 2
        plan = plan.with_schedule(args.schedule, args.microbatches)
    try:
        device, rank_env = _this_machine(nproc)
    except ValueError as exc:
        print(f"paddle-ext demo: error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    progress = out / "progress.jsonl"
    progress.unlink(missing_ok=True)
    run_cfg = RunConfig(plan=plan.name, steps=args.steps, seed=args.seed, batch=plan.batch,
                        progress_file=str(progress.resolve()), fault_rank=args.inject_fault)
    print(f"paddle-ext demo: plan {plan.layout} on {nproc} {device} ranks "
          f"(mesh {' x '.join(f'{d}{n}' for d, n in plan.degrees)})"
          + (f", schedule {plan.schedule}, {plan.microbatches} microbatches" if plan.pp > 1 else "")
          + f", {args.steps} steps")
    stop = threading.Event()
    bar = threading.Thread(target=_progress, args=(progress, args.steps, stop), daemon=True)
    bar.start()
    try:
        results = run_ranks(train_rank, nproc=nproc, args=(run_cfg.__dict__,), timeout=args.timeout,
                            log_dir=out / "logs", env=rank_env)
    except HarnessError as exc:
        stop.set()
        bar.join(timeout=2)
        print(f"paddle-ext demo: the run failed:\n{exc}", file=sys.stderr)
        return 1
    finally:
        stop.set()
        bar.join(timeout=2)
    ref = reference_losses(RunConfig(plan=plan.name, steps=args.steps, seed=args.seed))
    table, worst = _table(ref, results)
    print(table)
    print("\nper rank: peak memory, bytes handed to collectives by kind")
    for res in results:
        kinds = ", ".join(f"{k} {v.get('calls', 0)}x {_fmt_bytes(v.get('bytes', 0))}"
                          for k, v in sorted(res["collectives"].items())) or "none counted"
        print(f"  rank {res['rank']}: peak {_fmt_bytes(res['peak_memory'])}; {kinds}")
    print()
    for line in _artifacts(plan, args, results, out):
        print(line)
    (out / "results.json").write_text(json.dumps({"plan": plan.name, "reference": ref, "ranks": results,
                                                  "max_rel_loss_diff": worst}, indent=1, default=str))
    print(f"\nresults in {out}/results.json; ranks' logs in {out}/logs")
    ok = worst <= TOLERANCE
    if not ok:
        print(f"paddle-ext demo: loss parity FAILED: max relative difference {worst:.3e} > {TOLERANCE}",
              file=sys.stderr)
    print(f"max_rel_loss_diff={worst:.3e}")
    return 0 if ok else 1


def register(subparsers) -> None:
    parser = subparsers.add_parser("demo", help="train a small GPT under a parallel plan on CPU (or GPU) ranks vs dense")
    parser.add_argument("--plan", default=DEFAULT_PLAN,
                        help=f"plan name (default {DEFAULT_PLAN}; --list-plans), or a plan `paddle-ext plan` printed, "
                             f"e.g. pp2-sp2-tp2:ZBV:m4")
    parser.add_argument("--nproc", type=int, default=None, help="number of ranks (default: what the plan needs)")
    parser.add_argument("--schedule", default="ZBV", help="pipeline schedule for pp plans (default ZBV)")
    parser.add_argument("--steps", type=int, default=20, help="training steps (default 20)")
    parser.add_argument("--microbatches", type=int, default=4, help="microbatches per step for pp plans (default 4)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="demo_out", help="directory for results, logs and pictures")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds before the run is failed")
    parser.add_argument("--list-plans", action="store_true", help="list the documented plans and exit")
    parser.add_argument("--inject-fault", type=int, default=None, metavar="RANK",
                        help="testing: make RANK raise before training (the job must fail cleanly)")
    parser.set_defaults(func=run)
