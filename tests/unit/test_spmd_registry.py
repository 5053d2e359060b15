"""Registry: decorator checks, lookups, Paddle's calling convention, errors that say how to fix."""

import pytest

from paddle_ext.errors import ShardingRuleError
from paddle_ext.placements import DistSpec
from paddle_ext.spmd import REGISTRY, Rows, get_spmd_rule, register_spmd_rule
from paddle_ext.spmd.lookup import load_builtin_rules
from paddle_ext.spmd.registry import Registry


@pytest.fixture
def reg():
    return Registry()


def test_spmd_duplicate_refused_unless_override(reg):
    @reg.register("op_a")
    def a(x: DistSpec):
        """... -> ..."""
        return "... -> ..."

    with pytest.raises(ShardingRuleError, match="already registered.*override=True"):
        reg.register("op_a")(a)
    reg.register("op_a", override=True)(a)
    assert list(reg.rules) == ["op_a"]


@pytest.mark.parametrize("src,needle", [
    pytest.param("def f(x, k: int = 1): return '... -> ...'", "has no annotation", id="unannotated"),
    pytest.param("def f(k: int, x: DistSpec): return '... -> ...'", "tensor parameters must come before", id="order"),
    pytest.param("def f(*xs: DistSpec): return '... -> ...'", "not allowed", id="varargs"),
    pytest.param("def f(x: DistSpec, k: dict = None): return '... -> ...'", "annotation 'dict'", id="bad-attr-type"),
])
def test_spmd_signature_checked_at_registration(reg, src, needle):
    ns = {"DistSpec": DistSpec}
    exec(src, ns)
    with pytest.raises(ShardingRuleError, match=needle):
        reg.register("bad")(ns["f"])


def test_spmd_lookup_miss_lists_close_names():
    with pytest.raises(ShardingRuleError, match="close names: matmul"):
        get_spmd_rule("matmull")


def test_spmd_falls_back_to_paddle_rule():
    rule = get_spmd_rule("fused_rms_norm")
    assert rule.source == "paddle"
    assert get_spmd_rule("matmul").source == "ext"
    assert get_spmd_rule("matmul", source="paddle").source == "paddle"


def test_spmd_wrong_attribute_type_names_op_notation_and_fix():
    rule = get_spmd_rule("matmul")
    x, y = DistSpec((4, 8), (2,), "[R]"), DistSpec((8, 6), (2,), "[R]")
    with pytest.raises(ShardingRuleError) as exc:
        rule.infer([x, y], {"trans_x": "yes"})
    msg = str(exc.value)
    assert "matmul" in msg and "... m k, ... k n -> ... m n" in msg and "'trans_x'" in msg and "pass a bool" in msg


def test_spmd_rule_returning_wrong_number_of_placements(reg):
    @reg.register("two_in")
    def two_in(x: DistSpec, y: DistSpec):
        """x, y -> out (rows for one mesh dim)"""
        return Rows((("S(0)", "S(0)"),))  # one input placement for two inputs

    x = DistSpec((4,), (2,), "[S(0)]")
    with pytest.raises(ShardingRuleError) as exc:
        reg.get("two_in", "ext").infer([x, x])
    msg = str(exc.value)
    assert "two_in" in msg and "(S(0)) <- (S(0))" in msg and "1 input placements" in msg
    assert "give one placement per tensor" in msg


def test_spmd_unknown_attribute_suggests(reg):
    with pytest.raises(ShardingRuleError, match="did you mean 'trans_x'"):
        get_spmd_rule("matmul").infer([DistSpec((4, 8), (2,), "[R]"), DistSpec((8, 6), (2,), "[R]")],
                                      {"transx": True})


def test_spmd_paddle_calling_convention_returns_dist_attrs():
    from paddle_ext.compat.ports.spmd import dist_tensor_spec

    x = dist_tensor_spec(DistSpec((4, 8), (2,), "[S(1)]"))
    y = dist_tensor_spec(DistSpec((8, 6), (2,), "[R]"))
    ins, outs = get_spmd_rule("matmul").infer_forward(x, y, False, False)
    assert [list(a.dims_mapping) for a in ins] == [[-1, 0], [0, -1]]
    assert list(outs[0].dims_mapping) == [-1, -1] and outs[0]._is_partial()
    ins, outs = get_spmd_rule("matmul").infer_backward(x, y, dist_tensor_spec(DistSpec((4, 6), (2,), "[S(0)]")),
                                                        False, False)
    assert [list(a.dims_mapping) for a in ins] == [[0, -1], [-1, -1]]
    xs = [dist_tensor_spec(DistSpec((4, 6), (2,), "[S(1)]")), dist_tensor_spec(DistSpec((3, 6), (2,), "[R]"))]
    ins, outs = get_spmd_rule("concat").infer_forward(xs, 0)
    assert isinstance(ins[0], list) and [list(a.dims_mapping) for a in ins[0]] == [[-1, 0], [-1, 0]]


def test_spmd_registry_is_a_plain_dict_tests_can_reset():
    load_builtin_rules()
    old = REGISTRY.reset()
    try:
        assert REGISTRY.rules == {}

        @register_spmd_rule("tmp_op")
        def tmp_op(x: DistSpec):
            """... -> ..."""
            return "... -> ..."

        assert list(REGISTRY.rules) == ["tmp_op"]
    finally:
        REGISTRY.reset(old)
    assert "matmul" in REGISTRY.rules and len(REGISTRY.rules) >= 20


def test_spmd_custom_op_end_to_end(reg):
    @reg.register("my_rowsum")
    def my_rowsum(x: DistSpec, scale: float = 1.0):
        """r c -> r | reduce(sum): c"""
        return "r c -> r | reduce(sum): c"

    res = reg.get("my_rowsum", "ext").infer([DistSpec((4, 6), (2, 2), "[S(1),S(0)]")], {"scale": 2.0})
    assert str(res) == "my_rowsum: [S(1),S(0)] = [P(sum),S(0)]"


def test_spmd_repeated_inference_is_served_from_the_cache():
    """A repeated call does not run the rule again (its speed is tools/bench_spmd.py's business)."""
    rule = get_spmd_rule("matmul")
    rule.cache_clear()
    specs = [DistSpec((64, 128), (2, 2), "[S(0),S(1)]"), DistSpec((128, 32), (2, 2), "[R,R]")]
    attrs = {"trans_x": False, "trans_y": False}
    first = rule.infer(specs, attrs)
    misses = rule._cached.cache_info().misses
    again = [DistSpec((64, 128), (2, 2), "[S(0),S(1)]"), DistSpec((128, 32), (2, 2), "[R,R]")]
    assert rule.infer(specs, attrs) is first and rule.infer(again, dict(attrs)) is first
    assert rule._cached.cache_info().misses == misses
    other = rule.infer([DistSpec((64, 128), (2, 2), "[S(0),R]"), specs[1]], attrs)
    assert other is not first and rule._cached.cache_info().misses == misses + 1
