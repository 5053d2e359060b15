"""Simulated ranks in one process: shard dense arrays per placement, run, reassemble.

A library module (the rule validator and the reshard executor's checks use it), re-exported by
:mod:`paddle_ext.testing` for tests.

This is how rules and reshard plans are checked without launching processes:

1. :func:`shard_dense` gives each mesh coordinate its local array for a :class:`DistSpec`:
   ceil-first slices for ``Shard``, and for ``Partial`` an *asymmetric* random decomposition
   whose reduction is the dense value (sum: weighted parts plus zero-sum noise; avg: zero-mean
   noise; max/min: one random rank per element holds the extreme), so coincidences cannot pass.
2. a local function runs per coordinate (:func:`run_per_rank`);
3. :func:`assemble` rebuilds the dense array from a claimed spec: concat for ``Shard`` (inner
   mesh dims first), reduce for ``Partial``, an equality check for ``Replicate``.

>>> import numpy as np
>>> x = np.arange(10.0).reshape(5, 2)
>>> spec = DistSpec((5, 2), (2,), "[S(0)]")
>>> {c: a.shape for c, a in shard_dense(x, spec).items()}
{(0,): (3, 2), (1,): (2, 2)}
>>> bool((assemble(shard_dense(x, DistSpec((5, 2), (2, 2), "[P(sum),S(1)]")), DistSpec((5, 2), (2, 2), "[P(sum),S(1)]")) - x).max() < 1e-9)
True
"""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np

from .errors import PlacementError
from .placements import DistSpec, Partial, Shard

Coord = tuple


class AssembleError(PlacementError):
    """Local arrays do not form a tensor with the claimed placements (e.g. replicas differ)."""


