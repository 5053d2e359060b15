"""compat fix static-name-clash: dist.to_static refuses a model that merges gradients and whose
parameters have the names of an earlier model's parameters of another shape, notes every other
clash in one line, and lets the same model through again. (The clash's effect on training, and the way out, are checked on 2 ranks in
tests/multirank/test_static_engine.py.)"""
import logging

import pytest

from paddle_ext.compat.fixes import static_name_clash as snc
from paddle_ext.errors import StaticNameClashError


class Param:
    def __init__(self, name, shape):
        self.name, self.shape = name, list(shape)


class Layer:
    def __init__(self, *params):
        self._params = list(params)

    def parameters(self):
        return self._params


class Part:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def strategy(pipeline_acc=1, merge_k=1):
    return Part(pipeline=Part(enable=pipeline_acc > 1, accumulate_steps=pipeline_acc),
                gradient_merge=Part(enable=merge_k > 1, k_steps=merge_k))


PIPELINE = strategy(pipeline_acc=4)


@pytest.fixture(autouse=True)
def fresh_registry(monkeypatch):
    monkeypatch.setattr(snc, "_SEEN", {})


def test_which_strategies_merge_gradients():
    assert snc.merges(strategy(pipeline_acc=4)) and snc.merges(strategy(merge_k=2))
    assert not snc.merges(strategy()) and not snc.merges(None)
    assert not snc.merges(Part(pipeline=Part(enable=False, accumulate_steps=8)))


def test_another_shape_without_a_merge_is_only_noted(caplog):
    # DP/TP models of other shapes under the same names train exactly (tests/multirank): no refusal
    snc.check(Layer(Param("block_0.w_1", [16])), strategy())
    with caplog.at_level(logging.WARNING, logger="paddle_ext"):
        snc.check(Layer(Param("block_0.w_1", [16, 16])), strategy())
    assert len(caplog.records) == 1 and "block_0.w_1 [16, 16] (earlier [16])" in caplog.records[0].getMessage()


def test_another_shape_under_an_earlier_name_is_refused_with_the_fix():
    first = Layer(Param("block_0.w_0", [16, 16]), Param("block_0.w_1", [16]))
    snc.check(first)
    second = Layer(Param("block_0.w_0", [16, 16]), Param("block_0.w_1", [16, 16]), Param("block_0.w_2", [16]))
    with pytest.raises(StaticNameClashError) as info:
        snc.check(second, PIPELINE)
    msg = str(info.value)
    assert "block_0.w_1 [16, 16] (earlier [16])" in msg and "block_0.w_0" not in msg
    assert 'unique_name.guard("<prefix>_")' in msg
    # refused before it is remembered: the earlier model's names still stand
    assert snc._SEEN["block_0.w_1"][1] == (16,)


def test_equal_shapes_under_earlier_names_log_one_line(caplog):
    snc.check(Layer(Param("net_0.w_0", [8, 4])))
    with caplog.at_level(logging.WARNING, logger="paddle_ext"):
        snc.check(Layer(Param("net_0.w_0", [8, 4]), Param("net_0.w_1", [4])), PIPELINE)
    lines = [r.getMessage() for r in caplog.records if "dist.to_static" in r.getMessage()]
    assert len(lines) == 1 and "net_0.w_0 [8, 4]" in lines[0] and "optimizer state" in lines[0]


def test_the_same_model_again_is_no_clash(caplog):
    layer = Layer(Param("block_0.w_0", [16, 16]))
    snc.check(layer)
    with caplog.at_level(logging.WARNING, logger="paddle_ext"):
        snc.check(layer, PIPELINE)
    assert not caplog.records


def test_a_dead_earlier_parameter_still_clashes():
    # its variables stay in Paddle's global scope after the model is gone
    snc.check(Layer(Param("block_0.w_0", [16])))
    import gc
    gc.collect()
    with pytest.raises(StaticNameClashError):
        snc.check(Layer(Param("block_0.w_0", [32])), PIPELINE)


def test_many_clashes_are_counted_not_all_listed():
    snc.check(Layer(*[Param(f"p_{i}", [1]) for i in range(8)]))
    with pytest.raises(StaticNameClashError, match="and 3 more"):
        snc.check(Layer(*[Param(f"p_{i}", [2]) for i in range(8)]), PIPELINE)


def test_applied_and_reverted_on_paddles_to_static():
    import paddle.distributed as dist

    from paddle_ext.compat.fixes.table import TABLE

    fix = TABLE["static-name-clash"]
    original = dist.to_static
    was = fix.is_applied()
    fix.revert()
    try:
        assert fix.apply() and dist.to_static is not original and dist.to_static.__wrapped__ is original
        assert dist.auto_parallel.api.to_static is dist.to_static
        fix.revert()
        assert dist.to_static is original and dist.auto_parallel.api.to_static is original
    finally:
        if was:
            fix.apply()


@pytest.mark.parametrize("by", ["keyword", "position"])
def test_the_wrapper_finds_the_strategy_either_way(monkeypatch, by):
    import paddle.distributed as dist

    from paddle_ext.compat.fixes.table import TABLE

    fix = TABLE["static-name-clash"]
    was = fix.is_applied()
    fix.revert()
    seen = []
    monkeypatch.setattr(snc, "check", lambda layer, strategy=None: seen.append(strategy))
    try:
        fix.apply()
        marker = PIPELINE
        with pytest.raises(Exception):   # Paddle's to_static on a stand-in layer: only the check matters here
            if by == "keyword":
                dist.to_static(Layer(), None, None, None, strategy=marker)
            else:
                dist.to_static(Layer(), None, None, None, marker)
        assert seen == [marker]
    finally:
        fix.revert()
        if was:
            fix.apply()
