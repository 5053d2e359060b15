"""Paddle's SPMD rule objects, DistTensorSpec and TensorDistAttr, for paddle-ext's rule engine.

Python can only *look up* Paddle's C++ rules (``core.get_phi_spmd_rule`` /
``core.contains_spmd_rule``); they are called positionally in the PHI kernel's order with
``DistTensorSpec`` for tensors, Python lists for tensor lists and plain attribute values, and
return ``(input TensorDistAttrs, output TensorDistAttrs)``.

Limits of the Python bindings that paddle-ext works around or reports:

* ``DistTensorSpec`` exposes shape, mesh and dims_mapping but not partial status: a spec read
  back from Paddle has no Partial placements (:func:`spec_from_dist_tensor_spec` says so).
* A ``TensorDistAttr`` built from Python can only mark partial dims as SUM; a paddle-ext result
  with ``P(avg)``/``P(max)``/``P(min)`` cannot be handed to Paddle without loss and raises.
"""
from __future__ import annotations

import functools
import math
from typing import Sequence

from ...errors import PlacementError, ShardingRuleError
from ...placements import DistSpec
from .convert import from_dist_attr, to_dist_attr
from ..version import require_paddle


def _core():
    return require_paddle("SPMD rules").base.core


def has_phi_rule(name: str) -> bool:
    """True when Paddle's C++ registry has an SPMD rule called ``name``."""
    return bool(_core().contains_spmd_rule(name))


def phi_rule(name: str):
    """Paddle's C++ rule object (``infer_forward``/``infer_backward``); raises if absent."""
    if not has_phi_rule(name):
        raise ShardingRuleError(f"Paddle has no C++ SPMD rule named {name!r}")
    return _core().get_phi_spmd_rule(name)


@functools.lru_cache(maxsize=16)
def process_mesh(mesh_shape: tuple[int, ...]):
    """A ``ProcessMesh`` of the given shape over ranks 0..n-1 (cached per shape)."""
    paddle = require_paddle("ProcessMesh")
    ids = list(range(math.prod(mesh_shape)))
    nested: list = ids
    for s in reversed(mesh_shape[1:]):
        nested = [nested[k:k + s] for k in range(0, len(nested), s)]
    names = [f"d{i}" for i in range(len(mesh_shape))]
    return paddle.distributed.ProcessMesh(nested, dim_names=names)


def dist_attr(spec: DistSpec, mesh=None):
    """The ``TensorDistAttr`` of a :class:`DistSpec` (raises on non-sum Partial, see module doc)."""
    return to_dist_attr(mesh if mesh is not None else process_mesh(spec.mesh_shape), spec.placements, spec.ndim)


def dist_tensor_spec(spec: DistSpec, mesh=None):
    """A Paddle ``DistTensorSpec`` for a :class:`DistSpec`."""
    require_paddle("DistTensorSpec")
    # stays here: `import paddle_ext` loads this module and imports no Paddle
    from paddle.distributed.auto_parallel.static.dist_attribute import DistTensorSpec

    return DistTensorSpec(list(spec.shape), dist_attr(spec, mesh))


def is_dist_tensor_spec(obj) -> bool:
    return type(obj).__name__ == "DistTensorSpec"


def _call(obj, name):
    v = getattr(obj, name)
    return v() if callable(v) else v


def is_absent_dist_tensor_spec(dts) -> bool:
    """True for Paddle's way of passing an absent optional input: ``DistTensorSpec([0],
    TensorDistAttr())`` (no process mesh; e.g. layer_norm without bias)."""
    pm = _call(dts, "process_mesh")
    shape = list(_call(dts, "shape"))
    return (pm is None or len(pm.shape) == 0) and (not shape or 0 in shape)


def absent_dist_attr(rank: int = 1):
    """What Paddle's rules return for an absent optional input: a ``TensorDistAttr`` with no
    process mesh and a replicated dims_mapping of the placeholder's rank."""
    require_paddle("TensorDistAttr")
    # stays here: `import paddle_ext` loads this module and imports no Paddle
    from paddle.distributed.auto_parallel.static.dist_attribute import TensorDistAttr

    attr = TensorDistAttr()
    attr.dims_mapping = [-1] * rank
    return attr


def spec_from_dist_tensor_spec(dts, unknown: int | None = None, name: str = "tensor") -> DistSpec:
    """A :class:`DistSpec` from a ``DistTensorSpec`` (no partial status: Paddle does not expose it).

    Every malformed spec raises :class:`PlacementError` naming the fix. A ``-1`` size is an
    unknown size: with ``unknown`` given it becomes that placeholder size, else it raises.
    """
    pm = _call(dts, "process_mesh")
    shape = [int(s) for s in _call(dts, "shape")]
    mapping = [int(m) for m in _call(dts, "dims_mapping")]
    where = f"{name} DistTensorSpec(shape={shape}, dims_mapping={mapping})"
    if pm is None or len(pm.shape) == 0:
        raise PlacementError(f"{where} has no process mesh; set one (TensorDistAttr().process_mesh = mesh); "
                             f"only an absent optional input may be DistTensorSpec([0], TensorDistAttr())")
    mesh = tuple(int(s) for s in pm.shape)
    if len(mapping) != len(shape):
        raise PlacementError(f"{where}: dims_mapping has {len(mapping)} entries for a tensor of rank "
                             f"{len(shape)}; give one entry per tensor dim (-1 for an unsharded dim)")
    for d, s in enumerate(shape):
        if s < -1:
            raise PlacementError(f"{where}: dim {d} has size {s}; a size is >= 0, or -1 for an unknown size")
        if s == -1 and unknown is None:
            raise PlacementError(f"{where}: dim {d} has the unknown size -1; call the rule through "
                                 f"paddle-ext's SPMD bridge (get_spmd_rule(op).infer_forward), which accepts it")
    pls = ["R"] * len(mesh)
    for d, m in enumerate(mapping):
        if m < -1 or m >= len(mesh):
            raise PlacementError(f"{where}: tensor dim {d} is mapped to mesh dim {m}, but the mesh "
                                 f"{list(mesh)} has mesh dims 0..{len(mesh) - 1}; use one of those or -1")
        if m >= 0:
            if pls[m] != "R":
                raise PlacementError(f"{where} uses mesh dim {m} for tensor dims {pls[m][2:-1]} and {d}; a mesh "
                                     f"dim shards at most one tensor dim: set one of them to -1")
            pls[m] = f"S({d})"
    sizes = tuple(unknown if s == -1 else s for s in shape)
    return DistSpec(sizes, mesh, pls)


def mesh_of_dist_tensor_spec(dts):
    """The ``ProcessMesh`` of a ``DistTensorSpec`` (a method in Paddle 3.3's binding)."""
    return _call(dts, "process_mesh")


def spec_from_dist_attr(attr, shape: Sequence[int]) -> DistSpec:
    """A :class:`DistSpec` from a ``TensorDistAttr`` and the tensor's shape (keeps partials)."""
    return DistSpec(tuple(shape), tuple(int(s) for s in attr.process_mesh.shape), from_dist_attr(attr))


__all__ = ["absent_dist_attr", "dist_attr", "dist_tensor_spec", "has_phi_rule",
           "is_absent_dist_tensor_spec", "is_dist_tensor_spec", "mesh_of_dist_tensor_spec", "phi_rule", "process_mesh", "spec_from_dist_attr",
           "spec_from_dist_tensor_spec"]
