"""Every docstring example in paddle_ext, paddle_ext.passes and paddle_ext.spmd_rules runs.

The cases are the modules whose docstrings show ``>>>`` examples. Such a module fails when an
example fails, when doctest sees fewer (or more) examples than the docstrings show (an example in
a nested function's docstring never runs) and when none of its
examples runs (all ``# doctest: +SKIP``).
"""
import ast
import doctest
import importlib
import importlib.util
import io
import pkgutil
import re

import pytest

import paddle_ext
import paddle_ext.passes
import paddle_ext.spmd_rules

# passes/ and spmd_rules/ install as these subpackages (setup.py's package_dir) but live outside
# paddle_ext/, so walking paddle_ext.__path__ alone never reaches them
PACKAGES = (paddle_ext, paddle_ext.passes, paddle_ext.spmd_rules)
# importing these runs them; they are read, not imported, and must show no examples
NOT_IMPORTED = {"paddle_ext.__main__", "paddle_ext.launcher._worker"}
# modules whose every example is skipped because it needs several processes; an entry that stops
# being true (an example runs, or the examples go) fails, so the list cannot go stale
ONLY_SKIPPED: dict = {}   # module -> why every example it shows is skipped (none today)
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
PROMPT = re.compile(r"^\s*>>>", re.M)
NONE_RAN = "none of its examples ran"


def _raise(name):
    raise ImportError(f"pkgutil.walk_packages could not import the package {name}")


def walk():
    """``{module name: source path}`` of the three packages and every module under them."""
    found = {}
    for package in PACKAGES:
        found[package.__name__] = package.__file__
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + ".", onerror=_raise):
            found[info.name] = info.module_finder.find_spec(info.name).origin
    return found


def shown_examples(source):
    """``{"name (line n)": number of >>> prompts}`` over the module's, classes' and functions'
    docstrings, nested ones included (read from the source, not from what doctest finds)."""
    shown = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            n = len(PROMPT.findall(ast.get_docstring(node, clean=False) or ""))
            if n:
                shown[f"{getattr(node, 'name', '<module>')} (line {getattr(node, 'lineno', 1)})"] = n
    return shown


def check_examples(module, source):
    """What is wrong with ``module``'s docstring examples: a list of messages, empty if nothing."""
    shown = shown_examples(source)
    tests = [t for t in doctest.DocTestFinder().find(module) if t.examples]
    n_shown, n_found = sum(shown.values()), sum(len(t.examples) for t in tests)
    problems = []
    if n_found != n_shown:
        problems.append(f"the docstrings show {n_shown} >>> prompts ({', '.join(shown) or 'none'}) but doctest "
                        f"finds {n_found} examples: a docstring doctest cannot reach (a nested function's) never runs")
    runner, out = doctest.DocTestRunner(optionflags=FLAGS), io.StringIO()
    failed = attempted = 0
    for test in tests:
        result = runner.run(test, out=out.write, clear_globs=True)
        failed, attempted = failed + result.failed, attempted + result.attempted
    if failed:
        problems.append(f"{failed} of {attempted} examples failed:\n{out.getvalue()}")
    if (n_shown or n_found) and not attempted:
        problems.append(f"{NONE_RAN} ({max(n_shown, n_found)} shown, all skipped or unseen)")
    return problems


MODULES = walk()
CASES = sorted(name for name, path in MODULES.items() if shown_examples(open(path, encoding="utf-8").read()))


def _source(name):
    with open(MODULES[name], encoding="utf-8") as f:
        return f.read()


@pytest.mark.parametrize("name", [n for n in CASES if n not in NOT_IMPORTED])
def test_docstring_examples(name):
    problems = check_examples(importlib.import_module(name), _source(name))
    if name in ONLY_SKIPPED:
        assert len(problems) == 1 and problems[0].startswith(NONE_RAN), (
            f"{name} is in ONLY_SKIPPED ({ONLY_SKIPPED[name]}) but now: {problems or 'all fine'}; update the list")
        return
    assert problems == [], f"{name}: " + "\n".join(problems)


def test_the_walk_reaches_passes_and_spmd_rules():
    assert "paddle_ext.passes.schedules.zb_v" in CASES and "paddle_ext.passes.runtime.placement" in CASES
    assert "paddle_ext.spmd_rules.matmul" in CASES and "paddle_ext.spmd_rules.gaps.spatial" in CASES
    assert MODULES["paddle_ext.passes.schedules"].endswith("passes/schedules/__init__.py")


def test_modules_not_imported_show_no_examples_and_exist():
    for name in NOT_IMPORTED:
        assert name in MODULES, f"{name} is gone: drop it from NOT_IMPORTED"
        assert shown_examples(_source(name)) == {}, f"{name} shows examples that this test cannot run"


def test_every_module_where_doctest_finds_examples_is_a_case():
    """The case list is read from the source; doctest's own finder agrees with it."""
    for name in sorted(set(MODULES) - NOT_IMPORTED - set(CASES)):
        found = [t.name for t in doctest.DocTestFinder().find(importlib.import_module(name)) if t.examples]
        assert found == [], f"{name}: doctest finds examples in {found} that its source docstrings do not show"


# ------------------------------------------------------------------- the check can fail
GOOD = '''"""A module.

>>> double(2)
4
"""


def double(x):
    """Twice x.

    >>> double(3)
    6
    """
    return 2 * x
'''


def _load(tmp_path, name, source):
    path = tmp_path / f"{name}.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return check_examples(module, source)


def test_check_passes_a_module_whose_examples_run(tmp_path):
    assert _load(tmp_path, "good", GOOD) == []


BROKEN = {  # label: (what changes in GOOD, a phrase of the report)
    "wrong_output": ([("    6\n", "    7\n")], "1 of 2 examples failed"),
    "all_skipped": ([("(2)\n", "(2)  # doctest: +SKIP\n"), ("(3)\n", "(3)  # doctest: +SKIP\n")], NONE_RAN),
}


@pytest.mark.parametrize("label", sorted(BROKEN))
def test_check_reports_a_broken_module(tmp_path, label):
    edits, expect = BROKEN[label]
    source = GOOD
    for old, new in edits:
        assert old in source
        source = source.replace(old, new)
    problems = _load(tmp_path, label, source)
    assert any(expect in p for p in problems), problems


def test_check_reports_examples_doctest_cannot_reach(tmp_path):
    """The module's examples moved into a nested function's docstring: doctest finds none."""
    source = '''"""A module without examples of its own."""


def outer():
    def inner():
        """>>> 1 + 1
        2
        """
    return inner
'''
    problems = _load(tmp_path, "nested", source)
    assert any("show 1 >>> prompts (inner (line 5))" in p and "finds 0" in p for p in problems), problems
    assert any(p.startswith(NONE_RAN) for p in problems), problems
