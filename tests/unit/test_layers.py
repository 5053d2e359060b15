"""The layer ratchet (tools/check_layers.py, issue 16): it passes on the tree as it is, and it
reports a new violation of each kind injected into a staged copy."""
import importlib.util
import shutil
import sys
from pathlib import Path

import grimp  # noqa: F401 - required (the test extra): a broken install fails, never skips
import importlinter  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("check_layers", ROOT / "tools" / "check_layers.py")
check_layers = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("check_layers", check_layers)   # dataclasses look their module up
_spec.loader.exec_module(check_layers)


def _copy_tree(dest: Path) -> Path:
    for src in ("paddle_ext", "passes", "spmd_rules"):
        shutil.copytree(ROOT / src, dest / src, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text(encoding="utf-8") + text, encoding="utf-8")


def test_layers_hold_today():
    rep = check_layers.check()
    assert rep.failures == [] and rep.stale == [], rep.lint_output + "\n" + "\n".join(rep.failures + rep.stale)
    figures = rep.figures
    assert set(figures) == {"contracts", "internal_references", "cycles", "large_modules", "function_imports",
                            "long_functions"}
    assert figures["long_functions"] == {}
    assert all(n >= 0 for n in figures["contracts"].values()) and len(figures["contracts"]) >= 5


def test_stage_is_what_grimp_reads(tmp_path):
    stage = check_layers.stage(ROOT, tmp_path / "stage")
    assert (stage / "paddle_ext" / "passes" / "schedule_ir.py").is_file()
    assert (stage / "paddle_ext" / "spmd_rules" / "matmul.py").is_file()
    assert not list(stage.rglob("__pycache__"))
    graph, _ = check_layers.run_graph(stage, ROOT / "pyproject.toml")
    assert graph["origin"].startswith(str(stage.resolve())), graph["origin"]


def test_new_violations_are_reported(tmp_path):
    root = _copy_tree(tmp_path)
    # a pure module importing compat
    _append(root / "passes" / "schedule_ir.py", "\n\ndef _v():\n    from paddle_ext.compat import version\n"
                                                "    return version\n")
    # one more Paddle-internal line in a file that has one in the baseline, and one in a new file
    _append(root / "paddle_ext" / "errors.py", "\n\ndef _p(paddle):\n    return paddle.base.core\n")
    _append(root / "paddle_ext" / "dispatch" / "grad.py", "\n\ndef _q(paddle):\n    return paddle._C_ops.add\n")
    # a docstring or comment naming an internal is not a reference
    _append(root / "paddle_ext" / "dispatch" / "enable.py", "\n# paddle.base is not used here\n")
    # a new cycle: errors <-> placements
    _append(root / "paddle_ext" / "errors.py", "\n\ndef _c():\n    from . import placements\n"
                                               "    return placements\n")
    # a new module over 500 lines, and a baseline module that grew
    (root / "paddle_ext" / "big.py").write_text("x = 1\n" * 501, encoding="utf-8")
    (root / "paddle_ext" / "big_known.py").write_text("x = 1\n" * 502, encoding="utf-8")

    # give errors.py one Paddle-internal line in the baseline (it has none), then two more lines
    baseline = check_layers.load_baseline()
    # no module is over 500 lines any more either: give the baseline one at 501 that grew to 502
    baseline = {**baseline, "internal_references": {**baseline["internal_references"], "paddle_ext/errors.py": 1},
                "large_modules": {"paddle_ext/big_known.py": 501}}
    _append(root / "paddle_ext" / "errors.py", "\n\ndef _p0(paddle):\n    return paddle.base.framework\n")
    rep = check_layers.check(root, config=ROOT / "pyproject.toml", baseline=baseline)
    text = "\n".join(rep.failures)
    assert not rep.ok
    assert "contract broken: pure layer" in text
    assert "paddle_ext.passes.schedule_ir is not allowed to import paddle_ext.compat" in rep.lint_output
    assert "paddle_ext/errors.py references Paddle internals on 2 lines (baseline 1)" in text
    assert "paddle.base -- go through paddle_ext.compat" in text
    assert "paddle_ext/dispatch/grad.py references Paddle internals on 1 lines (baseline 0)" in text
    assert "enable.py" not in text
    assert "new import cycle between paddle_ext.errors, paddle_ext.placements" in text
    assert "contract broken: no import cycles between sibling packages" in text
    assert "paddle_ext/big.py has 501 lines (over 500)" in text
    assert "paddle_ext/big_known.py grew to 502 lines" in text


