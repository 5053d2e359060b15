"""Run Paddle's own auto-parallel scenarios (re-written in tests/multirank/scenario_ranks_*.py)
in three modes -- Paddle alone, ``paddle_ext.install()``, ``install()`` + ``enable()`` -- and
print or write the "Paddle's scenarios" section of docs/compatibility.md.

    python tools/compat_scenarios.py            # print the table
    python tools/compat_scenarios.py --write    # replace the section in docs/compatibility.md
    python tools/compat_scenarios.py --check    # exit 1 if the docs differ from a fresh run
    python tools/compat_scenarios.py --only reshard_s   # a subset (printed only)
    python tools/compat_scenarios.py --only parallelize --grads   # and each training scenario's
                                                # worst gradient/update error and norm ratio
    python tools/compat_scenarios.py --only "parallelize[mp]" --grads-params   # per parameter

Runs on 2 CPU ranks, about 4 minutes on 2 cores. Only its own section of the file is touched.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "multirank"))
DOC = ROOT / "docs" / "compatibility.md"


def main(argv=None) -> int:
    warnings.filterwarnings("ignore", message="No ccache found")
    import scenario_ranks as sr

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="replace the section in docs/compatibility.md")
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/compatibility.md is stale")
    ap.add_argument("--only", default=None, help="run the scenarios whose name contains this (print only)")
    ap.add_argument("--logs", default=None, help="keep the launches' logs here")
    ap.add_argument("--grads-params", action="store_true",
                    help="print every parameter's gradient and update figures (max relative error, norm ratio)")
    ap.add_argument("--grads", action="store_true",
                    help="also print, per training scenario and mode, the worst max relative error and norm ratio "
                         "of its parameters' gradients and updates against dense")
    args = ap.parse_args(argv)
    names = [n for n in sr._registry() if args.only is None or args.only in n]
    if not names:
        print(f"no scenario matches {args.only!r}", file=sys.stderr)
        return 2
    logs = Path(args.logs or tempfile.mkdtemp(prefix="compat_scenarios_"))
    print(f"{len(names)} scenarios x {len(sr.MODES)} modes ...", file=sys.stderr, flush=True)
    outcomes = sr.run_modes(sr.MODES, names, logs)
    section = sr.render(outcomes)
    if args.grads or args.grads_params:
        print(grad_report(sr, outcomes, per_param=args.grads_params))
    if args.only is not None or not (args.write or args.check):
        print(section)
        return 0
    doc = DOC.read_text() if DOC.exists() else "# Compatibility\n"
    if args.check:
        if sr.section_of(doc) != section:
            print("docs/compatibility.md's Paddle's scenarios section is stale", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(sr.splice(doc, section))
    print(f"wrote {DOC.relative_to(ROOT)}", file=sys.stderr)
    return 0


def grad_report(sr, outcomes, per_param: bool = False) -> str:
    """One line per training scenario and mode: parameters checked, the worst max relative error
    and the norm ratio farthest from 1 over its gradients and updates; or (``per_param``) one line
    per gradient and update."""
    if per_param:
        lines = ["| scenario | mode | gradient or update | max rel err | norm ratio |", "|---|---|---|---|---|"]
    else:
        lines = ["| scenario | mode | params | worst max rel err | worst norm ratio |", "|---|---|---|---|---|"]
    for name in outcomes[sr.MODES[0]]:
        for mode in sr.MODES:
            o = outcomes[mode][name]
            if not o.grads:
                continue
            if per_param:
                lines += [f"| `{name}` | {mode} | `{label}` | {rel:.2e} | {ratio:.8f} |"
                          for label, (rel, ratio) in o.grads.items()]
                continue
            rel = max(r for r, _ in o.grads.values())
            ratio = max((q for _, q in o.grads.values()), key=lambda q: abs(q - 1.0))
            n = len({k.split(":", 1)[1] for k in o.grads})
            lines.append(f"| `{name}` | {mode} | {n} | {rel:.2e} | {ratio:.8f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
