"""Dispatch, single process: gradient placements, gap rules vs ground truth, enable()/disable(),
the audit and its CLI, and the errors (a one-rank mesh stands in for DistTensors)."""
import os
import sys
import textwrap

import numpy as np
import pytest

import paddle_ext

import paddle_ext.spmd_rules.gaps  # noqa: F401  (registers the gap rules)
from paddle_ext.dispatch.grad import grad_plan
from paddle_ext.errors import ShardingRuleError
from paddle_ext.placements import DistSpec
from paddle_ext.spmd import get_spmd_rule
from paddle_ext.spmd_rules.gaps import OWNED
from paddle_ext.spmd.opcases import CASES
from paddle_ext.spmd.registry import REGISTRY
from paddle_ext.spmd.validator import check_op


def D(shape, mesh, text):
    return DistSpec(shape, mesh, text)


# -- gradient placements (pure) ------------------------------------------------------------------
@pytest.mark.parametrize("ins, outs, want_in, want_out", [
    pytest.param(["[R]", "[S(1)]"], ["[S(1)]"], ["[P(sum)]", "[S(1)]"], ["[S(1)]"], id="x[R],w[S1]->y[S1]: dx P"),
    pytest.param(["[S(0)]", "[R]"], ["[S(0)]"], ["[S(0)]", "[P(sum)]"], ["[S(0)]"], id="x[S0],w[R]->y[S0]: dw P"),
    pytest.param(["[S(1)]", "[S(0)]"], ["[P(sum)]"], ["[S(1)]", "[S(0)]"], ["[R]"], id="P out: dy R"),
    pytest.param(["[R]"], ["[R]"], ["[R]"], ["[R]"], id="all R"),
    pytest.param(["[P(sum)]"], ["[P(sum)]"], ["[R]"], ["[R]"], id="P in: dx R"),
    pytest.param(["[R,S(0)]"], ["[S(1),S(0)]"], ["[P(sum),S(0)]"], ["[S(1),S(0)]"], id="2-D mesh"),
])
def test_grad_plan(ins, outs, want_in, want_out):
    mesh = (2,) if "," not in ins[0] else (2, 2)
    in_specs = [D((4, 8), mesh, t) for t in ins]
    out_specs = [D((4, 8), mesh, t) for t in outs]
    plan = grad_plan(in_specs, out_specs)
    assert [str(list(map(str, s.placements))).replace("'", "").replace(" ", "") for s in plan.input_grads] == \
        [w.replace(" ", "") for w in want_in]
    assert [str(list(map(str, s.placements))).replace("'", "").replace(" ", "") for s in plan.output_grads] == \
        [w.replace(" ", "") for w in want_out]


def test_grad_plan_avg_scale_max_refused_and_partialize():
    plan = grad_plan([D((4,), (2,), "[S(0)]")], [D((), (2,), "[P(avg)]")])
    assert plan.output_scale == (0.5,)
    with pytest.raises(ShardingRuleError, match="P\\(max\\) output has no local gradient"):
        grad_plan([D((4,), (2,), "[S(0)]")], [D((), (2,), "[P(max)]")], op="max")
    # a replicated input feeding a split and a replicated output: the replicated one's dy is
    # kept on coordinate 0 only, so the P(sum) input gradient counts it once
    plan = grad_plan([D((4, 6), (2,), "[R]")], [D((4, 6), (2,), "[S(0)]"), D((4,), (2,), "[R]")])
    assert plan.partialize == ((1, 0),)


# -- gap rules -----------------------------------------------------------------------------------
RULE_CASES = [
    ("tril", [D((5, 7), (2,), "[S(0)]")], {}, "tril: [S(0)] = [S(0)]"),
    ("flip", [D((5, 7), (2,), "[S(0)]")], {"axis": (1,)}, "flip: [S(0)] = [S(0)]"),
    ("flip", [D((5, 7), (2,), "[S(0)]")], {"axis": (0,)}, "flip: [S(0)] -> [R] = [R]"),
    ("gather", [D((4, 6), (2,), "[S(0)]"), D((5,), (2,), "[R]")], {"axis": 1}, "gather: [S(0)],[R] = [S(0)]"),
    ("kthvalue", [D((4, 6), (2,), "[S(0)]")], {"k": 2, "axis": 1}, "kthvalue: [S(0)] = [S(0)],[S(0)]"),
    ("mean_as_sum", [D((5, 7), (2,), "[S(0)]")], {"axis": None}, "mean_as_sum: [S(0)] = [P(sum)]"),
    ("addmm", [D((4, 6), (2,), "[R]"), D((4, 8), (2,), "[S(1)]"), D((8, 6), (2,), "[R]")], {},
     "addmm: [R],[S(1)],[R] -> [P(sum)],[S(1)],[S(0)] = [P(sum)]"),
    ("max_pool2d", [D((4, 3, 8, 8), (2,), "[S(1)]")],
     {"kernel_size": (2, 2), "stride": (2, 2), "padding": (0, 0, 0, 0)}, "max_pool2d: [S(1)] = [S(1)]"),
    ("repeat_interleave", [D((5, 3), (2,), "[S(0)]")], {"repeats": 2, "axis": 0},
     "repeat_interleave: [S(0)] -> [R] = [R]"),
]


