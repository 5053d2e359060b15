"""Check paddle-ext's layers, as a ratchet: today's known violations pass, any new one fails.

    python tools/check_layers.py                   # check; prints the figures issue 16 tracks
    python tools/check_layers.py --shrink-baseline # lower tools/layers_baseline.json to today's
                                                   # figures (it never raises a number or adds one)

What it checks (docs/architecture.md, "Layers, checked"):

1. **import-linter contracts** (``[tool.importlinter]`` in pyproject.toml): the pure layer imports
   neither paddle nor compat nor the test harness, compat imports no adapter/cli/demo, nothing
   below imports a face, no cycles between sibling packages. ``passes/`` and ``spmd_rules/``
   install as ``paddle_ext.passes`` / ``paddle_ext.spmd_rules`` (setup.py's package_dir), so the
   contracts run on a *stage*: a temporary copy of ``paddle_ext/`` with both copied inside it,
   in a fresh interpreter whose ``paddle_ext`` is the stage's (checked, not assumed). Today's
   violations are ``ignore_imports`` entries, each with a comment; an entry whose import is gone
   fails too (import-linter: "No matches for ignored import"), so the list only shrinks.
2. **Paddle-internal references** outside ``paddle_ext/compat/`` (``paddle.base``, ``_C_ops``,
   ``libpaddle``, ``paddle.framework``, ``auto_parallel.static``, ``paddle.distributed.passes``,
   ``auto_parallel.api``, ``paddle.pir``, and private ``_`` attributes of Paddle objects, found by
   introspection: the rule is in ``tools/layers_internals.py``), counted as source lines per file
   (comments and docstrings excluded): more than the baseline fails.
3. **Import cycles**: the strongly connected groups of the module graph (grimp, plus the string
   imports grimp cannot see: :func:`string_imports`); a group that is
   not inside a baseline group fails.
4. **Module sizes** in ``paddle_ext/``, ``passes/``, ``spmd_rules/``: a module over 500 lines
   not in the baseline fails, and so does a baseline module that grew.
4.5 **Function-level imports** per module (an ``import`` inside a ``def``): they hide the import
   graph from readers and from checks 1 and 3. Not counted: the faces (``FACES``: the package
   ``__init__``/``__main__``, ``cli/``, ``demo/``, and ``testing/`` which runs in rank processes),
   where a lazy import keeps start-up cheap, a package ``__init__``'s PEP 562 ``__getattr__`` (a
   face's lazy attribute), and imports of the optional packages in ``OPTIONAL``.
   More than the baseline in a file fails.
5. **Function sizes** in the same three trees: a function or method over 120 lines (from its
   ``def`` to its last line; a nested function counts inside its parent too) not in the baseline
   fails, and so does a baseline function that grew. Keyed ``file::qualified.name``.
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))   # tools/ is no package: its sibling module
from layers_internals import internal_references, paddle_private_names  # noqa: E402,F401

ROOT = Path(__file__).resolve().parent.parent
BASELINE = Path(__file__).resolve().parent / "layers_baseline.json"
MAX_LINES = 500
MAX_FUNCTION_LINES = 120
# source dir in the repo -> where it lives in the installed package
LAYOUT = {"paddle_ext": "paddle_ext", "passes": "paddle_ext/passes", "spmd_rules": "paddle_ext/spmd_rules"}
_MARK = "@@check_layers_json@@"
# check 4.5: where a function-level import is a face's lazy import, not a hidden edge
# (the launcher and the real-model runners import Paddle in the rank function, not in the parent
# that launches it)
FACES = ("paddle_ext/__init__.py", "paddle_ext/__main__.py", "paddle_ext/cli/", "paddle_ext/demo/",
         "paddle_ext/testing/", "paddle_ext/launcher/", "paddle_ext/models/")
# optional third-party packages (not install requirements): importing them at a module's top would
# make the module fail to import without them, so they stay inside the function that needs them
OPTIONAL = {
    "matplotlib": "the 'plot' extra (figures only)",
    "paddlenlp": "the 'models' extra (real-model tests and `compat --models`)",
    "hypothesis": "the 'test' extra",
    "scipy": "not a requirement at all (used when present)",
    "grimp": "the 'test' extra (import-linter)", "importlinter": "the 'test' extra",
}


@dataclass
class Report:
    figures: dict = field(default_factory=dict)
    failures: list = field(default_factory=list)   # one message per new violation, saying how to fix
    stale: list = field(default_factory=list)      # baseline entries that can shrink
    lint_output: str = ""

    @property
    def ok(self) -> bool:
        return not self.failures and not self.stale


# ---------------------------------------------------------------------------------------- stage
def stage(root: Path, dest: Path) -> Path:
    """Copy ``root``'s sources into ``dest`` in the installed layout; returns ``dest``."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for src, target in LAYOUT.items():
        shutil.copytree(root / src, dest / target, ignore=ignore)
    return dest


