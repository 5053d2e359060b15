"""Paddle internals that rule dispatch needs, in one place.

* Reading a DistTensor (dygraph ``paddle.Tensor`` or a PIR ``Value`` inside ``dist.to_static``):
  :func:`is_dist`, :func:`spec_and_mesh`.
* The handles a dygraph dispatch calls on every call, looked up once: :func:`dygraph_runtime`.
* Building one: :func:`make_dist` (dygraph, exact global shape even for uneven shards -- measured:
  ``dtensor_from_local`` infers ``local * mesh_size``, 6 vs 4 rows for ``[5,7]`` S(0) on 2 ranks),
  :func:`static_to_local` / :func:`static_from_local` (PIR ``dist_op.dtensor_to_local`` /
  ``dtensor_from_local``; the ``placements`` given to ``to_local`` become the gradient's placements
  in backward -- the hint that makes a replicated input consumed locally get a ``Partial`` grad).
* Patching public functions reversibly: :class:`Patcher` (restores the exact original objects).
* dy2static: :func:`ignore_in_dy2static` keeps ``paddle_ext``'s own Python out of the AST
  transcriber, so the dispatcher runs as plain Python while ``dist.to_static`` traces.
"""
from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from paddle.distributed.auto_parallel.api import dtensor_from_local
from paddle.distributed.auto_parallel.api import dtensor_to_local
from paddle.jit.dy2static import convert_call_func as ccf

import numpy as np

from ...errors import ConversionError
from ...placements import PLACEMENT_TYPES, DistSpec
from ..native import fast_key
from .convert import from_paddle_placements, mesh_shape, to_paddle_placements
from ..version import require_paddle


@functools.cache
def _paddle():
    return require_paddle("paddle_ext.dispatch")


@dataclass(frozen=True, slots=True)
class DygraphRuntime:
    """The Paddle handles a dygraph dispatch calls on every call, looked up once
    (:func:`dygraph_runtime`)."""

    tensor: type                 # paddle.Tensor
    in_dygraph: Callable         # paddle.in_dynamic_mode
    grad_enabled: Callable       # core._has_grad (what paddle.is_grad_enabled returns, without its Python frame)
    tracer: Callable             # () -> the dygraph tracer, None outside dygraph (in_dynamic_mode's test, no frame)
    to_local: Callable           # C++ dtensor_to_local(tensor, mesh, grad placements)
    from_local: Callable         # C++ dtensor_from_local(local, mesh, placements)
    owned_mesh: Callable         # (shape, process ids, dim names) -> a C++ ProcessMesh that owns its data
    has_placements_str: bool     # Tensor._placements_str exists (Paddle 3.3): a cheap placements key


@functools.cache
def dygraph_runtime() -> DygraphRuntime:
    """The :class:`DygraphRuntime`; the first call also starts the compiled dispatch key
    (:func:`paddle_ext.compat.native.fast_key.start`: loaded now if built, else built in the background)."""
    paddle = _paddle()
    core = paddle.base.core
    state = paddle.base.framework.global_var   # in_dynamic_mode(): state._dygraph_tracer_ is not None
    rt = DygraphRuntime(paddle.Tensor, paddle.in_dynamic_mode, core._has_grad,
                        functools.partial(getattr, state, "_dygraph_tracer_"), core.dtensor_to_local,
                        core.dtensor_from_local, core.ProcessMesh, hasattr(paddle.Tensor, "_placements_str"))
    fast_key.start()
    return rt


def is_tensor(obj) -> bool:
    paddle = _paddle()
    if isinstance(obj, paddle.Tensor):
        return True
    return isinstance(obj, paddle.pir.Value)


_TENSOR_TYPE: list = []   # paddle.Tensor, read once
_NEVER_DIST = frozenset((int, float, bool, str, type(None), list, tuple, dict))   # is_dist says False


def any_dist(values) -> bool:
    """``any(is_dist(v) for v in values)`` without a call per plain Tensor or Python value (a
    patched Paddle function tests every call's arguments; a dense program must not pay for it)."""
    if not _TENSOR_TYPE:
        _TENSOR_TYPE.append(_paddle().Tensor)
    tensor = _TENSOR_TYPE[0]
    for v in values:
        cls = v.__class__
        if cls is tensor:
            if v.is_dist():
                return True
        elif cls not in _NEVER_DIST and is_dist(v):
            return True
    return False