def test_fixed_violation_must_leave_the_baseline(tmp_path):
    root = _copy_tree(tmp_path)
    # an ignore_imports entry for an import that is gone (the SPMD bridge moved into compat)
    forbidden = 'forbidden_modules = ["paddle", "paddle_ext.compat", "paddle_ext.testing"]\n'
    config = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert forbidden in config
    config = config.replace(forbidden, forbidden + 'ignore_imports = ["paddle_ext.spmd.compare -> paddle_ext.compat.ports.spmd"]\n', 1)
    (tmp_path / "pyproject.toml").write_text(config, encoding="utf-8")
    baseline = check_layers.load_baseline()
    baseline = {**baseline, "internal_references": {**baseline["internal_references"], "paddle_ext/errors.py": 1}}
    rep = check_layers.check(root, config=tmp_path / "pyproject.toml", baseline=baseline)
    assert not rep.ok
    assert any("No matches for ignored import paddle_ext.spmd.compare -> paddle_ext.compat.ports.spmd" in f
               and "delete its ignore_imports entry" in f for f in rep.failures), rep.failures
    assert any("paddle_ext/errors.py: 0 Paddle-internal lines, baseline 1" in s for s in rep.stale)


def test_new_function_level_import_is_reported(tmp_path):
    root = _copy_tree(tmp_path)
    # counted: a stdlib import inside a def of a non-face module (errors.py has none in the baseline)
    _append(root / "paddle_ext" / "errors.py", "\n\ndef _f():\n    import json\n    return json\n")
    # not counted: an optional package, a face (cli/), and the testing harness
    _append(root / "paddle_ext" / "placements.py", "\n\ndef _g():\n    import matplotlib\n    return matplotlib\n")
    _append(root / "paddle_ext" / "cli" / "main.py", "\n\ndef _h():\n    import json\n    return json\n")
    # not counted: a package's PEP 562 __getattr__ (a lazy attribute of the face)
    _append(root / "paddle_ext" / "spmd" / "__init__.py", "\n\ndef __getattr__(name):\n    import json\n"
                                                          "    return json\n")
    found = check_layers.function_imports(root)
    assert found["paddle_ext/errors.py"] == [(len((root / "paddle_ext" / "errors.py").read_text().splitlines()) - 1,
                                              "json")]
    assert "paddle_ext/placements.py" not in found
    assert found.get("paddle_ext/spmd/__init__.py") is None
    assert not any(f.startswith(("paddle_ext/cli/", "paddle_ext/testing/")) for f in found)
    rep = check_layers.check(root, config=ROOT / "pyproject.toml")
    assert not rep.ok
    assert any(f.startswith("paddle_ext/errors.py has 1 function-level imports (baseline 0): line ")
               and "json -- import at the module top" in f for f in rep.failures), rep.failures
    assert not any("placements.py" in f or "cli/main.py" in f for f in rep.failures), rep.failures


def test_function_import_figures_only_shrink(tmp_path):
    baseline = tmp_path / "baseline.json"
    old = {**check_layers.load_baseline(), "function_imports": {"a.py": 3, "b.py": 2}}
    baseline.write_text(check_layers.json.dumps(old), encoding="utf-8")
    rep = check_layers.Report(figures={"internal_references": {}, "large_modules": {}, "cycles": [],
                                       "function_imports": {"a.py": 1, "b.py": 5, "c.py": 4}})
    new = check_layers.shrink_baseline(rep, baseline)
    assert new["function_imports"] == {"a.py": 1, "b.py": 2}   # lowered, never raised, never added


def _function(name: str, n_lines: int, indent: str = "") -> str:
    """A function of exactly ``n_lines`` lines, ``def`` included."""
    body = "".join(f"{indent}    x{i} = {i}\n" for i in range(n_lines - 2))
    return f"\n\n{indent}def {name}():\n{body}{indent}    return 0\n"


def test_new_long_function_is_reported(tmp_path):
    root = _copy_tree(tmp_path)
    # counted: a new 121-line function and a 121-line method; not counted: exactly 120 lines
    _append(root / "passes" / "schedule_ir.py", _function("_too_long", 121) + _function("_just_fits", 120))
    _append(root / "paddle_ext" / "errors.py", "\n\nclass _Big:" + _function("step", 121, indent="    "))
    # a baseline function that grew, and one that shrank
    _append(root / "spmd_rules" / "matmul.py", _function("_known", 125) + _function("_smaller", 121))
    baseline = {**check_layers.load_baseline(), "long_functions": {"spmd_rules/matmul.py::_known": 124,
                                                                   "spmd_rules/matmul.py::_smaller": 122}}
    found = check_layers.long_functions(root)
    assert found == {"passes/schedule_ir.py::_too_long": 121, "paddle_ext/errors.py::_Big.step": 121,
                     "spmd_rules/matmul.py::_known": 125, "spmd_rules/matmul.py::_smaller": 121}
    rep = check_layers.check(root, config=ROOT / "pyproject.toml", baseline=baseline)
    assert not rep.ok
    text = "\n".join(rep.failures)
    assert "passes/schedule_ir.py: function _too_long has 121 lines (over 120): split it into named steps" in text
    assert "paddle_ext/errors.py: function _Big.step has 121 lines (over 120)" in text
    assert "spmd_rules/matmul.py: function _known grew to 125 lines (baseline 124, limit 120)" in text
    assert "_just_fits" not in text and "_smaller" not in text
    assert any(s.startswith("spmd_rules/matmul.py::_smaller: 121 lines, baseline 122") for s in rep.stale), rep.stale