def _partial_parts(value: np.ndarray, op: str, n: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Split ``value`` into ``n`` arrays whose ``op``-reduction is ``value`` (asymmetric)."""
    if n == 1:
        return [value.copy()]
    is_int = np.issubdtype(value.dtype, np.integer)
    is_bool = value.dtype == np.bool_
    if is_bool:
        if op in ("max", "min"):
            pick = rng.integers(0, n, size=value.shape)
            fill = not (op == "max")  # others hold the neutral element
            parts = [np.where(pick == i, value, fill) if value.ndim else (value if pick == i else np.bool_(fill))
                     for i in range(n)]
            return [np.asarray(p, dtype=np.bool_) for p in parts]
        raise PlacementError(f"Partial({op}) of a bool tensor has no meaning; use P(max) or P(min)")
    if op in ("sum", "avg"):
        if is_int:
            noise = [rng.integers(-3, 4, size=value.shape).astype(value.dtype) for _ in range(n - 1)]
        else:
            noise = [rng.standard_normal(value.shape).astype(value.dtype) for _ in range(n - 1)]
        noise.append(-sum(noise) if noise else np.zeros_like(value))
        if op == "sum":
            if is_int:
                base = [value // n] * (n - 1)
                base.append(value - (value // n) * (n - 1))
            else:
                weights = np.arange(1, n + 1, dtype=np.float64)
                weights /= weights.sum()
                base = [(value * w).astype(value.dtype) for w in weights]
                base[-1] = (value - sum(base[:-1])).astype(value.dtype)
            return [(b + e).astype(value.dtype) for b, e in zip(base, noise)]
        if is_int:
            raise PlacementError("Partial(avg) of an integer tensor cannot be represented exactly; use float")
        return [(value + e).astype(value.dtype) for e in noise]
    # max / min: one rank per element holds the value, the others a strictly worse one
    pick = rng.integers(0, n, size=value.shape)
    if is_int:
        gap = [rng.integers(1, 5, size=value.shape).astype(value.dtype) for _ in range(n)]
    else:
        gap = [(np.abs(rng.standard_normal(value.shape)) + 0.5).astype(value.dtype) for _ in range(n)]
    sign = -1 if op == "max" else 1
    return [np.where(pick == i, value, value + sign * gap[i]).astype(value.dtype) for i in range(n)]


def shard_dense(dense, spec: DistSpec, seed: int = 0) -> dict[Coord, np.ndarray]:
    """Each mesh coordinate's local array for ``dense`` laid out as ``spec``."""
    dense = np.asarray(dense)
    if tuple(dense.shape) != spec.shape:
        raise PlacementError(f"dense array has shape {list(dense.shape)} but the spec is {spec}")
    rng = np.random.default_rng(seed)
    coords = list(spec.coords())
    # the decomposition depends only on the coordinates along Partial mesh dims, so ranks that
    # differ only along Replicate or Shard mesh dims hold the same partial values
    partial_dims = spec.partial_mesh_dims()
    values = {(): dense}
    for m in partial_dims:
        n = spec.mesh_shape[m]
        values = {key + (i,): part for key, v in values.items()
                  for i, part in enumerate(_partial_parts(v, spec.placements[m].op, n, rng))}
    out = {}
    for c in coords:
        index = tuple(slice(off, off + length) for off, length in spec.local_slices(c))
        # np.array, not np.ascontiguousarray: the latter turns a 0-d array into shape (1,)
        out[c] = np.array(values[tuple(c[m] for m in partial_dims)][index], copy=True, order="C")
    return out


def _int_avg(stacked: np.ndarray) -> np.ndarray:
    """Exact mean of integer parts along axis 0, truncated toward zero like ``mean().astype(int)``.

    Summed as Python ints: a float64 mean rounds values beyond 2**53, and an int64 sum can wrap.
    """
    n = stacked.shape[0]
    total = np.asarray(stacked.astype(object).sum(axis=0), dtype=object)
    trunc = np.vectorize(lambda t: t // n if t >= 0 else -((-t) // n), otypes=[object])
    return np.asarray(trunc(total)).astype(stacked.dtype)


def _reduce(parts: list[np.ndarray], op: str) -> np.ndarray:
    stacked = np.stack(parts)
    if op == "sum":
        return np.asarray(stacked.sum(axis=0)).astype(parts[0].dtype)
    if op == "avg":
        if np.issubdtype(stacked.dtype, np.integer):
            return _int_avg(stacked)
        return np.asarray(stacked.mean(axis=0)).astype(parts[0].dtype)
    if op == "max":
        return np.asarray(stacked.max(axis=0))
    return np.asarray(stacked.min(axis=0))


def assemble(local: Mapping[Coord, np.ndarray], spec: DistSpec,
             rtol: float = 1e-5, atol: float = 1e-6) -> np.ndarray:
    """Rebuild the dense array from per-coordinate arrays that claim layout ``spec``.

    Raises :class:`AssembleError` if a local shape does not match the spec or replicas differ.
    """
    for c in spec.coords():
        if c not in local:
            raise AssembleError(f"no local array for mesh coordinate {list(c)} of {spec}")
        got = tuple(np.shape(local[c]))
        want = spec.local_shape(c)
        if got != want:
            raise AssembleError(
                f"mesh coordinate {list(c)} holds shape {list(got)}, but {spec} gives it {list(want)}")
    values = {c: np.asarray(local[c]) for c in spec.coords()}
    for m in reversed(range(len(spec.mesh_shape))):
        p = spec.placements[m]
        groups: dict[Coord, list[Coord]] = {}
        for c in values:
            groups.setdefault(c[:m], []).append(c)
        merged = {}
        for key, members in groups.items():
            members.sort()
            arrays = [values[c] for c in members]
            if isinstance(p, Shard):
                merged[key] = np.concatenate(arrays, axis=p.dim)
            elif isinstance(p, Partial):
                merged[key] = _reduce(arrays, p.op)
            else:
                first = arrays[0]
                for c, a in zip(members[1:], arrays[1:]):
                    if a.shape != first.shape or not np.allclose(a, first, rtol=rtol, atol=atol, equal_nan=True):
                        raise AssembleError(
                            f"mesh dim {m} is Replicate in {spec}, but coordinates {list(members[0])} and "
                            f"{list(c)} hold different values (max abs diff "
                            f"{np.max(np.abs(a.astype(np.float64) - first)) if a.shape == first.shape else 'shape'})")
                merged[key] = first
        values = merged
    (result,) = values.values()
    return result


def run_per_rank(fn: Callable, inputs: Sequence[Mapping[Coord, np.ndarray]],
                 coords: Sequence[Coord]) -> dict[Coord, object]:
    """Call ``fn(*local_inputs)`` for every coordinate; returns coordinate -> output(s)."""
    return {c: fn(*(inp[c] for inp in inputs)) for c in coords}


def simulate(fn: Callable, dense_inputs: Sequence, in_specs: Sequence[DistSpec],
             out_specs: Sequence[DistSpec], seed: int = 0) -> list[np.ndarray]:
    """Shard ``dense_inputs`` per ``in_specs``, run ``fn`` per rank, assemble per ``out_specs``.

    ``fn`` returns one array or a tuple of arrays (one per out spec).
    """
    if not in_specs:
        raise PlacementError("simulate needs at least one input spec to know the mesh")
    mesh = in_specs[0].mesh_shape
    for s in list(in_specs) + list(out_specs):
        if s.mesh_shape != mesh:
            raise PlacementError(f"all specs must share one mesh; {s} is not on mesh {list(mesh)}")
    shards = [shard_dense(x, s, seed=seed + i) for i, (x, s) in enumerate(zip(dense_inputs, in_specs))]
    coords = list(in_specs[0].coords())
    outs = run_per_rank(fn, shards, coords)
    results = []
    for k, spec in enumerate(out_specs):
        per = {c: (o[k] if isinstance(o, (tuple, list)) else (o if k == 0 else None)) for c, o in outs.items()}
        results.append(assemble(per, spec))
    return results


__all__ = ["AssembleError", "assemble", "run_per_rank", "shard_dense", "simulate"]