@pytest.mark.parametrize("op, specs, attrs, want", RULE_CASES, ids=[c[3] for c in RULE_CASES])
def test_gap_rule(op, specs, attrs, want):
    assert str(get_spmd_rule(op, "ext").infer(specs, attrs)) == want


@pytest.mark.parametrize("op", OWNED)
def test_validator_finds_no_false_positive(op):
    rep = check_op(op, "ext")
    assert rep.cases > 0
    assert not rep.false_positives, [str(f) for f in rep.false_positives[:3]]
    assert not rep.errors, [str(f) for f in rep.errors[:3]]


def test_every_gap_rule_has_ground_truth():
    # registered with its rule (register_spmd_rule(op, case=...)), and what the validator reads
    assert len(OWNED) >= 28
    assert [op for op in OWNED if REGISTRY.rules[op].case is None or CASES.get(op) is not REGISTRY.rules[op].case] == []


# -- Paddle, one-rank mesh ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def paddle():
    import paddle as pd  # Paddle is required: its absence fails, never skips

    return pd


@pytest.fixture
def mesh(paddle):
    return paddle.distributed.ProcessMesh([0], dim_names=["x"])


def _x(paddle, mesh, shape=(4, 6), pl=None):
    dist = paddle.distributed
    a = np.arange(np.prod(shape), dtype="float32").reshape(shape)
    return dist.shard_tensor(paddle.to_tensor(a), mesh, [pl or dist.Shard(0)])


def test_enable_disable_restores_exact_objects(paddle):
    import paddle.nn.functional as F

    import paddle_ext.dispatch as pd

    before = (paddle.flip, paddle.Tensor.flip, F.max_pool2d, paddle.mean, paddle.Tensor.mean)
    names = pd.enable()
    try:
        assert len(names) >= 20 and pd.enabled_ops() == names
        assert paddle.flip is not before[0] and paddle.flip.__wrapped__ is before[0]
        assert pd.enable() == []      # idempotent
        dense = paddle.to_tensor([[1.0, 2.0]])
        assert paddle.flip(dense, [1]).numpy().tolist() == [[2.0, 1.0]]   # dense: Paddle's own
    finally:
        pd.disable()
    assert (paddle.flip, paddle.Tensor.flip, F.max_pool2d, paddle.mean, paddle.Tensor.mean) == before
    assert pd.enabled_ops() == []


def test_dispatch_keeps_sharding_and_grad(paddle, mesh):
    import paddle_ext.dispatch as pd

    x = _x(paddle, mesh)
    x.stop_gradient = False
    pd.enable(["flip", "tril"])
    try:
        y = paddle.tril(paddle.flip(x, [1]), 1)
        assert str(y.placements) == "[Shard(dim=0)]"
        y.sum().backward()
    finally:
        pd.disable()
    dense = np.arange(24, dtype="float32").reshape(4, 6)
    np.testing.assert_array_equal(y._local_value().numpy(), np.tril(dense[:, ::-1], 1))
    np.testing.assert_array_equal(x.grad._local_value().numpy(), np.tril(np.ones((4, 6)), 1)[:, ::-1])


def test_spmd_op_decorator_dense_and_dist(paddle, mesh):
    import paddle_ext.dispatch as pd

    calls = []

    @pd.spmd_op("softmax")
    def my_softmax(x, axis=-1):
        calls.append(type(x).__name__)
        return paddle.nn.functional.softmax(x, axis)

    dense = paddle.to_tensor([[1.0, 2.0]])
    assert my_softmax(dense).shape == [1, 2]
    y = my_softmax(_x(paddle, mesh), axis=-1)
    assert y.is_dist() and str(y.placements) == "[Shard(dim=0)]"
    assert my_softmax.spmd.rule_name == "softmax"