def sources(root: Path):
    """(repo-relative path, Path) of every module in the three source trees, sorted."""
    for src in LAYOUT:
        for path in sorted((root / src).rglob("*.py")):
            if "__pycache__" not in path.parts:
                yield path.relative_to(root).as_posix(), path


def _imported_roots(node: ast.AST) -> set[str]:
    """Top-level package names an Import/ImportFrom names ("" for a relative import)."""
    if isinstance(node, ast.Import):
        return {a.name.split(".")[0] for a in node.names}
    return {"" if node.level else (node.module or "").split(".")[0]}


def function_imports(root: Path) -> dict[str, list[tuple[int, str]]]:
    """{file: [(line, first imported name)]} of imports inside a function, outside the faces, not
    of an ``OPTIONAL`` package."""
    found = {}
    for rel, path in sources(root):
        if rel in FACES or rel.startswith(tuple(f for f in FACES if f.endswith("/"))):
            continue
        hits = []
        for fn in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if fn.name == "__getattr__" and rel.endswith("/__init__.py") and fn.col_offset == 0:
                continue   # PEP 562: the package's lazily loaded attributes
            # a def's own imports only: nested defs are visited on their own
            todo = list(fn.body)
            while todo:
                n = todo.pop()
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    continue
                if isinstance(n, (ast.Import, ast.ImportFrom)):
                    if not _imported_roots(n) <= set(OPTIONAL):
                        name = n.names[0].name if isinstance(n, ast.Import) else "." * n.level + (n.module or "")
                        hits.append((n.lineno, name))
                todo.extend(ast.iter_child_nodes(n))
        if hits:
            found[rel] = sorted(hits)
    return found


def module_sizes(root: Path) -> dict[str, int]:
    """{file: lines} of the modules over MAX_LINES."""
    sizes = {rel: len(path.read_text(encoding="utf-8").splitlines()) for rel, path in sources(root)}
    return {rel: n for rel, n in sizes.items() if n > MAX_LINES}


