"""The full path of a dygraph reshard: ``reshard(x, mesh, placements)`` on Paddle DistTensors.

:func:`~.route.route` decides where the call runs (paddle-ext's plan, Paddle's own reshard, a
local mesh reshape) with every named error; for paddle-ext's plan the steps of
:func:`~.planner.plan_reshard` run through the per-rank code (:mod:`.per_rank`) with
:class:`~.paddle_backend.PaddleBackend`. A repeated call is served from the cache of :mod:`.fast`.

The result is differentiable through one PyLayer (:func:`differentiable`), shared with dispatch's
required input reshards: its backward reshards the incoming gradient back to the source mesh and
placements, a Partial source dim given a Replicate gradient (as Paddle's own reshard does). Output DistTensors
are built with ``paddle.Tensor(local, dims=global_shape, process_mesh=..., placements=...)``, which
keeps the right global shape for uneven shards (``dtensor_from_local`` would infer
``local * mesh_size``).

Everything that can be checked is checked before the first collective, and the source tensor is
never written: placements (count, shard dims), destination ranks inside the job, and, with
``check=True`` (default), that every participating rank asks for the same reshard of a tensor
with the same global shape and dtype (one small all_gather of metadata).
"""
from __future__ import annotations

import hashlib

import numpy as np
import paddle

from ..compat.ports.convert import pad_placements, to_paddle_placements
from ..compat.ports.internals import expected_place, local_value
from ..compat.ports.mesh_reshape import local_mesh_reshape, reshape_placements
from ..compat.ports.views import require_writable_views
from ..compat.version import require_paddle
from ..errors import ReshardPlanError
from ..placements import Partial, Replicate, format_placements
from .layout import Geometry
from .paddle_backend import PaddleBackend
from .per_rank import execute
from .planner import format_plan, plan_reshard
from .route import NATIVE_LISTENERS, describe, group_for, original_reshard, placements_of, request, route

_DTYPE_CODES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16",
                "float32", "float64", "complex64", "complex128")


def request_meta(x, src, dst, s_ranks, d_ranks) -> list:
    """This rank's request as int64s: (ndim, dtype code, digest of specs, ranks and dtype, the
    first 8 dims padded with -1); every rank of a reshard must hold the same."""
    dtype = str(x.dtype).replace("paddle.", "")
    text = repr((src, dst, s_ranks, d_ranks, dtype)).encode()
    digest = int.from_bytes(hashlib.sha256(text).digest()[:6], "little")
    code = _DTYPE_CODES.index(dtype) if dtype in _DTYPE_CODES else 99
    return [len(src.shape), code, digest] + list(src.shape[:8]) + [-1] * (8 - len(src.shape[:8]))


def check_group(paddle, s_ranks, d_ranks):
    """(ranks in gather order, group) of the cross-rank check, or None when there is nobody to
    check with; ``group`` None is the world group (every rank of the job takes part, as every rank
    walks the executor's rounds there)."""
    world = paddle.distributed.get_world_size()
    if world < 2:
        return None
    members = sorted(set(s_ranks) | set(d_ranks))
    group = group_for(members)
    if group is None:
        return list(range(world)), None
    # a prepared group: its members check among themselves, the other ranks have no part in it
    return (members, group) if paddle.distributed.get_rank() in members else None


def check_meta(paddle, mine_t, out, where, mine: list, about) -> None:
    """One all_gather of every rank's request (``mine_t``, int64) into ``out``; raises
    :class:`ReshardPlanError` on every rank when any rank differs (before any data moves)."""
    ranks, group = where
    paddle.distributed.stream.all_gather(out, mine_t, group=group)
    rows = out.numpy().reshape(len(ranks), len(mine)).tolist()
    if all(row == mine for row in rows):
        return
    r, other = next((ranks[i], row) for i, row in enumerate(rows) if row != mine)
    what = "global shape" if other[3:] != mine[3:] or other[0] != mine[0] else (
        "dtype" if other[1] != mine[1] else "placements or meshes")
    x, dst, d_ranks = about
    dtype = _DTYPE_CODES[mine[1]] if mine[1] < len(_DTYPE_CODES) else "?"
    raise ReshardPlanError(
        f"reshard of {describe(x)} to {format_placements(dst.placements)} on ranks "
        f"{list(d_ranks)}: rank {r} has a different {what} (its shape/dtype/digest "
        f"{other[3:3 + other[0]]}/{_DTYPE_CODES[other[1]] if other[1] < len(_DTYPE_CODES) else '?'}"
        f"/{other[2]:x} vs {mine[3:3 + mine[0]]}/{dtype}/{mine[2]:x}); every rank of both meshes "
        f"must call reshard with the same tensor layout and target")


