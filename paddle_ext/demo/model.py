"""A small GPT built from plain Paddle layers, shaped so every plan can shard it.

``x [batch, seq] -> tok_emb + pos_emb -> n_layers x Block -> RMSNorm -> head -> logits [batch, seq, vocab]``

``Block``: ``x + Attention(RMSNorm(x))`` then ``x + SwiGLU(RMSNorm(x))``. Attention is causal
multi-head: ``softmax(q k^T / sqrt(d_head) + mask) v``. The layers are kept as a flat list
(:meth:`GPT.layers`) so pipeline plans can split them into stages.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import paddle
import paddle.nn as nn
import paddle.nn.functional as F


@dataclass(frozen=True)
class GPTConfig:
    vocab: int = 64
    seq_len: int = 16
    d_model: int = 32
    n_heads: int = 4
    d_ff: int = 64
    n_layers: int = 4


class RMSNorm(nn.Layer):
    """``x * rsqrt(mean(x^2, -1) + eps) * weight`` (written out: Paddle's rms_norm has no CPU kernel)."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = self.create_parameter([dim], default_initializer=nn.initializer.Constant(1.0))

    def forward(self, x):
        return x * paddle.rsqrt((x * x).mean(axis=-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Layer):
    """Causal multi-head attention; q/k/v are column-parallel and o is row-parallel under TP."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_heads, self.d_head = cfg.n_heads, cfg.d_model // cfg.n_heads
        self.q = nn.Linear(cfg.d_model, cfg.d_model, bias_attr=False)
        self.k = nn.Linear(cfg.d_model, cfg.d_model, bias_attr=False)
        self.v = nn.Linear(cfg.d_model, cfg.d_model, bias_attr=False)
        self.o = nn.Linear(cfg.d_model, cfg.d_model, bias_attr=False)

    def _heads(self, t, b, s):
        return t.reshape([b, s, self.n_heads, self.d_head]).transpose([0, 2, 1, 3])

    def forward(self, x):
        b, s = x.shape[0], x.shape[1]
        q, k, v = (self._heads(proj(x), b, s) for proj in (self.q, self.k, self.v))
        scores = paddle.matmul(q, k, transpose_y=True) * (1.0 / math.sqrt(self.d_head))
        # Paddle 3.3.1 has no SPMD rule for masked_fill: on head-sharded scores it all-gathers
        # them (the replication audit shows it); paddle_ext.enable() keeps the heads sharded
        future = paddle.triu(paddle.ones([s, s], dtype="int32"), diagonal=1).astype("bool")
        att = F.softmax(paddle.masked_fill(scores, future, float("-inf")), axis=-1)
        out = paddle.matmul(att, v).transpose([0, 2, 1, 3]).reshape([b, s, self.n_heads * self.d_head])
        return self.o(out)


class SwiGLU(nn.Layer):
    """``down(silu(gate(x)) * up(x))``: gate/up column-parallel, down row-parallel under TP."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.gate = nn.Linear(cfg.d_model, cfg.d_ff, bias_attr=False)
        self.up = nn.Linear(cfg.d_model, cfg.d_ff, bias_attr=False)
        self.down = nn.Linear(cfg.d_ff, cfg.d_model, bias_attr=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


def _identity(x):
    return x


class Block(nn.Layer):
    """``x + exit(attn(enter(norm1(x))))`` then the same with the MLP.

    ``enter``/``exit`` are identity unless a plan sets them: tensor parallelism makes ``exit`` the
    all-reduce of the row-parallel output; sequence parallelism makes ``enter`` the all-gather of
    the sequence and ``exit`` the reduce-scatter back to sequence shards.
    """

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.norm1, self.attn = RMSNorm(cfg.d_model), Attention(cfg)
        self.norm2, self.mlp = RMSNorm(cfg.d_model), SwiGLU(cfg)
        self.enter, self.exit = _identity, _identity

    def forward(self, x):
        x = x + self.exit(self.attn(self.enter(self.norm1(x))))
        return x + self.exit(self.mlp(self.enter(self.norm2(x))))


class Embed(nn.Layer):
    """Token plus learned position embeddings; ``exit`` lays the result out for the blocks."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = self.create_parameter([cfg.seq_len, cfg.d_model],
                                         default_initializer=nn.initializer.Normal(std=0.02))
        self.exit = _identity

    def forward(self, ids):
        return self.exit(self.tok(ids) + self.pos)


class Head(nn.Layer):
    """Final RMSNorm and the vocabulary projection; ``enter`` gathers what the blocks sharded."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.norm = RMSNorm(cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.vocab, bias_attr=False)
        self.enter = _identity

    def forward(self, x):
        return self.proj(self.norm(self.enter(x)))


class GPT(nn.Layer):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = Embed(cfg)
        self.blocks = nn.LayerList([Block(cfg) for _ in range(cfg.n_layers)])
        self.head = Head(cfg)

    def layers(self) -> list:
        """The model as a flat list (embed, blocks..., head) for pipeline splits."""
        return [self.embed, *self.blocks, self.head]

    def forward(self, ids):
        x = ids
        for layer in self.layers():
            x = layer(x)
        return x


def lm_loss(logits, targets):
    """Mean next-token cross-entropy over every position."""
    vocab = logits.shape[-1]
    return F.cross_entropy(logits.reshape([-1, vocab]), targets.reshape([-1]))


def build_model(cfg: GPTConfig, seed: int) -> GPT:
    """The same initial weights on every rank and in the reference run."""
    paddle.seed(seed)
    return GPT(cfg)
