"""Run Paddle's own spmd_rules unit tests against paddle-ext's SPMD rules.

Paddle's tests (``test/auto_parallel/spmd_rules/test_*_rule.py`` in the Paddle repository; they
are not in the wheel) look their rule up with ``core.get_phi_spmd_rule(op)``. This tool runs
each file in its own process with that lookup replaced: an op paddle-ext has a rule for gets
paddle-ext's rule (called through the SPMD bridge, ``paddle_ext/compat/ports/spmd_bridge.py``), any
other op keeps Paddle's C++ rule. It prints, per file, how many tests passed and failed and
each failure with its reason::

    python tools/paddle_spmd_tests.py --paddle-tests /tmp/paddle_spmd_tests
    python tools/paddle_spmd_tests.py --paddle-tests DIR --files test_softmax_rule.py --every-assertion --baseline

``--baseline`` also runs each file with Paddle's own rules and lists their failures, so a
failure Paddle's own rules have too is visible. ``--every-assertion`` keeps a test method going
after a failed ``assertEqual`` or an ``assertRaises`` whose exception was not raised (Paddle's
tests check many cases in one method, so the first failure would hide the rest); an exception
the rule raises still ends the method.

A failure names the test, the line of the test file and the case comment Paddle wrote above it::

    FAIL TestElementwiseSPMDRule.test_multi_mesh_dim, line 252 (# [0, -1, -1], [-1, 1, 0] --> [0, 1, -1], ...):
         AssertionError: Lists differ: [-1, 1, 0] != [0, 1, -1] ...

Exit status: 0 when every test passed, 1 when a test failed, 2 when a file is missing or its
process died (a crash in a C++ rule takes only that file's process down).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import traceback
import unittest
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The eight files of issue #39: each uses ops with a paddle-ext rule.
DEFAULT_FILES = ("test_matmul_rule.py", "test_softmax_rule.py", "test_transpose_rule.py", "test_cumsum_rule.py",
                 "test_elementwise_rule.py", "test_layer_norm_rule.py", "test_reduction_rule.py",
                 "test_reshape_rule.py")
RESULT_TAG = "PADDLE_SPMD_TESTS_RESULT "
MODES = ("ext", "paddle")   # ext: paddle-ext's rules substituted; paddle: Paddle's own rules


@dataclass(frozen=True)
class Failure:
    """One failed check of a test method: where it is in the test file and why it failed."""

    test: str            # "TestClass.test_method"
    kind: str            # "FAIL" (an assertion) or "ERROR" (the rule or the test raised)
    line: int | None     # line of the test file that failed
    case: str            # the nearest comment above that line (Paddle writes each case there)
    reason: str          # exception type and message

    def format(self) -> str:
        where = f", line {self.line}" if self.line else ""
        case = f" ({self.case})" if self.case else ""
        return f"{self.kind} {self.test}{where}{case}:\n     {self.reason}"


@dataclass
class FileReport:
    """What running one test file gave: counts, failures, and which rule served each op."""

    name: str
    mode: str
    passed: int = 0
    failed: int = 0
    failures: list[Failure] = field(default_factory=list)
    rules: dict[str, str] = field(default_factory=dict)   # op -> "paddle-ext" or "Paddle"
    problem: str = ""    # the file could not be run (missing, import error, crashed process)

    def to_json(self) -> dict:
        return {"name": self.name, "mode": self.mode, "passed": self.passed, "failed": self.failed,
                "failures": [f.__dict__ for f in self.failures], "rules": self.rules, "problem": self.problem}

    @classmethod
    def from_json(cls, d: dict) -> "FileReport":
        return cls(d["name"], d["mode"], d["passed"], d["failed"], [Failure(**f) for f in d["failures"]],
                   d["rules"], d["problem"])

    def summary(self) -> str:
        if self.problem:
            return f"not run: {self.problem}"
        return f"{self.passed} passed, {self.failed} failed"


# -- inside the child process --------------------------------------------------------------------
def substitute_rule_lookup(used: dict[str, str]):
    """Replace ``core.get_phi_spmd_rule`` with paddle-ext's registry (Paddle's rule for an op
    paddle-ext has no rule for); ``used`` records which one served each op. Returns a function
    that puts Paddle's lookup back."""
    from paddle.base import core

    import paddle_ext  # noqa: F401 - connects the SPMD bridge
    from paddle_ext.spmd.lookup import load_builtin_rules
    from paddle_ext.spmd.registry import REGISTRY

    load_builtin_rules()
    paddle_lookup = core.get_phi_spmd_rule

    def get_phi_spmd_rule(op):
        if op in REGISTRY.rules:
            used[op] = "paddle-ext"
            return REGISTRY.rules[op]
        used[op] = "Paddle"
        return paddle_lookup(op)

    core.get_phi_spmd_rule = get_phi_spmd_rule

    def restore():
        core.get_phi_spmd_rule = paddle_lookup
    return restore


