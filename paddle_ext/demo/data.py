"""The demo's dataset: token sequences from a fixed random bigram language (no download).

A seeded ``vocab x vocab`` transition table with a few likely successors per token generates
sequences; the model learns the table, so the loss falls visibly within 20 steps.

>>> batches = make_batches(steps=2, batch=4, seq_len=8, vocab=32, seed=0)
>>> batches[0][0].shape, batches[0][1].shape, batches[0][0].dtype.name
((4, 8), (4, 8), 'int64')
>>> bool((batches[0][0][:, 1:] == batches[0][1][:, :-1]).all())   # targets are inputs shifted by one
True
"""
from __future__ import annotations

import numpy as np


def bigram_table(vocab: int, seed: int) -> np.ndarray:
    """Row-stochastic transitions: each token has 3 likely successors and a little noise."""
    rng = np.random.default_rng(seed)
    table = np.full((vocab, vocab), 0.02 / vocab)
    for t in range(vocab):
        table[t, rng.choice(vocab, size=3, replace=False)] += np.array([0.6, 0.25, 0.13])
    return table / table.sum(axis=1, keepdims=True)


def make_batches(steps: int, batch: int, seq_len: int, vocab: int, seed: int = 0):
    """``steps`` (inputs, targets) pairs of int64 arrays shaped ``[batch, seq_len]``."""
    rng = np.random.default_rng(seed + 1)
    table = bigram_table(vocab, seed)
    cumulative = table.cumsum(axis=1)
    out = []
    for _ in range(steps):
        seq = np.empty((batch, seq_len + 1), dtype=np.int64)
        seq[:, 0] = rng.integers(0, vocab, size=batch)
        for i in range(1, seq_len + 1):
            u = rng.random(batch)
            seq[:, i] = (cumulative[seq[:, i - 1]] < u[:, None]).sum(axis=1).clip(max=vocab - 1)
        out.append((seq[:, :-1].copy(), seq[:, 1:].copy()))
    return out
