"""The public names DESIGN.md promises at the top of paddle_ext."""
import subprocess
import sys

import pytest

import paddle_ext


def test_import_does_not_import_paddle():
    code = "import sys, paddle_ext; paddle_ext.DistSpec((2,), (2,), '[S(0)]'); print('paddle' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_reshard_is_callable_and_a_package():
    assert callable(paddle_ext.reshard)
    plan = paddle_ext.reshard.plan_reshard(paddle_ext.DistSpec((4, 6), (2,), "[S(0)]"),
                                           paddle_ext.DistSpec((4, 6), (2,), "[S(1)]"))
    assert paddle_ext.reshard.format_plan(plan) == "[S(0)] -> [S(1)]"


def test_reshard_call_reaches_the_executor():
    import paddle

    with pytest.raises(paddle_ext.ReshardPlanError, match="reshard needs a DistTensor"):
        paddle_ext.reshard(paddle.ones([2]), None, [])


def test_rule_registry_names():
    assert type(paddle_ext.get_spmd_rule("matmul")).__name__ == "SpmdRule"
    with pytest.raises(paddle_ext.ShardingRuleError, match="close names: matmul"):
        paddle_ext.get_spmd_rule("matmull")
