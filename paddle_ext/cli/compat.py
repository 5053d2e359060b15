"""``paddle-ext compat --models``: PaddleNLP's auto-parallel models on CPU ranks, four ways.

Every cell is one launch of :func:`paddle_ext.models.real_models.train_rank` (model x plan x
execution x mode: Paddle alone, ``install()``, ``install()`` + ``enable()``, and every opt-in on:
``install(static_engine=True, pipeline_by_annotation=True)`` + ``enable()``), trained with SGD and
compared with the dense single-process reference (``models/dense_reference.py``): losses, and in
dygraph every parameter's first-step gradient and update (max relative difference <= 1e-5, norm
ratio within 1e-5 of 1; ``models/grad_parity.py``). Prints the matrix
(plan x mode -> match / mismatch / error with its first line); ``--markdown FILE`` also merges
these cells into the table of FILE's "Real models" section (cells not run keep what the table
had; the rest of the file is kept), so the matrix can be regenerated a model at a time.
"""
from __future__ import annotations

import re
import sys
import time
from pathlib import Path

from ..compat.native.cpp_build import optional_file_lock

SECTION = "## Real models"
BEGIN, END = "<!-- real-models-table:begin -->", "<!-- real-models-table:end -->"   # the table's bounds


def _pick(value: str | None, allowed: tuple, what: str) -> list[str]:
    if not value:
        return list(allowed)
    picked = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in picked if v not in allowed]
    if bad:
        from ..errors import PaddleExtError

        raise PaddleExtError(f"unknown {what} {bad}; known: {', '.join(allowed)}")
    return picked


def run(args) -> int:
    if not args.models:
        print("paddle-ext compat: pass --models (the real-model matrix)", file=sys.stderr)
        return 2
    from ..errors import HarnessError
    from ..models import real_model_cells as cells
    from ..models import real_models as rm
    from ..models.dense_reference import dense_run
    from ..launcher import run_ranks

    try:
        rm.require_paddlenlp()
    except ImportError as exc:
        print(f"paddle-ext compat: {exc}", file=sys.stderr)
        return 2
    models = _pick(args.model, rm.MODELS, "model")
    plans = _pick(args.plans, tuple(rm.PLANS), "plan")
    modes = _pick(args.modes, rm.MATRIX_MODES, "mode")
    execs = _pick(args.exec, rm.EXECS, "execution")
    logs = Path(args.log_dir or Path.cwd() / "paddle_ext_compat_logs")
    rows = []
    for model in models:
        try:
            with optional_file_lock(args.lock):
                dense = run_ranks(dense_run, 1, args=(model,), timeout=args.timeout,
                                  log_dir=logs / f"{model}-dense")[0]
        except HarnessError as exc:
            dense, dense_error = None, cells.summarize_failure(str(exc))
        for plan in plans:
            for ex in execs:
                row = {"model": model, "plan": plan, "world": rm.PLANS[plan].world_size, "exec": ex}
                for mode in modes:
                    start = time.monotonic()
                    if dense is None:
                        status, detail = "error", f"the dense reference failed: {dense_error}"
                    else:
                        with optional_file_lock(args.lock):
                            status, detail = cells.run_cell(model, plan, mode, ex, dense,
                                                         logs / f"{model}-{plan}-{ex}-{mode}", timeout=args.timeout)
                    row[mode] = (status, detail)
                    print(f"{model:12} {plan:13} {ex:9} {mode:21} {status:8} {detail}  "
                          f"[{time.monotonic() - start:.0f} s]", flush=True)
                rows.append(row)
    print()
    print(render(rows, modes))
    if args.markdown:
        path = Path(args.markdown)
        whole = merge(read_rows(path.read_text() if path.exists() else ""), rows)
        write_section(path, render(whole, list(rm.MATRIX_MODES)))
        print(f"\nmerged these cells into the table of {args.markdown} ({SECTION})")
    # do no harm: every cell that matches alone matches in every other mode run
    return 0 if all(r[m][0] == "match" for r in rows for m in modes
                    if r.get("alone", ("match",))[0] == "match") else 1


def _cell(status: str, detail: str) -> str:
    text = status if status == "match" or not detail else f"{status}: {detail}"
    return text.replace("|", "\\|")


GRADIENTS = "first-step gradients (to_static: updates), worst matching cell"
_GRAD_FIGURES = re.compile(r"(gradients|updates): \d+ parameters, max rel (\S+) .*?norm ratio furthest from 1: (\S+)")


def gradient_figure(row: dict, modes: list[str]) -> str:
    """The row's gradient column: the largest max relative error and the norm ratio furthest
    from 1 among the cells that matched with their gradients recorded (dygraph); what the table
    had when none ran now."""
    measured = _measured_gradients(row, modes)
    if measured is not None:
        return measured
    return row.get("gradients") or "not measured"


