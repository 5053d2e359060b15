"""tools/paddle_spmd_tests.py: runs Paddle-style spmd_rules test files with
``core.get_phi_spmd_rule`` replaced by paddle-ext's registry and reports every failure.

Paddle's own files are not needed: a small file in Paddle's style is written into tmp_path, with
tests that pass, fail (twice in one method), raise in the rule, expect an exception that never
comes, and use an op paddle-ext has no rule for. The tool runs in child processes as it does
for Paddle's files.
"""
import importlib.util
import json
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("paddle_spmd_tests", ROOT / "tools" / "paddle_spmd_tests.py")
tool = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = tool   # its dataclasses look their module up while it loads
_spec.loader.exec_module(tool)

TINY = textwrap.dedent('''\
    import unittest

    from paddle.distributed.auto_parallel.static.dist_attribute import (
        DistTensorSpec,
        TensorDistAttr,
    )
    from paddle.distributed.fleet import auto
    from paddle.framework import core


    class TestTinyRules(unittest.TestCase):
        def setUp(self):
            self.rule = core.get_phi_spmd_rule("softmax")
            attr = TensorDistAttr()
            attr.process_mesh = auto.ProcessMesh(mesh=[[0, 1], [2, 3]])
            self.x = DistTensorSpec([4, 6, 8], attr)
            self.out = DistTensorSpec(self.x)

        def test_backward_with_the_input_mapping_never_set(self):
            # [1, -1, -1] --> [1, -1, -1], [1, -1, -1] (output --> input, output)
            self.out.set_dims_mapping([1, -1, -1])
            ins, outs = self.rule.infer_backward(self.x, self.out, -1)
            self.assertEqual(ins[0].dims_mapping, [1, -1, -1])

        def test_two_wrong_expectations(self):
            # softmax keeps the batch shard
            self.x.set_dims_mapping([0, -1, -1])
            ins, outs = self.rule.infer_forward(self.x, -1)
            self.assertEqual(outs[0].dims_mapping, [-1, -1, -1])  # WRONG-1
            # the input stays as given
            self.assertEqual(ins[0].dims_mapping, [1, -1, -1])  # WRONG-2

        def test_malformed_spec(self):
            # two entries for a rank-3 tensor
            self.x.set_dims_mapping([0, -1])
            self.rule.infer_forward(self.x, -1)  # RAISES

        def test_exception_that_never_comes(self):
            self.x.set_dims_mapping([0, -1, -1])
            # a valid spec: nothing to raise
            with self.assertRaises(NotImplementedError):
                self.rule.infer_forward(self.x, -1)
            self.assertEqual(1, 2)  # AFTER

        def test_op_paddle_ext_has_no_rule_for(self):
            rule = core.get_phi_spmd_rule("greater_than")
            self.x.set_dims_mapping([0, -1, -1])
            ins, outs = rule.infer_forward(self.x, self.x)
            self.assertEqual(outs[0].dims_mapping, [0, -1, -1])

        def test_partial_max(self):
            # [0, -1] --> [-1], partial on mesh dim 0
            rule = core.get_phi_spmd_rule("max")
            self.x.set_dims_mapping([0, -1, -1])
            ins, outs = rule.infer_forward(self.x, [0], False)
            self.assertEqual(outs[0]._partial_dims(), {0})
    ''')

CRASH = textwrap.dedent('''\
    import os
    import unittest


    class TestCrash(unittest.TestCase):
        def test_process_dies(self):
            os._exit(7)
    ''')


def line_of(marker: str) -> int:
    return next(k for k, text in enumerate(TINY.splitlines(), 1) if marker in text)


@pytest.fixture(scope="module")
def tests_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("paddle_tests")
    (d / "test_tiny_rule.py").write_text(TINY)
    (d / "test_crash_rule.py").write_text(CRASH)
    return d


@pytest.fixture(scope="module")
def every(tests_dir):
    """The tiny file through paddle-ext's rules with --every-assertion, and with Paddle's own."""
    return tool.run_all(tests_dir, ["test_tiny_rule.py"], every_assertion=True, baseline=True)[0]


def by_test(report):
    found = {}
    for f in report.failures:
        found.setdefault(f.test.split(".")[1], []).append(f)
    return found