def long_functions(root: Path) -> dict[str, int]:
    """{``file::qualified.name``: lines} of the functions over MAX_FUNCTION_LINES (``def`` line to
    last line, decorators not counted; a nested function is named ``outer.inner``)."""
    found = {}

    def visit(node: ast.AST, prefix: str, rel: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + child.name
                n = child.end_lineno - child.lineno + 1
                if not isinstance(child, ast.ClassDef) and n > MAX_FUNCTION_LINES:
                    found[f"{rel}::{name}"] = n
                visit(child, name + ".", rel)
            else:
                visit(child, prefix, rel)

    for rel, path in sources(root):
        visit(ast.parse(path.read_text(encoding="utf-8"), filename=rel), "", rel)
    return found


def repo_path(module: str, stage_dir: Path) -> str:
    """``paddle_ext.passes.validate`` -> ``passes/validate.py`` (the file a reader edits)."""
    parts = module.split(".")
    rel = Path(*parts)
    rel = rel / "__init__.py" if (stage_dir / rel).is_dir() else rel.with_suffix(".py")
    s = rel.as_posix()
    for src, target in LAYOUT.items():
        if src != "paddle_ext" and s.startswith(target + "/"):
            return src + s[len(target):]
    return s


# ------------------------------------------------------------------------- graph (subprocess)
def _sccs(nodes, succ) -> list[list[str]]:
    """Strongly connected groups of more than one module (iterative Tarjan)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(succ(start))))]
        index[start] = low[start] = counter[0]; counter[0] += 1
        stack.append(start); on.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]; counter[0] += 1
                    stack.append(w); on.add(w)
                    work.append((w, iter(sorted(succ(w)))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop(); on.discard(w); comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return sorted(out)


def _module_file(stage_dir: Path, module: str) -> Path | None:
    base = stage_dir.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _fstring_target(node: ast.JoinedStr, module: str, is_package: bool) -> tuple[str, bool] | None:
    """``f"{__package__}.name"`` / ``f"{__name__}.name"`` -> (the module name, False);
    ``f"{__package__}.{variable}"`` -> (the package's name, True: any module directly in it)."""
    parts = node.values
    if not parts or not isinstance(parts[0], ast.FormattedValue) or not isinstance(parts[0].value, ast.Name):
        return None
    which = parts[0].value.id
    if which not in ("__package__", "__name__"):
        return None
    base = module if which == "__name__" or is_package else module.rpartition(".")[0]
    text = ""
    for part in parts[1:]:
        if isinstance(part, ast.Constant) and isinstance(part.value, str):
            text += part.value
        else:
            return (base + text).rstrip("."), True
    return base + text, False


_IMPORTERS = ("import_module", "__import__", "find_spec")


def _call_name(node: ast.Call) -> str:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def string_imports(stage_dir: Path, internal: list[str]) -> dict[str, set[str]]:
    """Imports the import statements do not show, by module: the first argument of
    ``importlib.import_module`` / ``__import__`` / ``find_spec`` when it names a module of the
    package, in full (``"paddle_ext.spmd_rules"``) or from ``__package__`` / ``__name__``
    (``f"{__package__}.transition_kinds"``; with a variable part, ``f"{__name__}.{module}"``,
    every module directly inside that package counts)."""
    known = set(internal)
    edges: dict[str, set[str]] = {}
    for module in internal:
        path = _module_file(stage_dir, module)
        if path is None:
            continue
        is_package = path.name == "__init__.py"
        found = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and _call_name(node) in _IMPORTERS and node.args):
                continue
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value in known:
                found.add(arg.value)
            elif isinstance(arg, ast.JoinedStr):
                target = _fstring_target(arg, module, is_package)
                if target is None:
                    continue
                name, any_child = target
                if any_child:
                    found |= {m for m in known if m.rpartition(".")[0] == name}
                elif name in known:
                    found.add(name)
        found.discard(module)
        if found:
            edges[module] = found
    return edges


def _graph_worker(stage_dir: str, config: str) -> None:
    """Runs in a fresh interpreter: the contracts and the cycles of the staged package."""
    import importlib.util

    sys.path.insert(0, stage_dir)
    spec = importlib.util.find_spec("paddle_ext")
    origin = os.path.realpath(spec.origin or "")
    if not origin.startswith(os.path.realpath(stage_dir) + os.sep):
        raise SystemExit(f"check_layers: paddle_ext resolves to {origin}, not to the stage {stage_dir}")
    from importlinter import configuration
    from importlinter.application import use_cases

    configuration.configure()                        # what the lint-imports command does first
    use_cases._register_built_in_contract_types()    # forbidden, layers, acyclic_siblings, ...

    result = {"origin": origin, "contracts": [], "errors": []}
    try:
        report = use_cases.create_report(use_cases.read_user_options(config), cache_dir=None)
    except Exception as e:  # an ignore_imports entry without a match, a bad module name, ...
        result["errors"].append(f"{type(e).__name__}: {e}")
        result["cycles"] = []
        print(_MARK + json.dumps(result))
        return
    for name, exc in getattr(report, "invalid_contract_options", {}).items():
        result["errors"].append(f"contract {name!r}: invalid options {exc}")
    for contract, check in report.get_contracts_and_checks():
        if not check.kept:
            print(f"\n--- broken contract: {contract.name}")
            sys.stdout.flush()
            contract.render_broken_contract(check)
            sys.stdout.flush()
        result["contracts"].append({"name": contract.name, "kept": bool(check.kept),
                                    "recorded": int(check.ignored_import_count),
                                    "guidance": str(getattr(contract, "broken_contract_guidance", None) or ""),
                                    "warnings": [str(w) for w in check.warnings]})
    graph = report.graph
    internal = sorted(m for m in graph.modules if m == "paddle_ext" or m.startswith("paddle_ext."))
    by_string = string_imports(Path(stage_dir), internal)
    result["string_imports"] = {m: sorted(ws) for m, ws in by_string.items()}
    result["cycles"] = _sccs(internal, lambda m: [w for w in graph.find_modules_directly_imported_by(m)
                                                   if w == "paddle_ext" or w.startswith("paddle_ext.")]
                             + sorted(by_string.get(m, ())))
    print(_MARK + json.dumps(result))


def run_graph(stage_dir: Path, config: Path) -> tuple[dict, str]:
    env = dict(os.environ, PYTHONPATH=str(stage_dir), PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--graph-worker", str(stage_dir),
                           str(config)], cwd=stage_dir, env=env, capture_output=True, text=True, timeout=300)
    text, _, payload = proc.stdout.rpartition(_MARK)
    if proc.returncode or not payload:
        raise RuntimeError(f"check_layers: the import graph could not be built:\n{proc.stdout}\n{proc.stderr}")
    return json.loads(payload), text + proc.stderr