def _measured_gradients(row: dict, modes: list[str]) -> str | None:
    figures = []
    for m in modes:
        status, detail = row.get(m, ("", ""))
        found = _GRAD_FIGURES.search(detail or "") if status == "match" else None   # gradients first
        if found:
            figures.append((found.group(1), float(found.group(2)), float(found.group(3))))
    if not figures:
        return None
    rel = max(f[1] for f in figures)
    ratio = max((f[2] for f in figures), key=lambda r: abs(r - 1.0))
    what = "" if all(f[0] == "gradients" for f in figures) else "updates: "   # to_static: updates only
    return f"{what}max rel {rel:.2g}, norm x{ratio:.6f}"


def render(rows: list[dict], modes: list[str]) -> str:
    """The matrix as a Markdown table, one row per model x plan x execution."""
    from ..models.real_models import MODE_TITLES

    head = ["model", "plan", "ranks", "execution"] + [MODE_TITLES[m] for m in modes] + [GRADIENTS]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        out.append("| " + " | ".join([r["model"], r["plan"], str(r["world"]), r["exec"]]
                                     + [_cell(*r[m]) for m in modes] + [gradient_figure(r, modes)]) + " |")
    return "\n".join(out)


def _split_row(line: str) -> list[str]:
    cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
    return [c.strip().replace("\\|", "|") for c in cells]


def read_rows(text: str) -> list[dict]:
    """The rows of the table already in a "Real models" section (cells as (status, detail)), so a
    run of some cells updates the table instead of replacing it."""
    from ..models.real_models import MODE_TITLES

    if BEGIN not in text or END not in text:
        return []
    lines = text.split(BEGIN, 1)[1].split(END, 1)[0].strip().splitlines()
    if len(lines) < 2:
        return []
    by_title = {title: mode for mode, title in MODE_TITLES.items()}
    head = _split_row(lines[0])
    rows = []
    for line in lines[2:]:
        cells = dict(zip(head, _split_row(line)))
        row = {"model": cells["model"], "plan": cells["plan"], "world": int(cells["ranks"]),
               "exec": cells["execution"]}
        for title, mode in by_title.items():
            if title in cells:
                status, _, detail = cells[title].partition(": ")
                row[mode] = (status, detail)
        if cells.get(GRADIENTS):
            row["gradients"] = cells[GRADIENTS]
        rows.append(row)
    return rows


def merge(old: list[dict], new: list[dict]) -> list[dict]:
    """Every model x plan x execution in the matrix's order: the cells just run, else the cells
    the table had, else "not run yet"."""
    from ..models import real_models as rm

    have = {(r["model"], r["plan"], r["exec"]): dict(r) for r in old}
    for r in new:
        measured = _measured_gradients(r, [m for m in rm.MATRIX_MODES if m in r])
        r = {**r, "gradients": measured} if measured else r
        have.setdefault((r["model"], r["plan"], r["exec"]), {}).update(r)
    out = []
    for model in rm.MODELS:
        for plan, spec in rm.PLANS.items():
            for ex in rm.EXECS:
                row = {"model": model, "plan": plan, "world": spec.world_size, "exec": ex}
                for mode in rm.MATRIX_MODES:
                    row[mode] = have.get((model, plan, ex), {}).get(mode, ("not run yet", ""))
                if have.get((model, plan, ex), {}).get("gradients"):
                    row["gradients"] = have[(model, plan, ex)]["gradients"]
                out.append(row)
    return out


def write_section(path: Path, table: str) -> None:
    """Replace the table of the "Real models" section of ``path`` (create it if absent)."""
    text = path.read_text() if path.exists() else ""
    block = f"{BEGIN}\n{table}\n{END}"
    if BEGIN in text and END in text:
        text = re.sub(re.escape(BEGIN) + r".*?" + re.escape(END), lambda _: block, text, flags=re.S)
    else:
        text = text.rstrip() + f"\n\n{SECTION}\n\n{block}\n"
    path.write_text(text)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "compat", help="run real programs four ways (Paddle alone, install(), enable(), every opt-in) against dense")
    parser.add_argument("--models", action="store_true",
                        help="PaddleNLP's auto-parallel GPT, Qwen, DeepSeek-V2 on 1, 2, 4 CPU ranks "
                             '(needs pip install -e ".[cpu,test,models]")')
    parser.add_argument("--model", default=None, help="comma-separated subset of gpt,qwen,deepseek_v2,llama")
    parser.add_argument("--plans", default=None, help="comma-separated subset of the plans (default all)")
    parser.add_argument("--modes", default=None, help="comma-separated subset of alone,install,enable,enable-outside-static "
                             "(the last: install(static_engine=True, pipeline_by_annotation=True)+enable())")
    parser.add_argument("--exec", default=None, help="comma-separated subset of dygraph,to_static")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds before one launch is failed")
    parser.add_argument("--log-dir", default=None, help="workerlog.N files, one directory per cell")
    parser.add_argument("--lock", default=None, help="flock this file around each launch (a shared machine)")
    parser.add_argument("--markdown", default=None, help="write the table into this file's 'Real models' section")
    parser.set_defaults(func=run)
