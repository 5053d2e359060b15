"""``paddle-ext plan`` for a user's own model, on one process: the factory protocol and its named
errors, the trace of ``examples/plan_my_model.py`` (an MLP-Mixer) against the model's own
structure and Paddle's, planning it for 4 ranks, and the emitted ``dist.parallelize``
configuration read back the way Paddle's own ``tensor_parallel`` / ``pipeline_parallel`` read it."""
import json
import math
import sys
from pathlib import Path

import paddle
import paddle.nn as nn
import paddle.nn.functional as F
import pytest

from paddle_ext.parallel_plan import parse_plan
from paddle_ext.plan.emit import expressible, parallelize_config, snippet, split_points
from paddle_ext.plan.trace_layer import find_blocks, trace_user_model
from paddle_ext.plan.user_errors import EmitError, FactoryImportError, FactoryReturnError, TraceError
from paddle_ext.plan.user_model import check_returned, dense_step, load_factory
from paddle_ext.plan.user_plan import describe, emit_plan

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import examples.plan_my_model as ex  # noqa: E402

SPEC = "examples.plan_my_model:build"


@pytest.fixture(scope="module")
def trace():
    return trace_user_model(load_factory(SPEC))


# -- the factory protocol: each part that fails is named ------------------------------------------

@pytest.mark.parametrize("spec, part", [
    ("examples.plan_my_model", "is not pkg.module:factory"),
    ("examples.no_such_module:build", "importing module 'examples.no_such_module' failed"),
    ("examples.plan_my_model:no_such", "has no callable 'no_such'"),
    ("examples.plan_my_model:PATCHES", "has no callable 'PATCHES' (PATCHES is a int)"),
])
def test_factory_import_errors_name_the_part(spec, part):
    with pytest.raises(FactoryImportError, match="pkg.module:factory|on PYTHONPATH|a factory returns") as err:
        load_factory(spec)
    assert part in str(err.value)


def _model():
    return nn.Linear(4, 4)


@pytest.mark.parametrize("returned, part", [
    ("model", "returned str, not (model, batch, loss)"),
    ((_model(), (paddle.ones([2, 4]), paddle.ones([2, 1]))), "of 2 items"),
    ((lambda x: x, (paddle.ones([2, 4]), paddle.ones([2, 1])), F.mse_loss), "no paddle.nn.Layer"),
    ((_model(), paddle.ones([2, 4]), F.mse_loss), "the batch must be (inputs, labels)"),
    ((_model(), ([1, 2], paddle.ones([2, 1])), F.mse_loss), "the batch's inputs must be a Tensor"),
    ((_model(), (paddle.ones([2, 4]), paddle.ones([3, 1])), F.mse_loss), "dim 0 of every input"),
    ((_model(), (paddle.ones([2, 4]), paddle.ones([2, 4])), "mse"), "the loss must be callable"),
])
def test_factory_return_errors_name_the_part(returned, part):
    with pytest.raises(FactoryReturnError) as err:
        check_returned("m:f", returned)
    assert part in str(err.value) and "a factory returns (model, batch, loss)" in str(err.value)


class _Broken(nn.Layer):
    def __init__(self, where):
        super().__init__()
        self.fc, self.where = nn.Linear(4, 4), where

    def forward(self, x):
        if self.where == "forward":
            return self.fc(x.reshape([3, -1, 7]))
        return self.fc(x)


@pytest.mark.parametrize("where, loss, part", [
    ("forward", F.mse_loss, r"the forward model\(\*inputs\) failed"),
    ("none", lambda out, y: out, "did not give a scalar Tensor"),
    ("none", lambda out, y: out.sum().detach(), "the backward of the loss failed|reached no parameter"),
])
def test_untraceable_steps_are_trace_errors(where, loss, part):
    um = check_returned("m:f", (_Broken(where), (paddle.ones([2, 4]), paddle.ones([2, 4])), loss))
    with pytest.raises(TraceError, match=part):
        trace_user_model(um)


# -- the trace of the example against the model's own structure ----------------------------------

