"""A model as the planner sees it: per layer, its ops with shapes and its parameters.

Pure values, no Paddle. A :class:`ModelDesc` is what :mod:`.trace` reads off one step of a Paddle
Layer (the demo GPT), or what :func:`gpt_family` writes from a config (a larger model of the same
shape family, a PaddleNLP config). Shapes are **per sample**: an op whose tensors carry the batch
dim (``batched``) is stored for batch 1 and scales with the microbatch a plan gives it.

How an op splits under tensor parallelism (``tp``), after the demo's sharding
(:mod:`paddle_ext.demo.sharding`):

==========  ==================================================================================
``column``  matmul against a column-parallel weight (q/k/v, gate/up): N / tp
``row``     matmul against a row-parallel weight (o, down): K / tp; the output is a partial sum
``heads``   between a column and a row matmul (attention, the MLP's activation): every tensor / tp
``seq``     norms and residuals of a block: / tp with sequence parallelism, whole without
``none``    embedding, head, loss and masks: replicated over tp
==========  ==================================================================================

>>> m = gpt_family(hidden=32, heads=4, ffn=64, seq=16, vocab=64, layers=4)
>>> [layer.kind for layer in m.layers], m.param_elems()
(['embed', 'block', 'block', 'block', 'block', 'head'], 45856)
>>> [op.gemm for op in m.layers[1].ops if op.param == "attn.q"]
[(1, 16, 32, 32)]
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Optional, Tuple

COLUMN = ("attn.q", "attn.k", "attn.v", "mlp.gate", "mlp.up")
ROW = ("attn.o", "mlp.down")
TP_KINDS = ("column", "row", "heads", "seq", "none")


def param_role(path: str) -> str:
    """``column``, ``row`` or ``none``: how the demo's tensor parallelism splits a parameter."""
    if any(path.endswith(c + ".weight") or path.endswith(c) for c in COLUMN):
        return "column"
    if any(path.endswith(r + ".weight") or path.endswith(r) for r in ROW):
        return "row"
    return "none"


@dataclass(frozen=True)
class OpDesc:
    """One op of a layer's forward.

    ``out`` is the output shape (per sample when ``batched``); ``gemm`` is ``(B, M, K, N)`` for a
    matmul (``B`` independent products of ``M x K`` by ``K x N``; the batch scales ``B`` when
    ``gemm_scales == "B"``, else ``M``); ``param`` the weight's path when the op reads one.
    """

    name: str
    out: Tuple[int, ...]
    batched: bool = True
    tp: str = "none"
    gemm: Optional[Tuple[int, int, int, int]] = None
    gemm_scales: str = "M"
    param: Optional[str] = None

    @property
    def numel(self) -> int:
        return math.prod(self.out)


@dataclass(frozen=True)
class ParamDesc:
    path: str
    shape: Tuple[int, ...]
    role: str = "none"   # column | row | none

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class LayerDesc:
    """``kind`` is embed, block or head (the head carries the loss)."""

    kind: str
    ops: Tuple[OpDesc, ...]
    params: Tuple[ParamDesc, ...]

    def param_elems(self) -> int:
        return sum(p.numel for p in self.params)

    def activation_elems_per_sample(self) -> int:
        """Elements the forward keeps for backward per sample: every op's output (conservative)."""
        return sum(op.numel for op in self.ops if op.batched)


@dataclass(frozen=True)
class ModelDesc:
    """A model for the planner: its layers and the sizes of its shape family."""

    name: str
    layers: Tuple[LayerDesc, ...]
    hidden: int
    heads: int
    ffn: int
    seq: int
    vocab: int
    dtype_bytes: int = 4
    source: str = "formula"
    config: dict = field(default_factory=dict)   # what a runner needs to build the model

    @property
    def n_layers(self) -> int:
        return sum(1 for layer in self.layers if layer.kind == "block")

    def param_elems(self) -> int:
        return sum(layer.param_elems() for layer in self.layers)

    def to_json(self) -> dict:
        """Plain JSON: sizes and, per layer, op names with shapes and the parameter bytes."""
        return {"name": self.name, "source": self.source, "hidden": self.hidden, "heads": self.heads,
                "ffn": self.ffn, "seq": self.seq, "vocab": self.vocab, "dtype_bytes": self.dtype_bytes,
                "param_bytes": self.param_elems() * self.dtype_bytes,
                "layers": [{"kind": layer.kind, "param_bytes": layer.param_elems() * self.dtype_bytes,
                            "activation_bytes_per_sample": layer.activation_elems_per_sample() * self.dtype_bytes,
                            "ops": [f"{op.name}{list(op.out)}" + (f"@{op.param}" if op.param else "")
                                    for op in layer.ops]}
                           for layer in self.layers]}


def _norm(d: int, ops: list) -> None:
    """The demo's RMSNorm written out: x*x, mean, +eps, rsqrt, x*r, *weight."""
    s = ()
    ops += [OpDesc("multiply", s + (d,), tp="seq"), OpDesc("mean", s + (1,), tp="seq"),
            OpDesc("scale", s + (1,), tp="seq"), OpDesc("rsqrt", s + (1,), tp="seq"),
            OpDesc("multiply", s + (d,), tp="seq"), OpDesc("multiply", s + (d,), tp="seq")]


