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

from ..errors import ConversionError, ShardingRuleError
from ..placements import DistSpec
from .convert import from_dist_attr, to_dist_attr
from .version import require_paddle


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
    from paddle.distributed.auto_parallel.static.dist_attribute import DistTensorSpec

    return DistTensorSpec(list(spec.shape), dist_attr(spec, mesh))


def is_dist_tensor_spec(obj) -> bool:
    return type(obj).__name__ == "DistTensorSpec"


def is_dist_attr(obj) -> bool:
    return type(obj).__name__ == "TensorDistAttr"


def spec_from_dist_tensor_spec(dts) -> DistSpec:
    """A :class:`DistSpec` from a ``DistTensorSpec`` (no partial status: Paddle does not expose it)."""
    pm = dts.process_mesh() if callable(dts.process_mesh) else dts.process_mesh
    mapping = list(dts.dims_mapping() if callable(dts.dims_mapping) else dts.dims_mapping)
    mesh = tuple(int(s) for s in pm.shape)
    pls = ["R"] * len(mesh)
    for d, m in enumerate(mapping):
        if m >= 0:
            if pls[m] != "R":
                raise ConversionError(f"DistTensorSpec dims_mapping {mapping} uses mesh dim {m} twice")
            pls[m] = f"S({d})"
    shape = dts.shape() if callable(dts.shape) else dts.shape
    return DistSpec(tuple(shape), mesh, pls)


def mesh_of_dist_tensor_spec(dts):
    """The ``ProcessMesh`` of a ``DistTensorSpec`` (a method in Paddle 3.3's binding)."""
    return dts.process_mesh() if callable(dts.process_mesh) else dts.process_mesh


def spec_from_dist_attr(attr, shape: Sequence[int]) -> DistSpec:
    """A :class:`DistSpec` from a ``TensorDistAttr`` and the tensor's shape (keeps partials)."""
    return DistSpec(tuple(shape), tuple(int(s) for s in attr.process_mesh.shape), from_dist_attr(attr))


def call_phi_rule(name: str, args: Sequence, backward: bool = False):
    """Call Paddle's rule ``name`` with already converted positional args."""
    rule = phi_rule(name)
    fn = rule.infer_backward if backward else rule.infer_forward
    return fn(*args)


__all__ = ["call_phi_rule", "dist_attr", "dist_tensor_spec", "has_phi_rule", "is_dist_attr",
           "is_dist_tensor_spec", "mesh_of_dist_tensor_spec", "phi_rule", "process_mesh", "spec_from_dist_attr",
           "spec_from_dist_tensor_spec"]
