"""The public names DESIGN.md promises at the top of paddle_ext."""
import subprocess
import sys

import pytest

import paddle_ext


def test_import_does_not_import_paddle():
    code = "import sys, paddle_ext; paddle_ext.DistSpec((2,), (2,), '[S(0)]'); print('paddle' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_reshard_is_a_function_and_its_package_imports_by_name():
    # a fresh interpreter that imports the package's modules first: the name stays the function
    code = ("import types, sys; from paddle_ext.reshard.planner import format_plan, plan_reshard; "
            "import paddle_ext.reshard.transitions, paddle_ext.reshard.simulated; import paddle_ext; "
            "print(type(paddle_ext.reshard).__name__, type(sys.modules['paddle_ext.reshard']) is types.ModuleType, "
            "format_plan(plan_reshard(paddle_ext.DistSpec((4, 6), (2,), '[S(0)]'), "
            "paddle_ext.DistSpec((4, 6), (2,), '[S(1)]'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["function", "True", "[S(0)]", "->", "[S(1)]"], out.stderr


def test_reshard_call_reaches_the_executor():
    import paddle

    with pytest.raises(paddle_ext.ReshardPlanError, match="reshard needs a DistTensor"):
        paddle_ext.reshard(paddle.ones([2]), None, [])


def test_rule_registry_names():
    assert type(paddle_ext.get_spmd_rule("matmul")).__name__ == "SpmdRule"
    with pytest.raises(paddle_ext.ShardingRuleError, match="close names: matmul"):
        paddle_ext.get_spmd_rule("matmull")