def is_dist(obj) -> bool:
    """True for a dygraph DistTensor or a dist-typed PIR Value."""
    paddle = _paddle()
    if isinstance(obj, paddle.Tensor):
        return bool(obj.is_dist())
    if isinstance(obj, paddle.pir.Value):
        try:
            return bool(obj.is_dist())
        except Exception:  # a non-dense value (e.g. a list) has no dist type
            return False
    return False


_MESHES: dict = {}


def python_mesh(mesh):
    """A ``paddle.distributed.ProcessMesh`` for Paddle's C++ mesh object (cached)."""
    dist = _paddle().distributed
    if isinstance(mesh, dist.ProcessMesh):
        return mesh
    shape, ids = tuple(int(s) for s in mesh.shape), tuple(int(i) for i in mesh.process_ids)
    names = tuple(mesh.dim_names)
    key = (shape, ids, names)
    got = _MESHES.get(key)
    if got is None:
        got = dist.ProcessMesh(np.array(ids).reshape(shape).tolist(), dim_names=list(names))
        _MESHES[key] = got
    return got


def mesh_of(obj):
    if isinstance(obj, _paddle().Tensor):
        return python_mesh(obj.process_mesh)
    return python_mesh(obj.dist_attr().process_mesh)


def paddle_placements_of(obj) -> list:
    if isinstance(obj, _paddle().Tensor):
        return list(obj.placements)
    return list(obj.dist_attr().placements_attr)


def spec_and_mesh(obj) -> tuple[DistSpec, Any]:
    """(:class:`DistSpec`, ProcessMesh) of a DistTensor or dist PIR Value."""
    mesh = mesh_of(obj)
    return DistSpec(tuple(int(s) for s in obj.shape), mesh_shape(mesh),
                    from_paddle_placements(paddle_placements_of(obj))), mesh


def dtype_size(obj) -> int:
    paddle = _paddle()
    if isinstance(obj, paddle.Tensor):
        return int(obj.element_size())
    name = str(obj.dtype).replace("paddle.", "")
    return {"float64": 8, "int64": 8, "complex64": 8, "float16": 2, "bfloat16": 2, "int16": 2,
            "bool": 1, "int8": 1, "uint8": 1, "complex128": 16}.get(name, 4)


def is_float(obj) -> bool:
    name = str(obj.dtype).replace("paddle.", "")
    return "float" in name or "complex" in name


def make_dist(local, mesh, placements, global_shape: Sequence[int]):
    """A dygraph DistTensor with an exact global shape (uneven shards included).

    Measured: ``dtensor_from_local`` infers ``local * mesh_size`` (wrong for uneven shards), while
    ``paddle.Tensor(local, dims=..., ...)`` takes the global dims as given.
    """
    paddle = _paddle()
    place = paddle.framework._get_paddle_place(paddle.framework._current_expected_place())
    pls = placements if placements and not _is_ext(placements[0]) else to_paddle_placements(placements)
    if len(global_shape) == 0:
        # measured: paddle.Tensor(..., dims=[], placements=[Partial]) zeroes the value on every rank
        # but the first; dtensor_from_local keeps it (0-D has no sharded dim, so no shape issue)
        return paddle.base.core.dtensor_from_local(local, mesh, list(pls))
    return paddle.Tensor(local, dims=[int(s) for s in global_shape], process_mesh=mesh,
                         placements=list(pls), place=place)


def replicate_dense(t, mesh):
    """A dense tensor used next to DistTensors is taken as replicated (Paddle's own convention);
    differentiable, through Paddle's ``dtensor_from_local``."""

    dist = _paddle().distributed
    return dtensor_from_local(t, mesh, [dist.Replicate() for _ in mesh.shape])


def _is_ext(p) -> bool:
    return isinstance(p, PLACEMENT_TYPES)


def static_to_local(value, mesh, grad_placements):
    """PIR: the local value of ``value``; its gradient will carry ``grad_placements``."""

    return dtensor_to_local(value, mesh, to_paddle_placements(grad_placements))


