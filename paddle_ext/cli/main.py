"""``paddle-ext`` command line: one module per subcommand under ``paddle_ext.cli``.

Each subcommand module defines ``register(subparsers)``, which adds its parser and sets
``func`` (a callable ``args -> int`` exit code) with ``parser.set_defaults(func=...)``.
Modules are imported only when present, so a missing optional piece never breaks the others.
"""
from __future__ import annotations

import argparse
import importlib
import sys
import warnings

from ..errors import PaddleExtError

# module name under paddle_ext.cli, in the order shown by --help
SUBCOMMAND_MODULES = ("doctor", "rules", "reshard_matrix", "schedule", "demo", "audit", "smoke", "compat", "profile",
                      "plan")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="paddle-ext",
        description="SPMD rules, reshard paths and pipeline schedules for Paddle's semi-auto parallelism.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        try:
            mod = importlib.import_module(f"{__package__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"{__package__}.{name}":
                continue
            raise
        mod.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    # Paddle warns about ccache on every import; it concerns building C++ extensions, not this CLI
    warnings.filterwarnings("ignore", message="No ccache found")
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except PaddleExtError as exc:
        print(f"paddle-ext {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
