"""``enable()`` covers the rules a user registers under a public Paddle function's name.

One process, a mesh of rank 0: Paddle's own ``heaviside`` and ``renorm`` have no SPMD rule and
compute a sharded input replicated; a rule registered with ``paddle_ext.register_spmd_rule``
under the function's name keeps the sharding once ``enable()`` runs, with the dense values, and
``disable()`` gives Paddle's function back. Bad registrations get named errors.
"""
import numpy as np
import pytest

import paddle
import paddle.distributed as dist

import paddle_ext
from paddle_ext.errors import ShardingRuleError
from paddle_ext.placements import DistSpec
from paddle_ext.spmd.registry import REGISTRY

A = (np.arange(24, dtype="float32").reshape(4, 6) - 10.0) / 3.0
B = np.linspace(-1.0, 1.0, 24, dtype="float32").reshape(4, 6)


@pytest.fixture(autouse=True)
def clean_registry():
    assert not dist.is_initialized() and dist.get_world_size() == 1
    saved = dict(REGISTRY.rules)
    yield
    paddle_ext.disable()
    REGISTRY.reset(saved)


def _sharded(a):
    mesh = dist.ProcessMesh([0], dim_names=["x"])
    return dist.shard_tensor(paddle.to_tensor(a), mesh, [dist.Shard(0)])


def _register_heaviside():
    @paddle_ext.register_spmd_rule("heaviside")
    def heaviside(x: DistSpec, y: DistSpec):
        """i j, i j -> i j"""
        return "i j, i j -> i j"


def test_paddle_alone_computes_heaviside_replicated():
    # the gap this test file is about: Paddle has no rule, the output is replicated
    assert paddle.heaviside(_sharded(A), _sharded(B)).placements[0].is_replicated()


def test_enable_routes_a_registered_rule_for_a_paddle_function():
    _register_heaviside()
    assert "heaviside" in paddle_ext.enable()
    out = paddle.heaviside(_sharded(A), _sharded(B))
    assert out.placements[0].is_shard() and out.placements[0].get_dim() == 0
    np.testing.assert_array_equal(out.numpy(), np.heaviside(A, B))
    paddle_ext.disable()
    assert paddle.heaviside(_sharded(A), _sharded(B)).placements[0].is_replicated()


def test_a_rules_attributes_are_the_functions_arguments_of_the_same_name():
    @paddle_ext.register_spmd_rule("renorm")
    def renorm(x: DistSpec, p: float, axis: int, max_norm: float):
        """rows of ``axis`` are renormalised whole: the other dims replicate"""
        names = ["i", "j"]
        keep = names[axis]
        rest = " ".join(n for n in names if n != keep)
        return f"i j -> i j | replicate: {rest}"

    assert paddle_ext.enable(["renorm"]) == ["renorm"]
    out = paddle.renorm(_sharded(A), 2.0, 0, 1.0)
    assert out.placements[0].is_shard()
    norms = np.linalg.norm(A, axis=1, keepdims=True)
    dense = np.where(norms > 1.0, A / (norms + 1e-7), A)
    np.testing.assert_allclose(out.numpy(), dense, rtol=1e-5, atol=1e-6)


def test_a_rule_whose_parameters_are_not_the_functions_is_a_named_error():
    @paddle_ext.register_spmd_rule("heaviside")
    def heaviside(a: DistSpec, b: DistSpec):
        """i j, i j -> i j"""
        return "i j, i j -> i j"

    with pytest.raises(ShardingRuleError, match=r"parameter\(s\) \['a', 'b'\].*name the rule's tensors"):
        paddle_ext.enable()


def test_a_rule_for_no_paddle_function_points_to_spmd_op():
    @paddle_ext.register_spmd_rule("my_own_op")
    def my_own_op(x: DistSpec):
        """i -> i"""
        return "i -> i"

    with pytest.raises(ShardingRuleError, match="spmd_op"):
        paddle_ext.enable(["my_own_op"])
    assert "my_own_op" not in paddle_ext.enable()   # enable() of everything leaves it alone