def _check_request(paddle, x, src, dst, s_ranks, d_ranks) -> None:
    """The cross-rank metadata check, over the reshard's own group when one is prepared."""
    where = check_group(paddle, s_ranks, d_ranks)
    if where is None:
        return
    mine = request_meta(x, src, dst, s_ranks, d_ranks)
    t = paddle.to_tensor(mine, dtype="int64")
    out = paddle.empty([len(where[0]) * len(mine)], dtype="int64")
    check_meta(paddle, t, out, where, mine, (x, dst, d_ranks))


def _run(paddle, x_local, dtype, geo, plan, mesh, placements, stats):
    dist = paddle.distributed
    rank = dist.get_rank()
    like = paddle.empty([0], dtype=dtype)
    members = sorted(set(geo.src_ranks) | set(geo.dst_ranks))
    group = group_for(members)
    world = members if group is not None else range(dist.get_world_size())
    require_writable_views()  # outputs are built in slices of themselves (every rank: no one waits)
    be = PaddleBackend(paddle, rank, world, like, stats, group=group)
    out = execute(be, geo, plan, x_local)  # every rank walks the rounds (lockstep)
    if out is None:
        out = paddle.empty([0] * len(geo.shape), dtype=dtype)
    place = expected_place()
    return paddle.Tensor(out, dims=list(geo.shape), process_mesh=mesh, placements=list(placements),
                         place=place)


def _values(x, mesh, specs, stats=None):
    """paddle-ext's plan of the validated request ``specs`` run on ``x`` (not differentiable)."""
    src, dst, s_ranks, d_ranks = specs
    plan = plan_reshard(src, dst, src_ranks=s_ranks, dst_ranks=d_ranks, itemsize=x.element_size(),
                        dtype=str(x.dtype).replace("paddle.", ""))
    if stats is not None:
        stats.update(plan=format_plan(plan), plan_bytes=sum(s.bytes for s in plan))
    geo = Geometry(src.shape, src.mesh_shape, s_ranks, dst.mesh_shape, d_ranks)
    local = local_value(x) if paddle.distributed.get_rank() in s_ranks else None
    return _run(paddle, local, x.dtype, geo, plan, mesh, to_paddle_placements(dst.placements), stats)


def values_of(x, mesh, placements) -> object:
    """``x`` resharded to paddle-ext ``placements`` on ``mesh`` by paddle-ext's executor: no
    routing, no cross-rank check, not differentiable (the PyLayer's backward)."""
    paddle_placements = to_paddle_placements(placements)
    return _values(x, mesh, request(paddle, x, mesh, paddle_placements))


def _own_mesh(paddle, mesh):
    """A ProcessMesh that owns its data, equal to ``mesh``."""
    ids = np.array(list(mesh.process_ids)).reshape(list(mesh.shape)).tolist()
    return paddle.distributed.ProcessMesh(ids, dim_names=list(mesh.dim_names))


def _same_layout(dy, mesh, placements) -> bool:
    pm = dy.process_mesh
    if list(pm.process_ids) != list(mesh.process_ids) or list(pm.shape) != list(mesh.shape):
        return False
    n = len(mesh.shape)
    return pad_placements(placements_of(dy), n) == pad_placements(placements, n)


