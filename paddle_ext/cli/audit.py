"""``paddle-ext audit script.py [args]``: run a script and list the op calls whose sharded
inputs were computed replicated (see :mod:`paddle_ext.dispatch.audit`).

Each rank prints its own report when the script finishes; for a multi-rank script, launch it
as usual with the CLI as the program::

    python -m paddle.distributed.launch --nproc_per_node 2 -m paddle_ext audit train.py --steps 3

``--enable`` runs the script with ``paddle_ext.enable()`` on (the covered ops then disappear from
the report), ``--json`` prints JSON, ``--out FILE`` writes it (``FILE.rankN`` on rank N > 0).
"""
from __future__ import annotations

import argparse
import os
import runpy
import sys

from ..errors import PaddleExtError


def _rank() -> int:
    return int(os.environ.get("PADDLE_TRAINER_ID", "0"))


def run(args) -> int:
    script = args.script
    if not os.path.isfile(script):
        raise PaddleExtError(f"audit: no such script {script!r}; give the path of a Python file to run")
    import paddle_ext.dispatch as pd

    if args.enable:
        pd.enable()
    old_argv = sys.argv
    sys.argv = [script] + list(args.script_args)
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    code = 0
    try:
        with pd.audit() as report:
            try:
                runpy.run_path(script, run_name="__main__")
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = old_argv
        if args.enable:
            pd.disable()
    rank = _rank()
    text = report.to_json() if args.json else report.text()
    if args.out:
        path = args.out if rank == 0 else f"{args.out}.rank{rank}"
        with open(path, "w") as f:
            f.write(report.to_json())
    print(f"[paddle-ext audit, rank {rank}] {text}" if not args.json else text, flush=True)
    if args.fail and report.count:
        return 1
    return int(code or 0)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "audit", help="run a script and list op calls whose sharded inputs were computed replicated")
    parser.add_argument("--enable", action="store_true", help="run with paddle_ext.enable() on")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--out", default=None, help="also write the JSON report to this file")
    parser.add_argument("--fail", action="store_true", help="exit 1 when any call fell back to Replicate")
    parser.add_argument("script", help="the Python script to run")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    parser.set_defaults(func=run)