# ------------------------------------------------------------------------------------ check
def load_baseline(path: Path = BASELINE) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def check(root: Path = ROOT, config: Path | None = None, baseline: dict | None = None) -> Report:
    """Check ``root`` (a tree with paddle_ext/, passes/, spmd_rules/) against the contracts in
    ``config`` and ``baseline``."""
    config = Path(config or root / "pyproject.toml")
    base = load_baseline() if baseline is None else baseline
    rep = Report()
    with tempfile.TemporaryDirectory(prefix="paddle_ext_layers_") as tmp:
        stage_dir = stage(root, Path(tmp))
        graph, rep.lint_output = run_graph(stage_dir, config)
        _check_contracts(graph, rep)
        _check_cycles(graph["cycles"], base.get("cycles", []), rep, stage_dir)
    _check_internal(internal_references(root, sources), base.get("internal_references", {}), rep)
    _check_sizes(module_sizes(root), base.get("large_modules", {}), rep)
    _check_function_imports(function_imports(root), base.get("function_imports", {}), rep)
    _check_function_sizes(long_functions(root), base.get("long_functions", {}), rep)
    return rep


def _check_contracts(graph: dict, rep: Report) -> None:
    rep.figures["contracts"] = {c["name"]: c["recorded"] for c in graph["contracts"]}
    for err in graph["errors"]:
        hint = ""
        if "No matches for ignored import" in err:
            hint = (" -- a recorded violation is gone: delete its ignore_imports entry (and comment) in "
                    "pyproject.toml's [tool.importlinter] so it cannot come back")
        rep.failures.append(f"import-linter: {err}{hint}")
    for c in graph["contracts"]:
        if not c["kept"]:
            rep.failures.append(f"import-linter contract broken: {c['name']} (the chains are printed above). "
                                f"{c['guidance'] or 'Import from a lower layer.'} The ignore_imports lists "
                                f"only shrink.")


def _check_cycles(cycles: list, base: list, rep: Report, stage_dir: Path) -> None:
    rep.figures["cycles"] = cycles
    for cyc in cycles:
        if not any(set(cyc) <= set(b) for b in base):
            files = ", ".join(repo_path(m, stage_dir) for m in cyc)
            rep.failures.append(f"new import cycle between {', '.join(cyc)} ({files}): make one side stop "
                                f"importing the other (move the shared part to a lower module); a function-"
                                f"level import does not count as a way round")
    for b in base:
        if not any(set(c) == set(b) for c in cycles):
            rep.stale.append(f"cycle {b} is gone or smaller: run --shrink-baseline")


def _check_counts(found: dict, base: dict, rep: Report, figure: str, over: str, count: str, fix: str) -> None:
    """A per-file ratchet: ``found`` maps a file to its (line, name) hits; more than the baseline
    fails (``"{rel} " + over``, then the lines and ``fix``), fewer asks for --shrink-baseline
    (``count``); ``over`` and ``count`` take ``{n}``, the file's hits."""
    rep.figures[figure] = {f: len(h) for f, h in found.items()}
    for rel, hits in sorted(found.items()):
        allowed = base.get(rel, 0)
        if len(hits) > allowed:
            where = ", ".join(f"line {n} {name}" for n, name in hits[:6]) + (" ..." if len(hits) > 6 else "")
            rep.failures.append(f"{rel} {over.format(n=len(hits))} (baseline {allowed}): {where} -- {fix}")
    for rel, allowed in sorted(base.items()):
        n = len(found.get(rel, ()))
        if n < allowed:
            rep.stale.append(f"{rel}: {count.format(n=n)}, baseline {allowed}: run --shrink-baseline")


def _check_internal(found: dict, base: dict, rep: Report) -> None:
    _check_counts(found, base, rep, "internal_references", "references Paddle internals on {n} lines",
                  "{n} Paddle-internal lines", "go through paddle_ext.compat (add or reuse a compat function)")


def _check_limit(found: dict, base: dict, rep: Report, figure: str, limit: int, what, over_fix: str,
                 grew_fix: str) -> None:
    """A size ratchet: ``found`` maps a key to its lines; one over ``limit`` and not in the baseline
    fails (``over_fix``), one larger than its baseline fails (``grew_fix``), one smaller asks for
    --shrink-baseline. ``what(key)`` names the key in the messages."""
    rep.figures[figure] = found
    for key, n in sorted(found.items()):
        if key not in base:
            rep.failures.append(f"{what(key)} has {n} lines (over {limit}): {over_fix}")
        elif n > base[key]:
            rep.failures.append(f"{what(key)} grew to {n} lines (baseline {base[key]}, limit {limit}): {grew_fix}")
    for key, n in sorted(base.items()):
        if found.get(key, 0) < n:
            rep.stale.append(f"{key}: {found.get(key, 'at most %d' % limit)} lines, baseline {n}: "
                             f"run --shrink-baseline")