def _pylayer():
    paddle = require_paddle("paddle_ext.reshard")

    class Reshard(paddle.autograd.PyLayer):
        """Forward: ``values(x, mesh)``. Backward: the gradient resharded by ``back`` to x's mesh
        and placements, a Partial source dim given Replicate."""

        @staticmethod
        def forward(ctx, x, mesh, values, back):
            # x.process_mesh is a view into x's C++ attributes: once x is freed (activations
            # often are before backward) it dangles, so keep a ProcessMesh of our own
            ctx.src_mesh = _own_mesh(paddle, x.process_mesh)
            src = tuple(Replicate() if isinstance(p, Partial) else p for p in placements_of(x))
            ctx.grad_placements, ctx.back = src, back
            return values(x, mesh)

        @staticmethod
        def backward(ctx, dy):
            if not dy.is_dist():
                raise ReshardPlanError(
                    f"the gradient reaching reshard's backward is not a DistTensor ({describe(dy)}); "
                    f"keep the loss a DistTensor or reshard it explicitly")
            if _same_layout(dy, ctx.src_mesh, ctx.grad_placements):
                return dy
            return ctx.back(dy, ctx.src_mesh, ctx.grad_placements)

    return Reshard


_FUNCTION = []


def differentiable(x, mesh, values, back=values_of):
    """``values(x, mesh)`` (a reshard of ``x`` onto ``mesh``) as a PyLayer whose backward
    reshards the gradient back to x's mesh and placements with ``back(dy, mesh, placements)``
    (paddle-ext placements), a Partial source dim given a Replicate gradient, as Paddle's own
    reshard does: the gradient of a partial value is the gradient of the value it sums to, whole
    on every rank, which is what the op that produced the partial value needs in its backward (a
    Partial gradient would cost that op an all-reduce)."""
    if not _FUNCTION:
        _FUNCTION.append(_pylayer())
    return _FUNCTION[0].apply(x, mesh, values, back)


def _native(x, mesh, placements, src, dst, stats):
    """Paddle's own reshard (listeners and ``stats`` told)."""
    for listener in NATIVE_LISTENERS:
        listener(src, dst, x.element_size())
    if stats is not None:
        same = src.mesh_shape == dst.mesh_shape
        stats.update(plan="native", plan_bytes=sum(step.bytes for step in plan_reshard(
            src, dst, itemsize=x.element_size())) if same else None)
    return original_reshard()(x, mesh, list(placements))


def reshard(x, mesh, placements, *, check: bool = True, stats: dict | None = None, installed: bool = False):
    """Reshard DistTensor ``x`` to ``placements`` on ``mesh`` with paddle-ext's minimal plan.

    ``placements`` are Paddle placements (``dist.Shard(0)``, ``dist.Partial(dist.ReduceType.kRedAvg)``,
    ...). Works across meshes (same or different shape, overlapping or not), for uneven and empty
    shards and every Partial reduce type. ``stats`` (a dict) receives the plan text, its bytes and
    the bytes this rank received. Raises :class:`ReshardPlanError` before any data moves when the
    request is invalid or ranks disagree. This is the full path, validated on every call;
    :mod:`.fast` serves repeated calls from a cache. ``installed``: the call is ``dist.reshard``
    after ``install()`` (what paddle-ext cannot express goes to Paddle, see :func:`~.route.route`).
    """
    paddle = require_paddle("paddle_ext.reshard")
    kind, specs = route(paddle, x, mesh, placements, installed)
    if kind == "paddle":
        return original_reshard()(x, mesh, list(placements))   # Paddle, exactly as without paddle-ext
    if kind == "reshape":
        return local_mesh_reshape(x, mesh, *reshape_placements(specs[0], specs[1]))
    if kind == "nccl":
        return _native(x, mesh, placements, specs[0], specs[1], stats)
    if check:  # before any data moves, on every path
        _check_request(paddle, x, *specs)
    if kind == "native":
        return _native(x, mesh, placements, specs[0], specs[1], stats)
    if x.stop_gradient or not paddle.is_grad_enabled():
        return _values(x, mesh, specs, stats)
    return differentiable(x, mesh, lambda x, mesh: _values(x, mesh, specs, stats))


__all__ = ["differentiable", "placements_of", "reshard", "values_of"]
