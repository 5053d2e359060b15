"""Exact test data for reshard checks: integer-valued arrays and integer partial parts.

With small integers every sum, average (by a power of two) and max of the parts is exact in
float32 whatever the reduction order, so simulated, dygraph and native results can be compared
with the dense tensor bit for bit.
"""
from __future__ import annotations

import numpy as np

from paddle_ext.placements import DistSpec, Partial
from paddle_ext.simulated_ranks import shard_dense


def dense_for(shape, dtype=np.float32, seed=0) -> np.ndarray:
    """Small integer values: every sum, average and max of their parts is exact in float32."""
    rng = np.random.default_rng(seed)
    return rng.integers(-20, 21, size=shape).astype(dtype)


def exact_locals(dense: np.ndarray, spec: DistSpec, seed: int = 0) -> dict:
    """``shard_dense`` with integer-valued parts, so reductions are exact in any order.

    Partial(avg) parts are Partial(sum) parts scaled by the mesh dim's size (their mean is the
    sum of the unscaled parts), which keeps them integer-valued.
    """
    as_sum = tuple(Partial("sum") if isinstance(p, Partial) and p.op == "avg" else p
                   for p in spec.placements)
    ints = shard_dense(dense.astype(np.int64), DistSpec(spec.shape, spec.mesh_shape, as_sum), seed=seed)
    scale = 1
    for m, p in enumerate(spec.placements):
        if isinstance(p, Partial) and p.op == "avg":
            scale *= spec.mesh_shape[m]
    return {c: (a * scale).astype(dense.dtype) for c, a in ints.items()}