def _test_name(test) -> str:
    return f"{type(test).__name__}.{test._testMethodName}"


def _nearest_comment(lines: list[str], line: int) -> str:
    """The closest ``#`` comment line above ``line`` (1-based) within the same test method."""
    for k in range(line - 2, max(-1, line - 60), -1):
        text = lines[k].strip()
        if text.startswith("def "):
            return ""
        if text.startswith("#"):
            return text
    return ""


def _locate(tb, path: Path) -> int | None:
    """The last line of the test file in a traceback."""
    found = None
    for frame, lineno in traceback.walk_tb(tb):
        if Path(frame.f_code.co_filename).resolve() == path:
            found = lineno
    return found


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}"


class _Recorder(unittest.TestResult):
    """Collects every failure with its line, case comment and reason (soft ones included)."""

    def __init__(self, path: Path):
        super().__init__()
        self.path = path
        self.lines = path.read_text().splitlines()
        self.records: dict[str, list[Failure]] = {}
        self.names: list[str] = []

    def startTest(self, test):
        super().startTest(test)
        self.names.append(_test_name(test))
        self.records.setdefault(_test_name(test), [])
        test._soft_failures = []

    def _add(self, test, kind, err, line=None):
        exc_type, exc, tb = err
        line = line or _locate(tb, self.path)
        case = _nearest_comment(self.lines, line) if line else ""
        self.records[_test_name(test)].append(Failure(_test_name(test), kind, line, case, _reason(exc)))

    def addFailure(self, test, err):
        self._add(test, "FAIL", err)

    def addError(self, test, err):
        self._add(test, "ERROR", err)

    def stopTest(self, test):
        for exc, line in getattr(test, "_soft_failures", []):
            self._add(test, "FAIL", (type(exc), exc, None), line)
        super().stopTest(test)


def _soft_assert_equal(original):
    """``assertEqual`` that records a failure (and the caller's line) and lets the method go on."""
    def assert_equal(self, first, second, msg=None):
        try:
            original(self, first, second, msg)
        except self.failureException as exc:
            self._soft_failures.append((exc, sys._getframe(1).f_lineno))
    return assert_equal


def _soft_raises_exit(original):
    """``assertRaises`` context exit that records "X not raised" and lets the method go on (an
    exception of another type still propagates: the test errors)."""
    def exit_(self, exc_type, exc, tb):
        try:
            return original(self, exc_type, exc, tb)
        except self.test_case.failureException as failure:
            self.test_case._soft_failures.append((failure, sys._getframe(1).f_lineno))
            return True
    return exit_