def test_trace_finds_the_repeated_blocks_and_the_column_row_pairs(trace):
    model, _, _ = ex.build()
    assert find_blocks(model) == ("blocks", tuple(f"blocks.{i}" for i in range(ex.BLOCKS)))
    assert trace.block_names == tuple(f"blocks.{i}" for i in range(ex.BLOCKS))
    # each MLP of a MixerBlock: fc1 feeds fc2 through GELU (the example's forward)
    assert set(trace.column) == {"token_fc1", "channel_fc1"} and set(trace.row) == {"token_fc2", "channel_fc2"}
    kinds = [layer.kind for layer in trace.model.layers]
    assert kinds == ["embed"] + ["block"] * ex.BLOCKS + ["head"]
    replicated = dict(trace.replicated)
    assert set(replicated) == {"embed", "norm", "head"} | {f"blocks.{i}.norm{j}" for i in range(4) for j in (1, 2)}
    assert "outside the repeated blocks" in replicated["embed"] and "norm" in replicated["norm"]


def test_trace_parameters_and_flops_match_the_model(trace):
    model, _, _ = ex.build()
    assert trace.model.param_elems() == sum(math.prod(p.shape) for p in model.parameters())
    assert {p.path for layer in trace.model.layers for p in layer.params} == {n for n, _ in model.named_parameters()}
    # per sample, forward: every Linear is a matmul of (rows, in, out), written from the example's sizes
    n, c, t, h = ex.PATCHES, ex.CHANNELS, ex.TOKEN_HIDDEN, ex.CHANNEL_HIDDEN
    per_block = c * n * t * 2 + n * c * h * 2
    expected = n * ex.PATCH_DIM * c + ex.BLOCKS * per_block + c * ex.CLASSES
    got = sum(math.prod(op.gemm[:1]) * op.gemm[1] * op.gemm[2] * op.gemm[3]
              for layer in trace.model.layers for op in layer.ops if op.gemm)
    assert got == expected
    block = trace.model.layers[1]
    assert {op.param: op.tp for op in block.ops if op.param} == {
        "blocks.0.token_fc1.weight": "column", "blocks.0.token_fc2.weight": "row",
        "blocks.0.channel_fc1.weight": "column", "blocks.0.channel_fc2.weight": "row"}
    # the token MLP runs on [b, channels, patches]: the batch is dim 0 there too, the sequence moved
    assert trace.seq == ex.PATCHES and trace.model.hidden == ex.CHANNELS
    token_fc1 = next(op for op in block.ops if op.param == "blocks.0.token_fc1.weight")
    assert token_fc1.out == (1, c, t) and token_fc1.batched


