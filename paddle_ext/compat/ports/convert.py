"""Lossless conversion between paddle-ext placements and Paddle's objects.

Paddle side: ``paddle.distributed.Shard/Replicate/Partial`` placements, ``ProcessMesh``,
``TensorDistAttr`` (dims_mapping, multi_dims_mapping for co-shard, partial dims).
Every converter raises :class:`ConversionError` when the target cannot express the source
(it never warns and drops information, as ``placement_type.to_dim_map`` does for co-shard).
"""
from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from ...errors import ConversionError
from ...placements import (DistSpec, Partial, Placement, Replicate, Shard, format_placements,
                           parse_placements)
from ..version import require_paddle

_REDUCE_TO_PADDLE = {"sum": "kRedSum", "avg": "kRedAvg", "max": "kRedMax", "min": "kRedMin"}
_REDUCE_FROM_NAME = {"SUM": "sum", "AVG": "avg", "MAX": "max", "MIN": "min",
                     "kRedSum": "sum", "kRedAvg": "avg", "kRedMax": "max", "kRedMin": "min"}


def _dist():
    return require_paddle("placement conversion").distributed


def to_paddle_placements(placements: str | Sequence) -> list:
    """paddle-ext placements (or text) -> a list of ``paddle.distributed`` placements.

    Co-shard (several mesh dims on one tensor dim) becomes ``Shard(d, shard_order=k)`` with the
    lower mesh dim as the outer split, as Paddle does.
    """
    dist = _dist()
    pls = parse_placements(placements)
    out = []
    for i, p in enumerate(pls):
        if isinstance(p, Replicate):
            out.append(dist.Replicate())
        elif isinstance(p, Shard):
            co = [j for j, q in enumerate(pls) if isinstance(q, Shard) and q.dim == p.dim]
            if len(co) > 1:
                out.append(dist.Shard(p.dim, shard_order=co.index(i)))
            else:
                out.append(dist.Shard(p.dim))
        else:
            out.append(dist.Partial(getattr(dist.ReduceType, _REDUCE_TO_PADDLE[p.op])))
    return out


def pad_placements(placements: Sequence[Placement], mesh_ndim: int) -> tuple[Placement, ...]:
    """Paddle's convention: a placement list shorter than the mesh means Replicate on the rest.

    (``dist.shard_layer`` gives unsharded parameters ``[Replicate()]`` on any mesh, and Paddle's
    own reshards accept that.) A longer list raises.
    """
    pls = tuple(placements)
    if len(pls) > mesh_ndim:
        raise ConversionError(
            f"{format_placements(pls)} has {len(pls)} placements for a mesh of {mesh_ndim} dims; "
            f"give at most one placement per mesh dim")
    return pls + (Replicate(),) * (mesh_ndim - len(pls))


def from_paddle_placements(placements: Sequence, mesh_ndim: int | None = None) -> tuple[Placement, ...]:
    """A list of ``paddle.distributed`` placements -> paddle-ext placements (lossless or raise).

    With ``mesh_ndim``, a shorter list is padded with Replicate as Paddle does.
    """
    out: list[Placement] = []
    orders: dict[int, list[tuple[int, int]]] = {}
    for i, p in enumerate(placements):
        if isinstance(p, (Replicate, Shard, Partial)):
            out.append(p)
            continue
        if not all(hasattr(p, m) for m in ("is_replicated", "is_shard", "is_partial")):
            raise ConversionError(
                f"{p!r} on mesh dim {i} is not a Paddle placement; use paddle.distributed.Replicate(), "
                f"Shard(dim) or Partial() (or paddle-ext placements: parse_placements('[S(0),R]'))")
        if p.is_replicated():
            out.append(Replicate())
        elif p.is_shard():
            dim, split_factor, order = _shard_fields(p)
            if split_factor != 1:
                raise ConversionError(
                    f"{p!r} on mesh dim {i} has split_factor {split_factor}; paddle-ext "
                    f"placements express plain ceil-first shards only; reshard to Shard({dim}) first")
            out.append(Shard(dim))
            orders.setdefault(dim, []).append((order, i))
        elif p.is_partial():
            name = p.reduce_type().name
            if name not in _REDUCE_FROM_NAME:
                raise ConversionError(
                    f"{p!r} on mesh dim {i}: reduce type {name} has no paddle-ext equivalent; "
                    f"supported are {', '.join(_REDUCE_TO_PADDLE)}")
            out.append(Partial(_REDUCE_FROM_NAME[name]))
        else:
            raise ConversionError(f"{p!r} on mesh dim {i} is not a Paddle placement")
    for dim, pairs in orders.items():
        if len(pairs) > 1 and [m for _, m in sorted(pairs)] != sorted(m for _, m in pairs):
            raise ConversionError(
                f"co-shard of tensor dim {dim} in {list(placements)} splits by a mesh-dim order other than "
                f"ascending; paddle-ext's model uses the lower mesh dim as the outer split, reshard to that order")
    return tuple(out) if mesh_ndim is None else pad_placements(out, mesh_ndim)


_SHARD_REPR = re.compile(r"Shard\(dim=(\d+)(?:, shard_order=(\d+))?(?:, split_factor=(\d+))?\)")