def run_file(path: Path, mode: str, every_assertion: bool = False) -> FileReport:
    """Run one of Paddle's test files in this process and report it (used by the child)."""
    report = FileReport(path.name, mode)
    restore = substitute_rule_lookup(report.rules) if mode == "ext" else None
    original = unittest.TestCase.assertEqual
    raises_exit = unittest.case._AssertRaisesContext.__exit__
    if every_assertion:
        unittest.TestCase.assertEqual = _soft_assert_equal(original)
        unittest.case._AssertRaisesContext.__exit__ = _soft_raises_exit(raises_exit)
    try:
        spec = importlib.util.spec_from_file_location(f"paddle_spmd_test_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as exc:  # a file that does not import is a problem of the file, reported
            report.problem = f"import failed: {_reason(exc)}"
            return report
        recorder = _Recorder(path.resolve())
        unittest.defaultTestLoader.loadTestsFromModule(module).run(recorder)
    finally:
        unittest.TestCase.assertEqual = original
        unittest.case._AssertRaisesContext.__exit__ = raises_exit
        if restore is not None:
            restore()
    for name in recorder.names:
        # in the order they happened: soft failures are recorded when the method ends
        fails = sorted(recorder.records[name], key=lambda f: f.line or 0)
        report.failures.extend(fails)
        if fails:
            report.failed += 1
        else:
            report.passed += 1
    return report


# -- the parent process --------------------------------------------------------------------------
def run_in_child(path: Path, mode: str, every_assertion: bool = False, timeout: float = 600) -> FileReport:
    """Run one file in a fresh process (a C++ rule that crashes takes only that process down)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(path), "--mode", mode]
    if every_assertion:
        cmd.append("--every-assertion")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return FileReport(path.name, mode, problem=f"timed out after {timeout:.0f} s")
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_TAG):
            return FileReport.from_json(json.loads(line[len(RESULT_TAG):]))
    tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
    return FileReport(path.name, mode, problem=f"process exited with status {proc.returncode}: {tail[:400]}")


def run_all(directory: Path, names, every_assertion: bool = False, baseline: bool = False):
    """Reports per file: ``[(ext report, Paddle-alone report or None), ...]``."""
    out = []
    for name in names:
        path = directory / name
        if not path.is_file():
            missing = FileReport(name, "ext", problem=f"{path} not found; fetch Paddle's "
                                                      f"test/auto_parallel/spmd_rules/{name} into {directory}")
            out.append((missing, None))
            continue
        ext = run_in_child(path, "ext", every_assertion)
        alone = run_in_child(path, "paddle", every_assertion) if baseline else None
        out.append((ext, alone))
    return out


def format_reports(pairs) -> str:
    """The text the tool prints: one block per file, then the totals."""
    lines = []
    for ext, alone in pairs:
        head = f"{ext.name}: {ext.summary()}"
        if ext.rules:
            head += "   [rules: " + ", ".join(f"{op}={src}" for op, src in sorted(ext.rules.items())) + "]"
        if alone is not None:
            head += f"   (Paddle's own rules: {alone.summary()})"
        lines.append(head)
        lines.extend("  " + f.format() for f in ext.failures)
        if alone is not None:
            lines.extend("  [Paddle's own rules] " + f.format() for f in alone.failures)
    passed = sum(e.passed for e, _ in pairs)
    failed = sum(e.failed for e, _ in pairs)
    broken = [e.name for e, _ in pairs if e.problem]
    total = f"total: {passed} passed, {failed} failed in {len(pairs)} files"
    if broken:
        total += f"; not run: {', '.join(broken)}"
    lines.append(total)
    return "\n".join(lines)


def exit_status(pairs) -> int:
    if any(e.problem for e, _ in pairs):
        return 2
    return 1 if any(e.failed for e, _ in pairs) else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--paddle-tests", type=Path, help="directory holding Paddle's test_*_rule.py files")
    p.add_argument("--files", nargs="+", default=list(DEFAULT_FILES),
                   help="file names in that directory (default: the eight of issue #39)")
    p.add_argument("--every-assertion", action="store_true",
                   help="keep a test method going after a failed assertEqual/assertRaises; report every one")
    p.add_argument("--baseline", action="store_true", help="also run each file with Paddle's own rules")
    p.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--mode", choices=MODES, default="ext", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child is not None:
        report = run_file(args.child, args.mode, args.every_assertion)
        print(RESULT_TAG + json.dumps(report.to_json()), flush=True)
        return 0
    if args.paddle_tests is None:
        p.error("--paddle-tests DIR is required: a directory holding Paddle's spmd_rules test files "
                "(test/auto_parallel/spmd_rules/ in the Paddle repository)")
    if not args.paddle_tests.is_dir():
        p.error(f"--paddle-tests {args.paddle_tests} is not a directory")
    pairs = run_all(args.paddle_tests, args.files, args.every_assertion, args.baseline)
    print(f"Paddle's spmd_rules tests with core.get_phi_spmd_rule -> paddle-ext's registry ({args.paddle_tests})")
    print(format_reports(pairs))
    return exit_status(pairs)


if __name__ == "__main__":
    sys.exit(main())