def _check_sizes(sizes: dict, base: dict, rep: Report) -> None:
    _check_limit(sizes, base, rep, "large_modules", MAX_LINES, str,
                 f"split it by concern into modules of at most {MAX_LINES} lines",
                 "move code out of it rather than into it")


def _check_function_imports(found: dict, base: dict, rep: Report) -> None:
    _check_counts(found, base, rep, "function_imports", "has {n} function-level imports", "{n} function-level imports",
                  "import at the module top; a cycle is broken by moving the shared part to a lower module, "
                  "an optional package goes in check_layers.OPTIONAL")


def _check_function_sizes(found: dict, base: dict, rep: Report) -> None:
    def what(key: str) -> str:
        rel, name = key.split("::", 1)
        return f"{rel}: function {name}"

    _check_limit(found, base, rep, "long_functions", MAX_FUNCTION_LINES, what,
                 f"split it into named steps (helper functions, or a small class whose methods are the steps) "
                 f"of at most {MAX_FUNCTION_LINES} lines", "move steps out of it into named helpers")


def shrink_baseline(rep: Report, path: Path = BASELINE) -> dict:
    """Lower the baseline to today's figures; never adds an entry or raises a number."""
    old = load_baseline(path)
    new = dict(old)
    refs, sizes = rep.figures["internal_references"], rep.figures["large_modules"]
    new["internal_references"] = {f: min(n, refs[f]) for f, n in old["internal_references"].items() if refs.get(f)}
    new["large_modules"] = {f: min(n, sizes[f]) for f, n in old["large_modules"].items() if f in sizes}
    funcs = rep.figures["function_imports"]
    new["function_imports"] = {f: min(n, funcs[f]) for f, n in old.get("function_imports", {}).items()
                               if funcs.get(f)}
    if "long_functions" in rep.figures:
        longs = rep.figures["long_functions"]
        new["long_functions"] = {f: min(n, longs[f]) for f, n in old.get("long_functions", {}).items() if f in longs}
    new["cycles"] = [sorted(set(b) & set(c)) for b in old["cycles"] for c in rep.figures["cycles"]
                     if len(set(b) & set(c)) > 1 and set(c) <= set(b)]
    path.write_text(json.dumps(new, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return new


def format_figures(rep: Report) -> str:
    f = rep.figures
    lines = ["Layer figures (issue 16; the baseline may only shrink):",
             "  recorded violations per import-linter contract:"]
    lines += [f"    {n:3d}  {name}" for name, n in f["contracts"].items()]
    refs = f["internal_references"]
    lines.append(f"  Paddle-internal references outside compat: {sum(refs.values())} lines in {len(refs)} files")
    lines += [f"    {n:3d}  {rel}" for rel, n in sorted(refs.items())]
    lines.append(f"  import cycles (strongly connected module groups): {len(f['cycles'])}")
    lines += [f"         {' <-> '.join(c)}" for c in f["cycles"]]
    lines.append(f"  modules over {MAX_LINES} lines: {len(f['large_modules'])}")
    lines += [f"    {n:4d}  {rel}" for rel, n in sorted(f["large_modules"].items())]
    funcs = f["function_imports"]
    lines.append(f"  function-level imports outside the faces: {sum(funcs.values())} in {len(funcs)} files")
    lines += [f"    {n:3d}  {rel}" for rel, n in sorted(funcs.items())]
    longs = f.get("long_functions", {})
    lines.append(f"  functions over {MAX_FUNCTION_LINES} lines: {len(longs)}")
    lines += [f"    {n:4d}  {key}" for key, n in sorted(longs.items())]
    return "\n".join(lines)


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--graph-worker":
        _graph_worker(sys.argv[2], sys.argv[3])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shrink-baseline", action="store_true", help="lower the baseline to today's figures")
    args = ap.parse_args(argv)
    rep = check()
    if rep.failures:
        print(rep.lint_output.rstrip())
    print(format_figures(rep))
    if args.shrink_baseline and not rep.failures:
        shrink_baseline(rep)
        print(f"baseline lowered: {BASELINE.relative_to(ROOT)}")
        rep.stale = []
    for msg in rep.stale:
        print(f"STALE: {msg}")
    for msg in rep.failures:
        print(f"FAIL: {msg}")
    print("layers: OK" if rep.ok else f"layers: {len(rep.failures)} new violation(s), {len(rep.stale)} stale "
          f"baseline entr{'y' if len(rep.stale) == 1 else 'ies'}")
    return 0 if rep.ok else 1


if __name__ == "__main__":
    sys.exit(main())