def test_an_overridden_rule_takes_effect_on_the_next_call(paddle, mesh):
    # the fix a DispatchError names (register a rule) must work for a rule already used: the
    # override drops the op's cached plans, so the next call is planned with the new rule
    from paddle_ext.spmd.registry import REGISTRY

    @paddle_ext.register_spmd_rule("pe_test_rowwise")
    def _keep_rows(x: DistSpec):
        """i j -> i j"""
        return "i j -> i j"

    @paddle_ext.spmd_op("pe_test_rowwise")
    def rowwise(x):
        return x * 2.0

    try:
        x = _x(paddle, mesh)
        assert str(rowwise(x).placements) == "[Shard(dim=0)]"
        assert str(rowwise(x).placements) == "[Shard(dim=0)]"   # now served from the plan cache

        @paddle_ext.register_spmd_rule("pe_test_rowwise", override=True)
        def _replicate(x: DistSpec):
            """i j -> i j | replicate: i"""
            return "i j -> i j | replicate: i"

        y = rowwise(x)
        assert str(y.placements) == "[Replicate()]", y.placements
        np.testing.assert_array_equal(y._local_value().numpy(), 2 * np.asarray(x._local_value().numpy()))
    finally:
        REGISTRY.rules.pop("pe_test_rowwise", None)
        REGISTRY._changed("pe_test_rowwise")


def test_errors_name_op_placements_and_fix(paddle, mesh):
    import paddle_ext.dispatch as pd

    x = _x(paddle, mesh)
    with pytest.raises(pd.DispatchError, match=r"no_such_op: no paddle-ext SPMD rule.*register_spmd_rule"):
        pd.dispatch("no_such_op", [x], {}, lambda t, c: t[0])
    idx = paddle.distributed.shard_tensor(paddle.zeros([2, 2], dtype="int64"), mesh,
                                          [paddle.distributed.Replicate()])
    with pytest.raises(pd.DispatchError, match=r"gather: the rule cannot serve inputs .*S\(0\).*reshard"):
        pd.dispatch("gather", [x, idx], {"axis": 1}, lambda t, c: t[0])
    with pytest.raises(pd.DispatchError, match=r"local shape .* but the rule claims"):
        pd.dispatch("relu", [x], {}, lambda t, c: t[0][:, :2])


def test_explain_call_is_pure():
    import paddle_ext.dispatch as pd

    text = pd.explain_call("flip", [D((5, 7), (2,), "[S(0)]")], {"axis": (0,)})
    assert "flip: [S(0)] -> [R] = [R]" in text and "reshard in0" in text and "grad:" in text


def test_audit_context_and_cli(paddle, mesh, tmp_path, capsys):
    import paddle_ext.dispatch as pd
    from paddle_ext.cli.main import main

    x = _x(paddle, mesh)
    with pd.audit() as rep:
        paddle.flip(x, [1])
        paddle.cumprod(x, dim=1)
        paddle.flip(paddle.to_tensor([1.0]), [0])      # dense: not audited
    assert rep.count == 2 and rep.ops() == ["cumprod", "flip"]
    assert "fell back to Replicate" in rep.text()
    pd.enable(["flip"])
    try:
        with pd.audit() as rep2:
            paddle.flip(x, [1])
            paddle.cumprod(x, dim=1)
    finally:
        pd.disable()
    assert rep2.ops() == ["cumprod"] and dict(rep2.dispatched) == {"flip": 1}

    script = tmp_path / "s.py"
    script.write_text(textwrap.dedent("""
        import sys
        import paddle, paddle.distributed as dist
        mesh = dist.ProcessMesh([0], dim_names=["x"])
        x = dist.shard_tensor(paddle.rand([4, 6]), mesh, [dist.Shard(0)])
        paddle.flip(x, [1]); paddle.kthvalue(x, 2, axis=1)
        assert sys.argv[1:] == ["--steps", "2"]
    """))
    out = tmp_path / "r.json"
    assert main(["audit", "--out", str(out), str(script), "--steps", "2"]) == 0
    assert "2 op calls fell back to Replicate" in capsys.readouterr().out
    import json

    assert json.loads(out.read_text())["by_op"] == {"flip": 1, "kthvalue": 1}
    assert main(["audit", "--enable", "--fail", str(script), "--steps", "2"]) == 0
    assert "no op call fell back" in capsys.readouterr().out
