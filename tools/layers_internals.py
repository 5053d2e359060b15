"""Check 2 of tools/check_layers.py: references to Paddle internals outside ``paddle_ext/compat/``.

Every touch of a Paddle internal goes through ``paddle_ext/compat/`` (docs/architecture.md,
"Layers, checked"), so a Paddle release that moves one breaks one place. A source line of
``paddle_ext/``, ``passes/`` or ``spmd_rules/`` outside compat counts once when it holds any of:

1. **A named internal module or package** (:data:`INTERNAL`, comments and docstrings excluded):
   ``paddle.base``, ``_C_ops``, ``libpaddle``, ``paddle.framework``, ``auto_parallel.static``,
   ``paddle.distributed.passes``, ``paddle.distributed.auto_parallel.api`` (any import or
   attribute path: ``dist.auto_parallel.api.dtensor_from_local`` counts) and ``paddle.pir``. An
   import spelt in parts counts too (``from paddle.distributed.auto_parallel import api``,
   ``from paddle import pir``).
2. **A private name imported from Paddle**: ``from paddle... import _name``.
3. **A private attribute of a Paddle object**: an attribute access ``x._name`` (one leading
   underscore, not a dunder) whose name is a private attribute of Paddle, found by introspection
   when the check runs (:func:`paddle_private_names`): ``dir()`` of ``paddle.Tensor``,
   ``ProcessMesh``, the placements (``Shard``, ``Replicate``, ``Partial``, ``Placement``),
   ``paddle.distributed`` and every ``paddle.distributed`` module paddle-ext imports (compat
   included). The receiver's type is not known statically, so the name decides: a project's own
   ``self._x`` does not count unless Paddle has an attribute ``_x`` too (then rename it, or go
   through compat: ``compat.ports.dispatch.local_value(x)`` for ``x._local_value()``).

The check imports Paddle (about 3 s); without Paddle it stops with a message saying so.
"""
from __future__ import annotations

import ast
import functools
import importlib
import io
import re
import tokenize
from pathlib import Path

INTERNAL = re.compile(r"paddle\s*\.\s*base\b|\b_C_ops\b|\blibpaddle\b|paddle\s*\.\s*framework\b"
                      r"|auto_parallel\s*\.\s*static\b|paddle\s*\.\s*distributed\s*\.\s*passes\b"
                      r"|auto_parallel\s*\.\s*api\b|paddle\s*\.\s*pir\b")
# the Paddle objects whose private attributes count (besides the paddle.distributed modules imported)
PADDLE_OBJECTS = ("paddle.Tensor", "paddle.distributed.ProcessMesh", "paddle.distributed.Shard",
                  "paddle.distributed.Replicate", "paddle.distributed.Partial", "paddle.distributed.Placement")


def _code_only(text: str) -> list[str]:
    """The source lines with comments and docstrings blanked (strings in code are kept)."""
    lines = text.splitlines()
    blank: set[tuple[int, int, int, int]] = set()
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return lines
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                d = body[0]
                blank.add((d.lineno, d.col_offset, d.end_lineno, d.end_col_offset))
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            blank.add((tok.start[0], tok.start[1], tok.end[0], tok.end[1]))
    out = list(lines)
    for l0, c0, l1, c1 in blank:
        for ln in range(l0, l1 + 1):
            s = out[ln - 1]
            a = c0 if ln == l0 else 0
            b = c1 if ln == l1 else len(s)
            out[ln - 1] = s[:a] + " " * (b - a) + s[b:]
    return out


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def distributed_modules(sources) -> set[str]:
    """The ``paddle.distributed`` modules the sources import (absolute imports)."""
    found = {"paddle.distributed"}
    for _, path in sources:
        found.update(_distributed_imports(path.read_text(encoding="utf-8")))
    return found


@functools.lru_cache(maxsize=4096)
def _distributed_imports(text: str) -> frozenset:
    """The ``paddle.distributed`` modules one source text imports (memoised by text: the tests
    check many copies of the tree that differ in a file or two)."""
    found = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("paddle.distributed"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("paddle.distributed"))
    return frozenset(found)


def _resolve(dotted: str):
    """The object a dotted name names: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


def paddle_private_names(modules) -> set[str]:
    """The private (single-underscore) attribute names of :data:`PADDLE_OBJECTS` and ``modules``."""
    try:
        importlib.import_module("paddle")
    except ImportError as exc:
        raise SystemExit(f"check_layers check 2 reads Paddle's private names by introspection and needs "
                         f"Paddle importable ({exc}); run it in the project's venv") from exc
    names: set[str] = set()
    for dotted in sorted(set(PADDLE_OBJECTS) | set(modules)):
        try:
            obj = _resolve(dotted)
        except (ImportError, AttributeError):
            continue   # a module this Paddle lacks: compat says so where it is used
        names.update(n for n in dir(obj) if _private(n))
    return names


def _ast_hits(tree: ast.AST, private: set[str]) -> list[tuple[int, str]]:
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and node.attr in private:
            hits.append((node.lineno, f".{node.attr} (a private attribute of Paddle)"))
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "paddle":
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if _private(alias.name):
                    hits.append((node.lineno, f"{full} (a private name of Paddle)"))
                elif INTERNAL.search(full) and not INTERNAL.search(node.module):
                    hits.append((node.lineno, full))
    return hits


def internal_references(root: Path, sources) -> dict[str, list[tuple[int, str]]]:
    """{file: [(line number, what it references)]}, one entry per line, outside compat."""
    files = list(sources(root))
    private = frozenset(paddle_private_names(distributed_modules(files)))
    found = {}
    for rel, path in files:
        if rel.startswith("paddle_ext/compat/"):
            continue
        hits = _file_references(path.read_text(encoding="utf-8"), private)
        if hits:
            found[rel] = list(hits)
    return found


@functools.lru_cache(maxsize=4096)
def _file_references(text: str, private: frozenset) -> tuple:
    """One source text's ``(line number, what it references)``, a line once (memoised by text and
    Paddle's private names, as :func:`_distributed_imports`)."""
    by_line = {n: m.group(0) for n, line in enumerate(_code_only(text), 1) for m in [INTERNAL.search(line)] if m}
    for n, what in _ast_hits(ast.parse(text), private):
        by_line.setdefault(n, what)
    return tuple(sorted(by_line.items()))