class _Odd(nn.Layer):
    """A chain of three Linears per block and a Conv1D: the third Linear and the conv stay whole."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.LayerList([nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8))
                                    for _ in range(2)])
        self.conv = nn.Conv1D(4, 4, 1)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.conv(x)


def test_what_the_trace_cannot_classify_is_replicated_and_listed():
    um = check_returned("m:f", (_Odd(), (paddle.randn([2, 4, 8]), paddle.randn([2, 4, 8])), F.mse_loss))
    t = trace_user_model(um)
    assert t.column == ("0",) and t.row == ("1",)
    why = dict(t.replicated)
    assert "no column/row partner" in why["blocks.0.2"] and "no column/row partner" in why["blocks.1.2"]
    assert "Conv1D: not classified" in why["conv"]
    roles = {p.path: p.role for layer in t.model.layers for p in layer.params}
    assert roles["blocks.0.2.weight"] == "none" and roles["conv.weight"] == "none"


def test_dense_step_is_the_models_own_step():
    model, (x, y), loss_fn = ex.build()
    loss, grads = dense_step(check_returned(SPEC, (model, (x, y), loss_fn)))
    model2, (x2, y2), _ = ex.build()
    ref = F.cross_entropy(model2(x2), y2)
    ref.backward()
    assert loss == pytest.approx(float(ref), rel=1e-6)
    for name, p in model2.named_parameters():
        assert grads[name] == pytest.approx(p.grad.numpy(), rel=1e-5, abs=1e-7)


# -- planning the example, and its emitted configuration as Paddle reads it -----------------------

def test_example_plans_for_four_ranks(trace):
    tr, result = ex.plan(4)
    assert result.plans and all(not p.candidate.sp for p in result.plans)
    assert all(p.candidate.pp * p.candidate.dp * p.candidate.tp == 4 for p in result.plans)
    steps = [p.step_s for p in result.plans]
    assert steps == sorted(steps)
    text = describe(tr, result, 5)
    assert "repeated blocks: blocks.0 .. blocks.3" in text and result.plans[0].candidate.name in text
    assert ex.main([]) == 0


def test_config_is_what_paddles_tensor_parallel_matches(trace):
    from paddle.distributed.auto_parallel.intermediate.tensor_parallel import TensorParallel

    from paddle_ext.plan.apply import parallelize_args

    cfg = parallelize_config(trace, parse_plan("dp2-tp2", batch=8), SPEC, len(trace.model.layers))
    mesh, config = parallelize_args(json.loads(json.dumps(cfg)))
    assert mesh.shape == [2, 2] and mesh.dim_names == ["dp", "mp"]
    assert config["dp_config"] == {"sharding_level": 0} and "pp_config" not in config
    model, _, _ = ex.build()
    tp = TensorParallel(model, config["mp_config"]["parallelize_plan"])
    matched = {name: type(plans[0][0][0]).__name__ for name, layer in model.named_sublayers()
               for plans in [tp.match_layer(layer, name)] if plans}
    expected = {f"blocks.{i}.{n}": ("ColWiseParallel" if n.endswith("fc1") else "RowWiseParallel")
                for i in range(ex.BLOCKS) for n in ("token_fc1", "token_fc2", "channel_fc1", "channel_fc2")}
    assert matched == expected


@pytest.mark.parametrize("text, points", [("pp2-tp2:1F1B:m1", ["blocks.1"]),
                                          ("pp4:FThenB:m1", ["blocks.0", "blocks.2", "blocks.3"])])
def test_split_points_fall_on_block_ends(trace, text, points):
    plan = parse_plan(text, batch=8)
    assert split_points(trace.block_names, len(trace.model.layers), plan) == points
    cfg = parallelize_config(trace, plan, SPEC, len(trace.model.layers))
    assert cfg["pp_config"] == {"split_spec": {p: "END" for p in points}}
    assert cfg["schedule"]["applied_by"] == "dist.parallelize" and cfg["mesh"]["dim_names"] == ["pp", "dp", "mp"]


def test_a_schedule_parallelize_lacks_goes_to_paddle_ext_and_says_so(trace, tmp_path):
    plan = parse_plan("pp2-dp2:1F1B:m4", batch=8)
    assert "pipelines by annotation only" in expressible(plan)
    paths = emit_plan(trace, plan, tmp_path)
    cfg = json.loads(paths[0].read_text())
    assert cfg["schedule"]["applied_by"] == "paddle-ext"
    text = paths[1].read_text()
    assert "dist.parallelize cannot express this plan's pipeline" in text and "get_schedule(\"1F1B\")" in text
    compile(text, "apply_plan.py", "exec")
    from paddle_ext.plan.apply import apply_plan

    with pytest.raises(EmitError, match="paddle_ext.passes.runtime"):
        apply_plan(None, None, cfg)


def test_emitted_snippet_imports_only_paddle_and_apply_plan(trace, tmp_path):
    import ast

    paths = emit_plan(trace, parse_plan("dp2-tp2", batch=8), tmp_path)
    tree = ast.parse(paths[1].read_text())
    imported = {(n.module if isinstance(n, ast.ImportFrom) else a.name).split(".")[0]
                + (":" + ",".join(a.name for a in n.names) if isinstance(n, ast.ImportFrom) else "")
                for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                for a in (n.names[:1])}
    assert imported == {"paddle", "paddle_ext:apply_plan", "examples:build"}
    assert snippet(json.loads(paths[0].read_text())) == paths[1].read_text()


def test_sequence_parallel_plans_are_refused_by_name(trace):
    with pytest.raises(EmitError, match="sequence parallelism"):
        parallelize_config(trace, parse_plan("sp2-tp2-dp2", batch=8), SPEC, len(trace.model.layers))


def test_config_from_the_model_description_is_the_traces(trace):
    from paddle_ext.plan.user_plan import config_for

    plan = parse_plan("pp2-tp2:1F1B:m1", batch=8)
    assert config_for(trace.model, plan) == parallelize_config(trace, plan, SPEC, len(trace.model.layers))


@pytest.mark.parametrize("text, why", [("tp4", ""), ("zero2d2-tp2", ""), ("pp4:1F1B:m1", ""),
                                       ("pp2-dp2:1F1B:m1", ""), ("pp2-zero1d2:1F1B:m1", "pipeline with ZeRO"),
                                       ("pp2-tp2:1F1B:m4", "pipelines by annotation only")])
def test_run_runs_what_parallelize_expresses(text, why):
    from paddle_ext.plan.user_runner import runnable

    got = runnable(parse_plan(text, batch=8))
    assert (why in got) if why else got == ""


def test_gradient_error_is_relative_to_the_models_gradient_scale():
    import numpy as np

    from paddle_ext.plan.user_runner import grad_error

    ref = {"w": np.array([1.0, -2.0]), "b": np.array([1e-9])}
    assert grad_error({"w": np.array([1.0, -2.0]), "b": np.array([2e-9])}, ref) < 1e-8   # noise near zero
    assert grad_error({"w": np.array([1.0, -1.0]), "b": np.array([1e-9])}, ref) == pytest.approx(0.5)
    assert grad_error({}, ref) is None


class _Attention(nn.Layer):
    """A ViT-like block: q, k, v reach the output projection through the heads; up reaches down."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.up, self.down = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)

    def forward(self, x):
        b, n, d = x.shape
        y = self.norm1(x)
        q, k, v = (t(y).reshape([b, n, self.heads, d // self.heads]).transpose([0, 2, 1, 3])
                   for t in (self.q, self.k, self.v))
        a = F.softmax(q @ k.transpose([0, 1, 3, 2]), axis=-1) @ v
        x = x + self.o(a.transpose([0, 2, 1, 3]).reshape([b, n, d]))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


def test_attention_blocks_pair_qkv_with_the_output_projection():
    model = nn.Sequential(nn.Linear(12, 32), *[_Attention() for _ in range(3)], nn.Linear(32, 10))
    um = check_returned("m:f", (model, (paddle.randn([4, 16, 12]), paddle.randn([4, 16, 10])), F.mse_loss))
    t = trace_user_model(um)
    assert t.block_names == ("1", "2", "3")
    assert set(t.column) == {"q", "k", "v", "up"} and set(t.row) == {"o", "down"}
    assert t.model.heads == 4          # the reshape into 4 heads bounds the tensor-parallel degree
    assert {"0", "4"} <= set(dict(t.replicated))


def test_blocks_among_other_children_are_named_one_by_one_for_paddle():
    from paddle.distributed.auto_parallel.intermediate.tensor_parallel import TensorParallel

    from paddle_ext.plan.apply import parallelize_args

    model = nn.Sequential(nn.Linear(12, 32), *[_Attention() for _ in range(3)], nn.Linear(32, 10))
    t = trace_user_model(check_returned("m:f", (model, (paddle.randn([4, 16, 12]), paddle.randn([4, 16, 10])),
                                                F.mse_loss)))
    _, config = parallelize_args(parallelize_config(t, parse_plan("tp4", batch=4), "m:f", len(t.model.layers)))
    tp = TensorParallel(model, config["mp_config"]["parallelize_plan"])
    matched = {name for name, layer in model.named_sublayers() if tp.match_layer(layer, name)}
    assert matched == {f"{i}.{n}" for i in (1, 2, 3) for n in ("q", "k", "v", "o", "up", "down")}
