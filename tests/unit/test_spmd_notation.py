"""Notation parsing, binding and its error messages."""
import doctest

import pytest

import paddle_ext.spmd.dimtrans
import paddle_ext.spmd.einsum
import paddle_ext.spmd.notation
import paddle_ext.spmd.onedim
import paddle_ext.spmd.registry
import paddle_ext.spmd.result
from paddle_ext.errors import ShardingRuleError
from paddle_ext.spmd.notation import parse_notation


@pytest.mark.parametrize("mod", [paddle_ext.spmd.notation, paddle_ext.spmd.einsum, paddle_ext.spmd.result,
                                 paddle_ext.spmd.dimtrans, paddle_ext.spmd.onedim, paddle_ext.spmd.registry],
                         ids=lambda m: m.__name__)
def test_spmd_doctests(mod):
    res = doctest.testmod(mod)
    assert res.failed == 0 and res.attempted > 0


@pytest.mark.parametrize("text,canon", [
    pytest.param("mk,kn->mn", "m k, k n -> m n", id="single-letter"),
    pytest.param("batch m k, k n -> batch m n", "batch m k, k n -> batch m n", id="multi-letter"),
    pytest.param("...mk,...kn->...mn", "... m k, ... k n -> ... m n", id="single-letter-ellipsis"),
    pytest.param("x y -> x | reduce(max): y", "x y -> x | reduce(max): y", id="declared-reduce"),
    pytest.param("b s h -> b s h | replicate: h", "b s h -> b s h | replicate: h", id="replicate"),
    pytest.param("k, k ->", "k, k ->", id="scalar-output"),
])
def test_spmd_notation_forms_round_trip(text, canon):
    n = parse_notation(text)
    assert str(n) == canon
    assert parse_notation(str(n)) == n


def test_spmd_notation_categories():
    n = parse_notation("m k, k n -> m n")
    assert n.reduction_ops() == {"k": "sum"}
    mean = parse_notation("a b -> a | reduce(avg): b")
    assert "b" in mean.even  # avg reductions are only right on even shards


def test_spmd_binding_broadcast_and_ellipsis():
    b = parse_notation("..., ... -> ...").bind([(4, 1), (3, 4, 6)])
    assert b.inputs == (("...1", "...2"), ("...0", "...1", "...2"))
    assert (0, 1) in b.broadcast and b.output_shapes == ((3, 4, 6),)


@pytest.mark.parametrize("text,shapes,needle", [
    pytest.param("m k, k n -> m n -> x", [(2, 2), (2, 2)], "arrows", id="two-arrows"),
    pytest.param("m k, k n  m n", [(2, 2), (2, 2)], "arrows", id="no-arrow"),
    pytest.param("m k, k n -> m n", [(2, 3, 4), (4, 5)], "rank 3", id="rank-mismatch"),
    pytest.param("m k, k n -> m n", [(2, 3), (4, 5)], "factor 'k' has size 3", id="two-sizes"),
    pytest.param("m k -> m z", [(2, 3)], "no input has", id="unknown-output-factor"),
    pytest.param("m k -> m | reduce(prod): k", [(2, 3)], "unknown", id="bad-reduce-op"),
])
def test_spmd_bad_notation_quotes_notation_and_operand(text, shapes, needle):
    with pytest.raises(ShardingRuleError) as exc:
        parse_notation(text).bind(shapes, op="myop")
    msg = str(exc.value)
    assert needle in msg and repr(text) in msg
    assert ";" in msg  # every message ends with how to fix it


def test_spmd_bad_notation_names_op_and_operand():
    with pytest.raises(ShardingRuleError, match=r"myop: notation .*input 1 \('k n'\) has 2 factors"):
        parse_notation("m k, k n -> m n").bind([(2, 3), (3, 4, 5)], op="myop")
