"""Count the test suite and what each test compares with; the figures go into README's testing section.

    python tools/test_census.py            # prints the figures and the per-file table

A test function is counted once; its cases are the items pytest collects from it. What it
compares with is read from its own source (and the rank or helper functions of its module that
it calls, transitively), by keywords, in this order: the dense computation (``dense``,
``reference``, ``ground_truth``, ``assemble``, the validator's ``check_op``), Paddle
(``get_phi_spmd_rule``, ``alone``, ``native``), a closed form or the simulator's invariants
(``closed``, ``formula``, ``makespan``, ``bubble``, ``peak``, ``deadlock``, ``simulate``),
a named error (``pytest.raises``), else "structure" (CLI output, docs, registries). It is a
keyword reading, not a proof; the table shows each file so a reader can check it.
"""
from __future__ import annotations

import ast
import collections
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KINDS = [
    ("dense", re.compile(r"dense|reference|ground_truth|assemble\(|check_op|check_instance|false_positive")),
    ("Paddle", re.compile(r"get_phi_spmd_rule|alone|native|paddle_rule|same_as_paddle|paddle_answer")),
    ("closed form / invariants", re.compile(r"closed|formula|makespan|bubble|peak|invariant|deadlock|simulate")),
    ("named error", re.compile(r"pytest\.raises|raises\(")),
]


def _functions(path: Path) -> dict[str, str]:
    """test function name -> its source plus the module functions it calls by name."""
    text = path.read_text()
    tree = ast.parse(text)
    defs = {n.name: ast.get_source_segment(text, n) or "" for n in tree.body if isinstance(n, ast.FunctionDef)}
    out = {}
    for name, src in defs.items():
        if not name.startswith("test_"):
            continue
        seen, todo = {name}, [name]
        while todo:   # the module's helpers it calls, and theirs
            for m in re.findall(r"\b(\w+)\(", defs[todo.pop()]):
                if m in defs and m not in seen:
                    seen.add(m)
                    todo.append(m)
        out[name] = "".join(defs[c] for c in sorted(seen))
    return out


def kind_of(source: str) -> str:
    for kind, pattern in KINDS:
        if pattern.search(source):
            return kind
    return "structure"


def collected() -> collections.Counter:
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "tests"], cwd=ROOT,
                          capture_output=True, text=True)
    cases = collections.Counter()
    for line in proc.stdout.splitlines():
        if "::" in line:
            path, rest = line.split("::", 1)
            cases[(path, re.split(r"[\[:]", rest)[0])] += 1
    return cases


def main() -> int:
    cases = collected()
    by_kind_fn, by_kind_cases = collections.Counter(), collections.Counter()
    rows = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        rel = str(path.relative_to(ROOT))
        per_file = collections.Counter()
        for name, src in _functions(path).items():
            kind = kind_of(src)
            n = cases.get((rel, name), 0)
            by_kind_fn[kind] += 1
            by_kind_cases[kind] += n
            per_file[kind] += n
        rows.append((rel, per_file))
    functions, total = sum(by_kind_fn.values()), sum(by_kind_cases.values())
    print(f"{functions} test functions, {total} collected cases")
    for kind, _ in KINDS + [("structure", None)]:
        print(f"  {kind}: {by_kind_fn[kind]} functions, {by_kind_cases[kind]} cases "
              f"({100 * by_kind_cases[kind] / max(total, 1):.0f}% of cases)")
    print("\nfile | " + " | ".join(k for k, _ in KINDS) + " | structure")
    for rel, per_file in rows:
        print(rel + " | " + " | ".join(str(per_file[k]) for k, _ in KINDS + [("structure", None)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
