"""Trace the demo GPT into a :class:`~.model_desc.ModelDesc` (an adapter: imports Paddle).

Each layer (embedding, every block, the head with the loss) is converted with the public
``paddle.jit.to_static`` at a batch size that no other dim of the model uses, so an op's output
tells whether it carries the batch. Its program's ops give names, output shapes, the matmuls'
``(B, M, K, N)`` and the weights they read. Constants and views of parameters are dropped; the
rest is kept in program order. ``tests/unit/test_plan_model.py`` checks that the trace of the demo
equals :func:`~.model_desc.gpt_family` of its sizes, which is what the size overrides use.
"""
from __future__ import annotations

from .model_desc import LayerDesc, ModelDesc, OpDesc, ParamDesc, param_role

_SKIP = ("builtin.", "pd_op.data", "pd_op.full", "pd_op.full_int_array")


def _trace_batch(dims) -> int:
    """The smallest batch >= 2 that is no other dim (nor a product of it with seq)."""
    b = 2
    while b in dims:
        b += 1
    return b


def _prod(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _shape(value):
    """A value's shape, or None for a value that has none (a vector of tensors: split's output)."""
    try:
        return [int(d) for d in value.shape]
    except ValueError:
        return None


def _ops_of(fn, specs, owner, b0: int, seq: int, block: bool, role_of=param_role) -> tuple:
    """The ops of ``fn`` traced at batch ``b0``; ``role_of(name)`` says how tensor parallelism
    splits a parameter of ``owner`` (by its name there)."""
    import paddle

    static = paddle.jit.to_static(fn, input_spec=specs, full_graph=True)
    program = static.concrete_program.main_program if not hasattr(static, "forward") else \
        static.forward.concrete_program.main_program
    names = {p.name: n for n, p in owner.named_parameters()}
    params = {}
    ops, in_region = [], False
    for op in program.global_block().ops:
        name = op.name()
        if name == "builtin.parameter":
            params[op.result(0).id] = names.get(op.attrs().get("parameter_name"), op.attrs().get("parameter_name"))
        if name.startswith(_SKIP) or op.num_results() == 0:
            continue
        out = _shape(op.result(0))
        if out is None:
            continue
        batched = bool(out) and out[0] in (b0, b0 * seq)
        per_sample = tuple(([out[0] // b0] if out[0] == b0 * seq and out[0] != b0 else []) + out[1:]) \
            if batched else tuple(out)
        kind = name.split(".", 1)[1]
        gemm, scales, param, tp = None, "M", None, "none"
        if kind == "matmul":
            x, y = (operand.source() for operand in op.operands()[:2])
            param = params.get(y.id)
            xs, ys = [int(d) for d in x.shape], [int(d) for d in y.shape]
            tx, ty = bool(op.attrs().get("transpose_x")), bool(op.attrs().get("transpose_y"))
            k = xs[-2] if tx else xs[-1]
            if len(ys) == 2:
                gemm = (1, _prod(per_sample[:-1]), k, per_sample[-1])
            else:
                gemm, scales = (_prod(per_sample[:-2]), per_sample[-2], k, per_sample[-1]), "B"
            del ys, ty
            if param is not None and role_of is param_role:  # the demo's names: roles by path
                param = param[:-len(".weight")] if param.endswith(".weight") else param
        if block and batched:
            role = role_of(param) if param else "none"
            if role == "column":
                tp, in_region = "column", True
            elif role == "row":
                tp, in_region = "row", False
            else:
                tp = "heads" if in_region else "seq"
        ops.append(OpDesc(kind, per_sample, batched, tp, gemm, scales, param))
    return tuple(ops)


def trace_demo(cfg=None) -> ModelDesc:
    """The demo GPT (``paddle_ext.demo.model``) of config ``cfg`` (default: the demo's) as a ModelDesc."""
    import paddle

    from ..demo.model import GPTConfig, build_model, lm_loss

    cfg = cfg or GPTConfig()
    model = build_model(cfg, 0)
    b0 = _trace_batch({cfg.seq_len, cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.vocab, cfg.d_model // cfg.n_heads, 1})
    ids = paddle.static.InputSpec([b0, cfg.seq_len], "int64")
    hidden = paddle.static.InputSpec([b0, cfg.seq_len, cfg.d_model], "float32")

    def head_and_loss(x, y):
        return lm_loss(model.head(x), y)

    layers = [LayerDesc("embed", _ops_of(model.embed, [ids], model.embed, b0, cfg.seq_len, False),
                        _params(model.embed, "embed"))]
    for i, blk in enumerate(model.blocks):
        layers.append(LayerDesc("block", _ops_of(blk, [hidden], blk, b0, cfg.seq_len, True),
                                _params(blk, f"blocks.{i}")))
    layers.append(LayerDesc("head", _ops_of(head_and_loss, [hidden, ids], model.head, b0, cfg.seq_len, False),
                            _params(model.head, "head")))
    config = {"vocab": cfg.vocab, "seq_len": cfg.seq_len, "d_model": cfg.d_model, "n_heads": cfg.n_heads,
              "d_ff": cfg.d_ff, "n_layers": cfg.n_layers}
    return ModelDesc("demo", tuple(layers), cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.seq_len, cfg.vocab, 4,
                     "traced", config)


def _params(layer, prefix: str, role_of=param_role) -> tuple:
    return tuple(ParamDesc(f"{prefix}.{n}", tuple(int(d) for d in p.shape), role_of(n))
                 for n, p in layer.named_parameters())


__all__ = ["trace_demo"]