def test_counts_and_which_rule_served_each_op(every):
    ext, alone = every
    assert (ext.passed, ext.failed) == (2, 4)
    assert ext.rules == {"softmax": "paddle-ext", "greater_than": "Paddle", "max": "paddle-ext"}
    assert (alone.passed, alone.failed) == (3, 3) and alone.rules == {}   # Paddle's P(sum) passes its test
    assert "\n  [Paddle's own rules] FAIL TestTinyRules.test_two_wrong_expectations" in tool.format_reports([every])


def test_every_failed_assertion_is_reported_with_its_line_and_case(every):
    fails = by_test(every[0])
    two = fails["test_two_wrong_expectations"]
    assert [(f.kind, f.line) for f in two] == [("FAIL", line_of("WRONG-1")), ("FAIL", line_of("WRONG-2"))]
    assert two[0].case == "# softmax keeps the batch shard" and two[1].case == "# the input stays as given"
    assert "Lists differ: [0, -1, -1] != [-1, -1, -1]" in two[0].reason
    never = fails["test_exception_that_never_comes"]
    assert [f.reason.split(":")[0] for f in never] == ["AssertionError", "AssertionError"]
    assert "NotImplementedError not raised" in never[0].reason and never[1].line == line_of("AFTER")


def test_an_exception_from_the_rule_is_an_error_with_the_rules_message(every):
    fails = by_test(every[0])
    (malformed,) = fails["test_malformed_spec"]
    assert malformed.kind == "ERROR" and malformed.line == line_of("RAISES")
    assert malformed.case == "# two entries for a rank-3 tensor"
    assert malformed.reason.startswith("PlacementError:") and "give one entry per tensor dim" in malformed.reason
    (partial,) = fails["test_partial_max"]
    assert partial.reason.startswith("ConversionError:") and "can only carry Partial(sum)" in partial.reason
    assert "test_backward_with_the_input_mapping_never_set" not in fails


def test_without_every_assertion_a_method_stops_at_its_first_failure(tests_dir):
    ((ext, alone),) = tool.run_all(tests_dir, ["test_tiny_rule.py"])
    assert alone is None and (ext.passed, ext.failed) == (2, 4)
    fails = by_test(ext)
    assert [f.line for f in fails["test_two_wrong_expectations"]] == [line_of("WRONG-1")]
    assert len(fails["test_exception_that_never_comes"]) == 1


def test_printed_report_and_exit_status(tests_dir, capsys):
    status = tool.main(["--paddle-tests", str(tests_dir), "--files", "test_tiny_rule.py", "test_crash_rule.py",
                        "test_missing_rule.py"])
    text = capsys.readouterr().out
    assert status == 2   # a file did not run
    assert "test_tiny_rule.py: 2 passed, 4 failed   [rules: greater_than=Paddle, max=paddle-ext, softmax=paddle-ext]" \
        in text
    assert f"  FAIL TestTinyRules.test_two_wrong_expectations, line {line_of('WRONG-1')} " \
           f"(# softmax keeps the batch shard):\n     AssertionError: Lists differ" in text
    assert "test_crash_rule.py: not run: process exited with status 7" in text
    assert "test_missing_rule.py: not run:" in text and "fetch Paddle's test/auto_parallel/spmd_rules/" in text
    assert "total: 2 passed, 4 failed in 3 files; not run: test_crash_rule.py, test_missing_rule.py" in text


def test_exit_status_says_whether_everything_passed():
    ok = tool.FileReport("a.py", "ext", passed=3)
    failed = tool.FileReport("b.py", "ext", passed=1, failed=1)
    assert tool.exit_status([(ok, None)]) == 0
    assert tool.exit_status([(ok, None), (failed, None)]) == 1
    assert tool.exit_status([(tool.FileReport("c.py", "ext", problem="missing"), None)]) == 2


def test_a_report_survives_the_trip_from_the_child_process():
    report = tool.FileReport("t.py", "ext", 1, 1, [tool.Failure("T.test_a", "FAIL", 12, "# case", "AssertionError: x")],
                             {"softmax": "paddle-ext"})
    assert tool.FileReport.from_json(json.loads(json.dumps(report.to_json()))) == report


def test_the_directory_is_required(capsys):
    with pytest.raises(SystemExit):
        tool.main([])
    assert "--paddle-tests DIR is required" in capsys.readouterr().err
