"""When Paddle's own dygraph reshard is exact and as cheap as paddle-ext's plan.

Measured on Paddle 3.3.1 CPU/gloo (``docs/reshard_matrix.md``, ``paddle-ext reshard-matrix``):
per mesh dim, ``R -> S(d)``, ``S(d) -> R``, ``R -> P(sum)`` and ``P(sum) -> R`` are exact for
evenly divided shapes on one mesh, and move the same bytes as paddle-ext's plan (a local slice,
an all-gather, nothing, an all-reduce). Paddle runs them with the collectives of the mesh's
own process group, so a reshard on a sub-mesh (a tensor-parallel group inside a pipeline stage)
involves only that sub-mesh's ranks. Everything else (S(i) -> S(j), P -> S, S -> P, other
reduce ops, co-shard, uneven or empty shards, cross-mesh) goes to paddle-ext.

>>> from paddle_ext.placements import DistSpec
>>> native_is_exact(DistSpec((4, 6), (2,), "[P(sum)]"), DistSpec((4, 6), (2,), "[R]"))
True
>>> native_is_exact(DistSpec((4, 6), (2,), "[P(sum)]"), DistSpec((4, 6), (2,), "[S(0)]"))
False
>>> native_is_exact(DistSpec((5, 6), (2,), "[S(0)]"), DistSpec((5, 6), (2,), "[R]"))   # uneven
False
"""
from __future__ import annotations

from ..placements import DistSpec, Partial, Replicate, Shard


def _even(spec: DistSpec) -> bool:
    for d in range(spec.ndim):
        mesh_dims = spec.shard_mesh_dims(d)
        if len(mesh_dims) > 1:
            return False  # co-shard
        if mesh_dims and spec.shape[d] % spec.mesh_shape[mesh_dims[0]]:
            return False
    return True


def _step_ok(src, dst) -> bool:
    if src == dst:
        return not isinstance(src, Partial) or src.op == "sum"
    if isinstance(src, Replicate):
        return isinstance(dst, Shard) or dst == Partial("sum")
    if isinstance(dst, Replicate):
        return isinstance(src, Shard) or src == Partial("sum")
    return False


def native_is_exact(src: DistSpec, dst: DistSpec, same_mesh: bool = True) -> bool:
    """True if Paddle's reshard is exact and no more costly for ``src -> dst`` on one mesh."""
    if not same_mesh or src.mesh_shape != dst.mesh_shape or src.shape != dst.shape:
        return False
    if not (_even(src) and _even(dst)):
        return False
    return all(_step_ok(a, b) for a, b in zip(src.placements, dst.placements))