def _block_ops(hidden: int, heads: int, ffn: int, seq: int, mlp: str) -> list:
    """The ops of one block for one sample, in the order the demo's Block runs them."""
    dh = hidden // heads
    ops: list = []
    # shapes below drop the batch dim (one sample); norm shapes are [seq, d]
    norm: list = []
    _norm(hidden, norm)
    ops += [replace(op, out=(seq,) + op.out) for op in norm]
    for name in ("q", "k", "v"):
        ops += [OpDesc("matmul", (seq, hidden), tp="column", gemm=(1, seq, hidden, hidden), param=f"attn.{name}"),
                OpDesc("reshape", (seq, heads, dh), tp="heads"), OpDesc("transpose", (heads, seq, dh), tp="heads")]
    ops += [OpDesc("matmul", (heads, seq, seq), tp="heads", gemm=(heads, seq, dh, seq), gemm_scales="B"),
            OpDesc("scale", (heads, seq, seq), tp="heads"),
            OpDesc("triu", (seq, seq), batched=False), OpDesc("cast", (seq, seq), batched=False),
            OpDesc("cast", (seq, seq), batched=False),
            OpDesc("masked_fill", (heads, seq, seq), tp="heads"), OpDesc("softmax", (heads, seq, seq), tp="heads"),
            OpDesc("matmul", (heads, seq, dh), tp="heads", gemm=(heads, seq, seq, dh), gemm_scales="B"),
            OpDesc("transpose", (seq, heads, dh), tp="heads"), OpDesc("reshape", (seq, hidden), tp="heads"),
            OpDesc("matmul", (seq, hidden), tp="row", gemm=(1, seq, hidden, hidden), param="attn.o"),
            OpDesc("add", (seq, hidden), tp="seq")]
    ops += [replace(op, out=(seq,) + op.out) for op in norm]
    if mlp == "swiglu":
        ops += [OpDesc("matmul", (seq, ffn), tp="column", gemm=(1, seq, hidden, ffn), param="mlp.gate"),
                OpDesc("silu", (seq, ffn), tp="heads"),
                OpDesc("matmul", (seq, ffn), tp="column", gemm=(1, seq, hidden, ffn), param="mlp.up"),
                OpDesc("multiply", (seq, ffn), tp="heads")]
    else:  # gelu MLP: up, gelu (PaddleNLP GPT)
        ops += [OpDesc("matmul", (seq, ffn), tp="column", gemm=(1, seq, hidden, ffn), param="mlp.up"),
                OpDesc("gelu", (seq, ffn), tp="heads")]
    ops += [OpDesc("matmul", (seq, hidden), tp="row", gemm=(1, seq, ffn, hidden), param="mlp.down"),
            OpDesc("add", (seq, hidden), tp="seq")]
    return ops


def _block_params(i: int, hidden: int, ffn: int, mlp: str) -> tuple:
    names = [("norm1.weight", (hidden,))] + [(f"attn.{n}.weight", (hidden, hidden)) for n in "qkvo"]
    names += [("norm2.weight", (hidden,))]
    mats = ("gate", "up") if mlp == "swiglu" else ("up",)
    names += [(f"mlp.{n}.weight", (hidden, ffn)) for n in mats] + [("mlp.down.weight", (ffn, hidden))]
    return tuple(ParamDesc(f"blocks.{i}.{n}", s, param_role(n)) for n, s in names)


def head_and_loss_ops(hidden: int, seq: int, vocab: int) -> list:
    norm: list = []
    _norm(hidden, norm)
    ops = [replace(op, out=(seq,) + op.out, tp="none") for op in norm]
    ops += [OpDesc("matmul", (seq, vocab), gemm=(1, seq, hidden, vocab), param="proj"),
            OpDesc("reshape", (seq, vocab)), OpDesc("reshape", (seq,)), OpDesc("unsqueeze", (seq, 1)),
            OpDesc("cross_entropy_with_softmax", (seq, vocab)), OpDesc("mean", (), batched=False)]
    return ops


def gpt_family(hidden: int, heads: int, ffn: int, seq: int, vocab: int, layers: int, *, mlp: str = "swiglu",
               name: str = "demo", dtype_bytes: int = 4, source: str = "formula") -> ModelDesc:
    """The demo GPT's shape family written from its sizes (the same ops a trace of the demo finds)."""
    embed = LayerDesc("embed", (OpDesc("embedding", (seq, hidden)), OpDesc("add", (seq, hidden))),
                      (ParamDesc("embed.pos", (seq, hidden)), ParamDesc("embed.tok.weight", (vocab, hidden))))
    blocks = tuple(LayerDesc("block", tuple(_block_ops(hidden, heads, ffn, seq, mlp)),
                             _block_params(i, hidden, ffn, mlp)) for i in range(layers))
    head = LayerDesc("head", tuple(head_and_loss_ops(hidden, seq, vocab)),
                     (ParamDesc("head.norm.weight", (hidden,)), ParamDesc("head.proj.weight", (hidden, vocab))))
    config = {"vocab": vocab, "seq_len": seq, "d_model": hidden, "n_heads": heads, "d_ff": ffn, "n_layers": layers}
    return ModelDesc(name, (embed,) + blocks + (head,), hidden, heads, ffn, seq, vocab, dtype_bytes, source, config)


def describe_config(cfg: dict, name: str) -> ModelDesc:
    """A PaddleNLP-style config (``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
    ``intermediate_size``, ``vocab_size``, ``seq_length``) as the GPT family: SwiGLU MLP unless
    the config's ``hidden_act`` is gelu (PaddleNLP GPT)."""
    mlp = "gelu" if "gelu" in str(cfg.get("hidden_act", "silu")) else "swiglu"
    seq = int(cfg.get("seq_length") or cfg.get("max_position_embeddings"))
    return gpt_family(int(cfg["hidden_size"]), int(cfg["num_attention_heads"]), int(cfg["intermediate_size"]),
                      seq, int(cfg["vocab_size"]), int(cfg["num_hidden_layers"]), mlp=mlp, name=name,
                      source="config")


__all__ = ["OpDesc", "ParamDesc", "LayerDesc", "ModelDesc", "gpt_family", "describe_config", "param_role",
           "COLUMN", "ROW", "TP_KINDS"]