def _shard_fields(p) -> tuple[int, int, int]:
    """(dim, split_factor, co-shard order) of a Paddle Shard placement.

    Paddle 3.3.1 hands co-shard placements back from ``DistTensor.placements`` as bare
    ``libpaddle.Placement`` objects without ``get_dim``/``get_split_factor``; their repr
    (``Shard(dim=0, shard_order=1)``) still carries the fields.
    """
    if hasattr(p, "get_dim"):
        order = p.get_co_shard_order() if hasattr(p, "get_co_shard_order") else 0
        return p.get_dim(), p.get_split_factor() if hasattr(p, "get_split_factor") else 1, order
    m = _SHARD_REPR.fullmatch(repr(p))
    if m is None:
        raise ConversionError(f"cannot read the Paddle shard placement {p!r}; paddle-ext knows "
                              f"Shard(dim=D[, shard_order=K]) as Paddle 3.3 prints it")
    return int(m.group(1)), int(m.group(3) or 1), int(m.group(2) or 0)


def mesh_shape(mesh) -> tuple[int, ...]:
    """Shape of a ``ProcessMesh`` (or a plain sequence) as a tuple."""
    shape = getattr(mesh, "shape", mesh)
    try:
        sizes = None if isinstance(shape, (str, bytes)) else tuple(shape)
    except TypeError:
        sizes = None
    if sizes is None or any(isinstance(s, bool) or not hasattr(type(s), "__index__") for s in sizes):
        raise ConversionError(
            f"mesh must be a paddle.distributed.ProcessMesh or a mesh shape (a sequence of ints such as "
            f"(2, 2)), got {type(mesh).__name__} {mesh!r}")
    return tuple(int(s) for s in sizes)


def to_dist_attr(mesh, placements: str | Sequence, ndim: int):
    """A ``TensorDistAttr`` for a tensor of rank ``ndim`` on ``mesh`` with ``placements``.

    Raises :class:`ConversionError` for a Partial other than sum: Paddle's Python binding of
    TensorDistAttr can only mark partial dims as SUM (``_set_partial_dims``).
    """
    paddle = require_paddle("TensorDistAttr conversion")
    # stays here: `import paddle_ext` loads this module and imports no Paddle
    from paddle.distributed.auto_parallel.static.dist_attribute import TensorDistAttr

    pls = parse_placements(placements)
    spec = DistSpec((1,) * ndim, mesh_shape(mesh), pls)  # validates lengths and dims
    attr = TensorDistAttr()
    if isinstance(mesh, paddle.distributed.ProcessMesh):
        attr.process_mesh = mesh
    else:  # a mesh shape: ranks 0..n-1 in row-major order, keeping every mesh dim

        attr.process_mesh = paddle.distributed.ProcessMesh(
            np.arange(spec.world_size).reshape(spec.mesh_shape).tolist())
    mapping = spec.dims_mapping()
    if any(len(m) > 1 for m in mapping):
        attr.multi_dims_mapping = mapping
    else:
        attr.dims_mapping = [m[0] if m else -1 for m in mapping]
    partial = spec.partial_mesh_dims()
    bad = [pls[i] for i in partial if pls[i].op != "sum"]
    if bad:
        raise ConversionError(
            f"{format_placements(pls)}: a TensorDistAttr built from Python can only carry Partial(sum) "
            f"(Paddle's _set_partial_dims has no reduce type), so {bad[0]} would silently become P(sum); "
            f"keep the paddle-ext placements, or use dist placements on a DistTensor instead")
    if partial:
        attr._set_partial_dims(list(partial))
    return attr


_PARTIAL_RE = re.compile(r"Partial\(dims:(\d+),\s*(\w+)\)")


def from_dist_attr(attr) -> tuple[Placement, ...]:
    """A ``TensorDistAttr`` (or PIR dist attribute) -> placements, keeping partial reduce types."""
    mesh_ndim = len(attr.process_mesh.shape)
    multi = getattr(attr, "multi_dims_mapping", None)
    mapping = [list(m) for m in multi] if multi is not None else \
        [[d] if d >= 0 else [] for d in attr.dims_mapping]
    out: list[Placement] = [Replicate()] * mesh_ndim
    for tdim, mdims in enumerate(mapping):
        for m in mdims:
            out[m] = Shard(tdim)
    # the reduce type is not exposed to Python; Paddle's own text form carries it
    for m_text, op_text in _PARTIAL_RE.findall(str(attr)):
        m = int(m_text)
        if op_text not in _REDUCE_FROM_NAME:
            raise ConversionError(f"partial reduce type {op_text} on mesh dim {m} has no paddle-ext equivalent")
        if isinstance(out[m], Shard):
            raise ConversionError(f"mesh dim {m} of {attr} is both sharded and partial")
        out[m] = Partial(_REDUCE_FROM_NAME[op_text])
    return tuple(out)


def spec_of(tensor) -> DistSpec:
    """The :class:`DistSpec` of a Paddle DistTensor (global shape, mesh shape, placements)."""
    if not getattr(tensor, "is_dist", lambda: False)():
        raise ConversionError(
            f"tensor of shape {list(tensor.shape)} is not a DistTensor; create it with "
            f"paddle.distributed.shard_tensor(x, mesh, placements)")
    shape = mesh_shape(tensor.process_mesh)
    return DistSpec(tuple(tensor.shape), shape, from_paddle_placements(tensor.placements, len(shape)))