def static_from_local(local, mesh, placements, global_shape: Sequence[int]):
    """PIR: a dist value from a local one, with its global shape set exactly.

    ``dtensor_from_local`` infers ``local * mesh_size`` on sharded dims; for an uneven global
    shape the value's type is rebuilt with the true global dims (same local shape).
    """
    paddle = _paddle()

    out = dtensor_from_local(local, mesh, to_paddle_placements(placements))
    if tuple(int(s) for s in out.shape) != tuple(global_shape):
        spec = DistSpec(tuple(global_shape), mesh_shape(mesh), placements)
        mapping = [m[0] if m else -1 for m in spec.dims_mapping()]
        if any(len(m) > 1 for m in spec.dims_mapping()):
            raise ConversionError(
                f"to_static: co-sharded uneven output {spec} cannot be typed in PIR; make the "
                f"sharded dims divisible by the mesh or replicate one mesh dim")
        dense_t = paddle.pir.create_shaped_type(local.type(), [int(s) for s in global_shape])
        t = paddle.base.libpaddle.pir.create_dist_dense_tensor_type_by_dense_tensor(
            dense_t, [int(s) for s in local.shape], mesh, mapping)
        out.set_type(t)
    return out


def pir_reshard(value, mesh, placements):
    """PIR: Paddle's ``dist.reshard`` (lowered by the static reshard pass)."""
    return _paddle().distributed.reshard(value, mesh, to_paddle_placements(placements))


def current_rank() -> int:
    return int(_paddle().distributed.get_rank())


def mesh_coord(mesh) -> tuple[int, ...] | None:
    """This rank's coordinate in ``mesh`` (None if the rank is not in it)."""
    rank = current_rank()
    ids = list(mesh.process_ids)
    if rank not in ids:
        return None
    idx = ids.index(rank)
    shape = mesh_shape(mesh)
    out = []
    for s in reversed(shape):
        out.append(idx % s)
        idx //= s
    return tuple(reversed(out))


def same_mesh(a, b) -> bool:
    return list(a.process_ids) == list(b.process_ids) and list(a.shape) == list(b.shape)


def describe_mesh(mesh) -> str:
    return f"ProcessMesh(shape={list(mesh.shape)}, ids={list(mesh.process_ids)})"


def paddle_has_rule(name: str) -> bool:
    try:
        return bool(_paddle().base.core.contains_spmd_rule(name))
    except Exception:
        return False


def ignore_in_dy2static() -> None:
    """Make dy2static call paddle_ext's functions as plain Python (no AST transcription).

    dy2static skips functions by the file path of the modules it is given; the package that
    holds this module is already imported (it is our parent), so it is taken from
    ``sys.modules`` for its path rather than imported from below."""

    ccf.add_ignore_module([sys.modules[__name__.split(".")[0]]])


class Patcher:
    """Reversible attribute patches; :meth:`restore` puts back the exact original objects."""

    def __init__(self):
        self._saved: list[tuple[Any, str, Any, bool]] = []

    def patch(self, owner, name: str, new) -> Any:
        had = name in vars(owner) if isinstance(owner, type) else hasattr(owner, name)
        old = getattr(owner, name, None)
        self._saved.append((owner, name, vars(owner).get(name) if isinstance(owner, type) else old, had))
        setattr(owner, name, new)
        return old

    def restore(self) -> None:
        while self._saved:
            owner, name, old, had = self._saved.pop()
            if had:
                setattr(owner, name, old)
            else:
                try:
                    delattr(owner, name)
                except AttributeError:
                    pass

    def __len__(self) -> int:
        return len(self._saved)


__all__ = ["DygraphRuntime", "Patcher", "current_rank", "describe_mesh", "dtype_size", "dygraph_runtime",
           "ignore_in_dy2static", "is_dist", "is_float", "is_tensor", "make_dist", "mesh_coord", "mesh_of",
           "paddle_has_rule", "paddle_placements_of", "pir_reshard", "replicate_dense", "same_mesh", "spec_and_mesh",
           "static_from_local", "static_to_local"]
