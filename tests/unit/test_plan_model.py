"""The planner's model description: the trace of the demo GPT equals the family formula, and the
formula's parameter count equals the closed form of the demo's layers."""
from __future__ import annotations

import pytest

from paddle_ext.demo.model import GPTConfig, build_model
from paddle_ext.plan.describe import describe_model
from paddle_ext.plan.errors import UnknownModelError
from paddle_ext.plan.model_desc import gpt_family
from paddle_ext.plan.trace import trace_demo


def test_trace_of_the_demo_equals_the_family_formula():
    traced = trace_demo(GPTConfig())
    formula = gpt_family(hidden=32, heads=4, ffn=64, seq=16, vocab=64, layers=4)
    assert traced.source == "traced"
    assert traced.layers == formula.layers
    # and the parameters are the model's own
    model = build_model(GPTConfig(), 0)
    assert traced.param_elems() == sum(int(p.size) for p in model.parameters())


@pytest.mark.parametrize("h,heads,f,s,v,n", [(32, 4, 64, 16, 64, 4), (4096, 32, 11008, 2048, 32000, 32)])
def test_param_count_closed_form(h, heads, f, s, v, n):
    # embed: v*h + s*h; block: 2 norms (2h) + q,k,v,o (4h^2) + gate, up, down (3hf); head: h + h*v
    m = gpt_family(h, heads, f, s, v, n)
    assert m.param_elems() == v * h + s * h + n * (2 * h + 4 * h * h + 3 * h * f) + h + h * v


def test_block_activation_closed_form():
    # per sample: norms 2*(3*s*h + 3*s), q/k/v 3*(3*s*h), scores 4*a*s*s (+ the mask's s*s not batched),
    # att.v + transpose + reshape 3*s*h, o 1*s*h, 2 residual adds 2*s*h, MLP 4*s*f, down 1*s*h
    h, a, f, s = 32, 4, 64, 16
    block = gpt_family(h, a, f, s, 64, 1).layers[1]
    expected = 2 * (3 * s * h + 3 * s) + 9 * s * h + 4 * a * s * s + 3 * s * h + s * h + 2 * s * h + 4 * s * f + s * h
    assert block.activation_elems_per_sample() == expected


def test_overrides_describe_a_larger_model_without_building_it():
    m = describe_model("demo", layers=32, hidden=4096)
    assert (m.n_layers, m.hidden, m.heads, m.ffn, m.source) == (32, 4096, 512, 8192, "formula")


def test_paddlenlp_configs():
    gpt, qwen = describe_model("paddlenlp-gpt"), describe_model("paddlenlp-qwen")
    assert [op.name for op in gpt.layers[1].ops].count("gelu") == 1
    assert (qwen.hidden, qwen.ffn, qwen.n_layers) == (64, 128, 2)
    assert gpt.source == qwen.source == "traced"


@pytest.mark.parametrize("name", ["paddlenlp-gpt", "paddlenlp-qwen"])
def test_paddlenlp_trace_has_the_models_parameters_and_paddlenlp_s_own_split(name):
    """The description holds every parameter tensor the model trains (PaddleNLP's own list), and
    each one's role is how PaddleNLP's auto class places it on ``mp`` (Paddle's placements)."""
    import paddle
    from paddle.distributed import fleet

    from paddle_ext.models import real_models as rm

    model = name.split("-", 1)[1]
    desc = describe_model(name)
    net = rm.classes(model, auto=False)[0](rm.config(model))
    mine = {p.path: p for layer in desc.layers for p in layer.params}
    assert {n: tuple(p.shape) for n, p in net.named_parameters()} == {k: p.shape for k, p in mine.items()}
    before = paddle.distributed.auto_parallel.get_mesh()
    fleet.auto.create_mesh([("pp", 1), ("dp", 1), ("mp", 2)])
    try:
        with paddle.LazyGuard():
            auto = rm.classes(model, auto=True)[0](rm.config(model, mp=2))
    finally:
        paddle.distributed.auto_parallel.set_mesh(before)
    for n, p in auto.named_parameters():
        shard = [q.get_dim() for q in p.placements[1:] if q.is_shard()] if p.is_dist() else []
        want = "none" if not shard else "column" if shard[0] == len(p.shape) - 1 else "row"
        assert mine[n].role == want, (n, p.placements if p.is_dist() else "dense", mine[n].role)
    # every matmul against a weight in a block is split the way its weight is
    for layer in desc.layers[1:-1]:
        for op in layer.ops:
            if op.gemm is not None and op.param is not None:
                prefix = next(p.path for p in layer.params if p.path.endswith(op.param))
                assert op.tp == mine[prefix].role if mine[prefix].role != "none" else op.tp in ("seq", "heads")


def test_unknown_model():
    with pytest.raises(UnknownModelError, match="unknown model 'gpt5'; the planner describes demo"):
        describe_model("gpt5")