def test_widened_internal_references(tmp_path):
    """Check 2 counts auto_parallel.api, paddle.pir and private attributes of Paddle objects (by name,
    read from Paddle itself), one per line, outside compat only."""
    root = _copy_tree(tmp_path)
    errors = root / "paddle_ext" / "errors.py"
    start = len(errors.read_text().splitlines())
    _append(errors, "\n\ndef _a(x, dist, paddle):\n"                                 # +3
                    "    from paddle.distributed.auto_parallel import api\n"           # +4 counted
                    "    from paddle.distributed.fleet import _hidden\n"               # +5 counted
                    "    y = x._local_value()\n"                                       # +6 counted
                    "    z = dist.auto_parallel.api.dtensor_from_local\n"              # +7 counted
                    "    paddle.pir.set_insertion_point(y)\n"                          # +8 counted
                    "    w = x._rows_of_ours + x.__class__.__name__.__len__()\n"       # +9 not counted
                    "    return api, _hidden, y, z, w\n"
                    "\n\nclass _Own:\n    def __init__(self):\n"
                    "        self._placements_str = 'R'   # Paddle's Tensor has this name: counted\n"   # +15
                    "        self._own = 1\n")
    _append(root / "paddle_ext" / "compat" / "ports" / "views.py", "\n\ndef _b(x):\n    return x._local_value()\n")
    private = check_layers.paddle_private_names(["paddle.distributed"])
    assert "_local_value" in private and "_placements_str" in private
    assert "_rows_of_ours" not in private and "_own" not in private
    found = check_layers.internal_references(root, check_layers.sources)
    lines = [n - start for n, _ in found["paddle_ext/errors.py"]]
    assert lines == [4, 5, 6, 7, 8, 15], found["paddle_ext/errors.py"]
    assert not any(f.startswith("paddle_ext/compat/") for f in found)
    rep = check_layers.check(root, config=ROOT / "pyproject.toml")
    assert any(f.startswith("paddle_ext/errors.py references Paddle internals on 6 lines (baseline 0)")
               and "._local_value (a private attribute of Paddle)" in f for f in rep.failures), rep.failures


def test_compat_subpackages_are_layered(tmp_path):
    """A C++ piece (native/) importing a fix breaks the compat-layers contract."""
    root = _copy_tree(tmp_path)
    _append(root / "paddle_ext" / "compat" / "native" / "fast_key.py", "\nfrom ..fixes import table  # noqa: E402,F401\n")
    rep = check_layers.check(root, config=ROOT / "pyproject.toml")
    assert any(f.startswith("import-linter contract broken: inside compat: fixes/ may use ports/") for f in rep.failures), \
        rep.failures


def test_string_imports_count_in_the_cycle_check(tmp_path):
    # the registry loading its own rule families by name (as it once did) is a cycle: the rule
    # modules import the registry; so is a plugin package loaded with an f-string of __package__
    root = _copy_tree(tmp_path)
    _append(root / "paddle_ext" / "spmd" / "registry.py",
            '\n\ndef _load_rules():\n    importlib.import_module("paddle_ext.spmd_rules")\n')
    _append(root / "paddle_ext" / "reshard" / "transitions.py",
            '\n\ndef _load_kinds(importlib, name):\n    importlib.import_module(f"{__package__}.transition_kinds.{name}")\n')
    # a string that only names a module (a feature name in a message) is not an import
    _append(root / "paddle_ext" / "placements.py", '\n\n_FEATURE = "paddle_ext.errors"\n')
    rep = check_layers.check(root, config=ROOT / "pyproject.toml", baseline=check_layers.load_baseline())
    text = "\n".join(rep.failures)
    assert "new import cycle between paddle_ext.spmd.registry, paddle_ext.spmd_rules" in text, text
    assert "paddle_ext.reshard.transition_kinds.rescale, paddle_ext.reshard.transitions" in text, text
    assert not any("paddle_ext.errors" in f and "paddle_ext.placements" in f for f in rep.failures), text
