"""Trace a PaddleNLP auto model's config into a :class:`~.model_desc.ModelDesc` (an adapter).

The planner's PaddleNLP models (``paddlenlp-gpt``, ``paddlenlp-qwen``: the real-model tests'
configs, :mod:`paddle_ext.models.real_models`) are traced like the demo (:mod:`.trace`): the
embedding, every decoder layer and the head with the loss, each converted with
``paddle.jit.to_static`` from the model's dense class, whose parameters have the auto class's
names and shapes. How tensor parallelism splits each parameter is read from the auto class
itself: it is built under ``paddle.LazyGuard`` on a mesh with ``mp = 2`` and each parameter's
placement on ``mp`` gives its role (``Shard`` of the last dim: column; of the first of two:
row; replicated or a plain parameter: none). So the description has what the runner trains: for
GPT 36 parameter tensors (biases and norm biases included, the LM head tied to the word
embedding) where the family formula wrote 20.
"""
from __future__ import annotations

import contextlib

import paddle
import paddle.distributed as dist
from paddle.distributed import fleet

from ..models import real_models as rm
from .model_desc import LayerDesc, ModelDesc
from .trace import _ops_of, _params, _trace_batch

MODELS = {"paddlenlp-gpt": "gpt", "paddlenlp-qwen": "qwen"}


def _role(placements, ndim: int) -> str:
    for p in placements[-1:]:   # the mesh's last dim is "mp" in PaddleNLP's auto meshes
        if p.is_shard():
            dim = p.get_dim()
            return "column" if dim == ndim - 1 else "row" if dim == 0 else "none"
    return "none"


@contextlib.contextmanager
def auto_mesh(dp: int, mp: int):
    """PaddleNLP's global auto mesh ``[pp 1, dp, mp]`` for the ``with`` block (its auto classes
    read it when built); the mesh before it is restored after."""
    before = dist.auto_parallel.get_mesh()
    try:
        yield fleet.auto.create_mesh([("pp", 1), ("dp", dp), ("mp", mp)])
    finally:
        dist.auto_parallel.set_mesh(before)


def auto_roles(model: str) -> dict:
    """``{parameter name: "column" | "row" | "none"}`` from PaddleNLP's auto class of ``model``
    (``gpt``, ``qwen``) built on one process at ``mp = 2``; the global auto mesh is restored."""
    with auto_mesh(1, 2), paddle.LazyGuard():
        net = rm.classes(model, auto=True)[0](rm.config(model, mp=2))
    return {n: _role(p.placements, len(p.shape)) if p.is_dist() else "none" for n, p in net.named_parameters()}


def _parts(model: str, net):
    """(embedding owner, its prefix, its call), (blocks with prefixes), (head owner, prefix,
    its params' owner and prefix, the final norm and LM head) of the dense ``net``."""
    if model == "gpt":
        def embed(ids):   # a def: to_static cannot convert a lambda
            return net.gpt.embeddings(input_ids=ids)
        emb = (net.gpt.embeddings, "gpt.embeddings", embed)
        blocks = [(layer, f"gpt.decoder.layers.{i}") for i, layer in enumerate(net.gpt.decoder.layers)]
        head_params = [(net.gpt.decoder.norm, "gpt.decoder.norm")]
        return emb, blocks, head_params, net.gpt.decoder.norm, net.lm_head
    def embed_qwen(ids):
        return net.qwen.wte(ids)
    emb = (net.qwen.wte, "qwen.wte", embed_qwen)
    blocks = [(layer, f"qwen.h.{i}") for i, layer in enumerate(net.qwen.h)]
    head_params = [(net.qwen.ln_f, "qwen.ln_f"), (net.lm_head, "lm_head")]
    return emb, blocks, head_params, net.qwen.ln_f, net.lm_head


def _block_call(layer, with_mask: bool):
    """A decoder layer as a function of its hidden states (and GPT's additive attention mask);
    a closure, as to_static converts one (not a default argument)."""
    if with_mask:
        def block(h, m):
            return layer(h, attention_mask=m)
        return block

    def block_no_mask(h):
        return layer(h)[0]
    return block_no_mask


def config_values(name: str) -> dict:
    """The sizes of ``name``'s config, as :func:`~.model_desc.describe_config` reads them (the
    family formula, for size overrides): PaddleNLP's GPT MLP is fc -> gelu -> fc; QWen's a SwiGLU
    with two halves of ``intermediate_size``."""
    cfg = rm.config(MODELS[name])
    values = {k: getattr(cfg, k, None) for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                                 "intermediate_size", "vocab_size", "seq_length",
                                                 "max_position_embeddings", "hidden_act")}
    values["hidden_act"] = "gelu" if name == "paddlenlp-gpt" else "silu"
    if name == "paddlenlp-qwen":
        values["intermediate_size"] = values["intermediate_size"] // 2
    return values


def trace_paddlenlp(name: str) -> ModelDesc:
    """The ModelDesc of ``paddlenlp-gpt`` or ``paddlenlp-qwen`` (the real-model tests' config)."""
    model = MODELS[name]
    roles = auto_roles(model)
    rm._casual_mask_switch()
    cfg = rm.config(model)
    cls, crit_cls = rm.classes(model, auto=False)
    net, criterion = cls(cfg), crit_cls(cfg)
    hidden, seq, heads = cfg.hidden_size, cfg.seq_length, cfg.num_attention_heads
    ffn = cfg.intermediate_size // (2 if model == "qwen" else 1)   # QWen: SwiGLU halves
    dims = {seq, hidden, heads, ffn, cfg.intermediate_size, cfg.vocab_size, hidden // heads, 3 * hidden, 1}
    b0 = _trace_batch(dims | {d * seq for d in dims})
    ids = paddle.static.InputSpec([b0, seq], "int64")
    states = paddle.static.InputSpec([b0, seq, hidden], "float32")
    mask = paddle.static.InputSpec([b0, 1, seq, seq], "float32")
    (emb, emb_prefix, embed), blocks, head_params, norm, lm_head = _parts(model, net)

    def role_in(prefix):
        return lambda n: roles.get(f"{prefix}.{n}" if prefix else n, "none")

    layers = [LayerDesc("embed", _ops_of(embed, [ids], emb, b0, seq, False, role_in(emb_prefix)),
                        _params(emb, emb_prefix, role_in(emb_prefix)))]
    for layer, prefix in blocks:
        block, specs = _block_call(layer, model == "gpt"), ([states, mask] if model == "gpt" else [states])
        layers.append(LayerDesc("block", _ops_of(block, specs, layer, b0, seq, True, role_in(prefix)),
                                _params(layer, prefix, role_in(prefix))))

    def head_and_loss(h, y):
        return criterion(lm_head(norm(h)), y)

    params = tuple(p for owner, prefix in head_params for p in _params(owner, prefix, role_in(prefix)))
    layers.append(LayerDesc("head", _ops_of(head_and_loss, [states, ids], net, b0, seq, False, role_in("")), params))
    config = {"vocab": cfg.vocab_size, "seq_len": seq, "d_model": hidden, "n_heads": heads, "d_ff": ffn,
              "n_layers": len(blocks)}
    return ModelDesc(name, tuple(layers), hidden, heads, ffn, seq, cfg.vocab_size, 4, "traced", config)


__all__ = ["MODELS", "auto_mesh", "auto_roles", "config_values", "trace_paddlenlp"]
