"""Dygraph executor: ``reshard(x, mesh, placements)`` on Paddle DistTensors over gloo.

The plan comes from :func:`~paddle_ext.reshard.planner.plan_reshard`; each step runs through the
per-rank runner (:mod:`.per_rank`) with :class:`PaddleBackend`, which uses point-to-point
``dist.send``/``dist.recv`` (measured faster than gloo's all_gather on this build, and exact for uneven and empty shards) and
gloo's ``all_reduce`` when the group is the whole world. all_to_all and reduce_scatter are built
from point-to-point, so every rank receives exactly the bytes the plan states.

The result is differentiable: a PyLayer whose backward reshards the incoming gradient back to the
source mesh and placements (the reverse plan). Output DistTensors are built with
``paddle.Tensor(local, dims=global_shape, process_mesh=..., placements=...)``, which keeps the
right global shape for uneven shards (``dtensor_from_local`` would infer ``local * mesh_size``).

Everything that can be checked is checked before the first collective, and the source tensor is
never written: placements (count, shard dims), destination ranks inside the job, and, with
``check=True`` (default), that every participating rank asks for the same reshard of a tensor
with the same global shape and dtype (one small all_gather of metadata).
"""
from __future__ import annotations

import hashlib
import math
from typing import Sequence

import numpy as np
import paddle

from ..compat.ports.convert import from_paddle_placements, mesh_shape, pad_placements, to_paddle_placements
from ..compat.ports.internals import expected_place
from ..compat.ports.mesh_reshape import local_mesh_reshape, reshape_placements
from ..compat.ports.buffers import fresh
from ..compat.version import require_paddle
from ..compat.ports.views import require_writable_views
from ..errors import ConversionError, PlacementError, ReshardPlanError
from ..placements import DistSpec, format_placements
from . import routing
from .groups import group_for
from .layout import Geometry
from .native import native_is_exact
from .per_rank import execute
from .planner import format_plan, plan_reshard
from .originals import NATIVE_LISTENERS, original_reshard

_DTYPE_CODES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16",
                "float32", "float64", "complex64", "complex128")


class PaddleBackend:
    """Array and communication primitives for :mod:`.per_rank` on Paddle dygraph tensors."""

    def __init__(self, paddle, rank: int, world: Sequence[int], like, stats: dict | None, group=None):
        self.p, self.dist = paddle, paddle.distributed
        self.rank, self.world, self.like, self._stats = rank, tuple(sorted(world)), like, stats
        self.group = group  # a prepared group of exactly ``world``; None = Paddle's world group
        self.lockstep = True  # see exchange.exchange: gloo p2p tags are per-group sequence numbers

    # arrays
    @staticmethod
    def _sl(box):
        return tuple(slice(o, o + n) for o, n in box)

    def shape(self, x):
        return tuple(x.shape)

    def numel(self, x):
        return math.prod(x.shape)

    def empty(self, shape, like):
        return fresh(self.p, shape, like.dtype)   # huge pages for large CPU buffers (compat.ports.buffers)

    def full(self, shape, value, like):
        return self.p.full(list(shape), value, dtype=like.dtype)

    def take(self, x, box):
        if tuple(n for _, n in box) == tuple(x.shape):
            return x
        if not math.prod(n for _, n in box):
            return self.p.empty([n for _, n in box], dtype=x.dtype)
        return x[self._sl(box)].contiguous()

    def view(self, x, box, contiguous: bool = False):
        """``x[box]`` without a copy (a strided view); with ``contiguous``, None unless the view
        is one dense block (a run of leading-dim rows), which gloo can receive into."""
        v = x if tuple(n for _, n in box) == tuple(x.shape) else x[self._sl(box)]
        return v if not contiguous or v.is_contiguous() else None

    def put(self, out, box, x):
        # assign into a view of ``out``: on Paddle 3.3 CPU ``out[box] = x`` (set_value) is ~10x
        # slower, and ``view.copy_(x)`` from a strided ``x`` ~50x (tools/bench_reshard.py)
        if math.prod(n for _, n in box):
            self.p.assign(x, output=self.view(out, box))
        return out

    def reduce_into(self, acc, x, op):
        """``acc = op(acc, x)`` in place (``acc`` is a buffer of ours, never the source)."""
        if op == "sum":
            acc.add_(x)
        else:
            acc.copy_(self.reduce(acc, x, op))
        return acc

    def reduce(self, a, b, op):
        fn = {"sum": self.p.add, "max": self.p.maximum, "min": self.p.minimum}[op]
        return fn(a, b)

    def scale(self, x, factor):
        return x * factor

    def divide(self, x, n):
        return x / n

    def flat(self, x):
        return x.reshape([-1])

    def reshape(self, x, shape):
        return x.reshape(list(shape))

    def concat(self, xs, axis):
        return self.p.concat(xs, axis=axis)

    def concat_flat(self, xs, like):
        parts = [x.reshape([-1]) for x in xs if self.numel(x)]
        if not parts:
            return self.p.empty([0], dtype=like.dtype)
        return parts[0] if len(parts) == 1 else self.p.concat(parts)

    def split_flat(self, x, sizes):
        out, off = [], 0
        for s in sizes:
            out.append(x[off:off + s])
            off += s
        return out

    def dtype_kind(self, x):
        name = str(x.dtype).replace("paddle.", "")
        return "f" if "float" in name else ("b" if name == "bool" else "i")

    def dtype_info(self, x):
        name = str(x.dtype).replace("paddle.", "")
        return np.iinfo(name) if self.dtype_kind(x) == "i" else None

    # communication
    def count(self, nbytes: int) -> None:
        if self._stats is not None:
            self._stats["received_bytes"] = self._stats.get("received_bytes", 0) + int(nbytes)

    def _itemsize(self, x) -> int:
        return x.element_size()

    def send(self, x, peer):
        self.dist.send(x.contiguous(), dst=peer, group=self.group)

    def recv(self, numel, like, peer, count: bool = True):
        buf = fresh(self.p, [numel], like.dtype)
        self.dist.recv(buf, src=peer, group=self.group)
        if count:
            self.count(numel * self._itemsize(buf))
        return buf

    def recv_into(self, buf, peer):
        """Receive into ``buf`` in place (a contiguous view into an output tensor)."""
        self.dist.recv(buf, src=peer, group=self.group)
        self.count(self.numel(buf) * self._itemsize(buf))
        return buf

    def gather_sizes(self, vec):
        """Every member's ``vec`` (equal lengths), by member: one gloo all_gather of int64."""
        n, t = len(self.world), self.p.to_tensor(list(vec), dtype="int64")
        out = self.p.empty([n * len(vec)], dtype="int64")
        self.dist.stream.all_gather(out, t, group=self.group)
        return out.reshape([n, len(vec)]).numpy().tolist()

    def scatter(self, buf, numel, like, root, payload=None):
        """gloo's scatter over this backend's group: ``root``'s ``buf`` in equal chunks, in member
        order; ``payload`` of the ``numel`` elements are data, the rest padding."""
        out = fresh(self.p, [numel], like.dtype)
        self.dist.stream.scatter(out, buf.contiguous() if buf is not None else None, src=root, group=self.group)
        if self.rank != root:
            payload = numel if payload is None else payload
            self.count(payload * self._itemsize(out))
            if self._stats is not None and numel > payload:
                self._stats["padding_bytes"] = self._stats.get("padding_bytes", 0) + (numel - payload) * self._itemsize(out)
        return out

    # gloo's all_gather (GlooCommContext) takes these; bfloat16 and bool measured on 2 ranks
    _GATHER_DTYPES = ("float32", "float64", "float16", "bfloat16", "int32", "int64", "int8", "uint8", "bool")

    def all_gather_into(self, out, x, members) -> bool:
        """gloo's all_gather of equal shards straight into ``out`` (rank-major slabs); False
        when ``members`` is not this backend's whole group or gloo lacks the dtype."""
        if len(set(members)) == 1:  # a group of one: no communication (no group may exist)
            self.p.assign(x, output=out)
            return True
        if tuple(sorted(members)) != self.world or list(members) != sorted(members) \
                or str(x.dtype).replace("paddle.", "") not in self._GATHER_DTYPES:
            return False
        self.dist.stream.all_gather(out, x.contiguous(), group=self.group)
        self.count((len(members) - 1) * self.numel(x) * self._itemsize(x))
        return True

    def all_reduce(self, x, op, members):
        """gloo's all_reduce on a copy of ``x`` (the source is never written); measured faster
        than the point-to-point reduce-scatter + all-gather into the output. None when
        ``members`` is not this backend's whole group."""
        if len(set(members)) != 1 and tuple(sorted(members)) != self.world:
            return None
        y = fresh(self.p, x.shape, x.dtype)   # a clone: the source is never written
        self.p.assign(x, output=y)
        if len(set(members)) == 1:  # a group of one: nothing to reduce with
            return y
        ops = {"sum": self.dist.ReduceOp.SUM, "max": self.dist.ReduceOp.MAX,
               "min": self.dist.ReduceOp.MIN}
        self.dist.all_reduce(y, op=ops[op], group=self.group)
        n, total = len(members), self.numel(x)
        chunk = -(-total // n) if total else 0
        mine = max(0, min(chunk, total - chunk * list(members).index(self.rank)))
        self.count(((n - 1) * mine + (total - mine)) * self._itemsize(x))
        return y


def placements_of(x) -> tuple:
    """paddle-ext placements of DistTensor ``x`` (co-shard included; see compat.ports.convert)."""
    return from_paddle_placements(x.placements)


def _describe(x) -> str:
    name = getattr(x, "name", None) or "tensor"
    return f"{name} {list(x.shape)} {str(x.dtype).replace('paddle.', '')}"


def _specs(x, mesh, placements):
    """Validate the request without communicating; returns (src spec, dst spec, ranks...)."""
    paddle = require_paddle("paddle_ext.reshard")
    dist = paddle.distributed
    if not isinstance(x, paddle.Tensor) or not x.is_dist():
        raise ReshardPlanError(
            f"reshard needs a DistTensor, got {type(x).__name__} {list(getattr(x, 'shape', []))}; "
            f"create one with paddle.distributed.shard_tensor(x, mesh, placements)")
    if not (hasattr(mesh, "process_ids") and hasattr(mesh, "shape")):
        raise ReshardPlanError(f"reshard of {_describe(x)}: mesh must be a ProcessMesh, got {mesh!r}")
    try:
        src_pl = pad_placements(placements_of(x), len(mesh_shape(x.process_mesh)))
        dst_pl = from_paddle_placements(list(placements), len(mesh_shape(mesh)))
        src = DistSpec(tuple(x.shape), mesh_shape(x.process_mesh), src_pl)
        dst = DistSpec(tuple(x.shape), mesh_shape(mesh), dst_pl)
    except (PlacementError, ConversionError) as exc:
        raise ReshardPlanError(
            f"reshard of {_describe(x)} to {list(placements)} on mesh {list(mesh_shape(mesh))}: {exc}") from None
    world = dist.get_world_size()
    s_ranks, d_ranks = tuple(x.process_mesh.process_ids), tuple(mesh.process_ids)
    outside = [r for r in s_ranks + d_ranks if not 0 <= r < world]
    if outside:
        raise ReshardPlanError(
            f"reshard of {_describe(x)}: mesh ranks {sorted(set(outside))} are not in this job of "
            f"{world} ranks; build the ProcessMesh from ranks 0..{world - 1}")
    return src, dst, s_ranks, d_ranks


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


def check_meta(paddle, mine_t, out, where, mine: list, describe) -> None:
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
    x, dst, d_ranks = describe
    dtype = _DTYPE_CODES[mine[1]] if mine[1] < len(_DTYPE_CODES) else "?"
    raise ReshardPlanError(
        f"reshard of {_describe(x)} to {format_placements(dst.placements)} on ranks "
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


def _local(x, ranks):

    if paddle.distributed.get_rank() not in ranks:
        return None
    return x._local_value()


def _reshard_values(x, mesh, paddle_placements, stats, specs=None):
    paddle = require_paddle("paddle_ext.reshard")
    src, dst, s_ranks, d_ranks = specs or _specs(x, mesh, paddle_placements)
    plan = plan_reshard(src, dst, src_ranks=s_ranks, dst_ranks=d_ranks, itemsize=x.element_size(),
                         dtype=str(x.dtype).replace("paddle.", ""))
    if stats is not None:
        stats.update(plan=format_plan(plan), plan_bytes=sum(s.bytes for s in plan))
    geo = Geometry(src.shape, src.mesh_shape, s_ranks, dst.mesh_shape, d_ranks)
    exact = to_paddle_placements(dst.placements)
    return _run(paddle, _local(x, s_ranks), x.dtype, geo, plan, mesh, exact, stats)


def _own_mesh(paddle, mesh):
    """A ProcessMesh that owns its data, equal to ``mesh``."""

    ids = np.array(list(mesh.process_ids)).reshape(list(mesh.shape)).tolist()
    return paddle.distributed.ProcessMesh(ids, dim_names=list(mesh.dim_names))


def _pylayer():
    paddle = require_paddle("paddle_ext.reshard")

    class ReshardFunction(paddle.autograd.PyLayer):
        """Forward: the plan src -> dst. Backward: reshard dy back to x's mesh and placements."""

        @staticmethod
        def forward(ctx, x, mesh, placements, stats, values):
            # x.process_mesh is a view into x's C++ attributes: once x is freed (activations
            # often are before backward) it dangles, so keep a ProcessMesh of our own
            ctx.src_mesh = _own_mesh(paddle, x.process_mesh)
            ctx.src_placements = to_paddle_placements(placements_of(x))
            if values is not None:
                return values(x, mesh)
            return _reshard_values(x, mesh, placements, stats)

        @staticmethod
        def backward(ctx, dy):
            if not dy.is_dist():
                raise ReshardPlanError(
                    f"the gradient reaching reshard's backward is not a DistTensor ({_describe(dy)}); "
                    f"keep the loss a DistTensor or reshard it explicitly")
            return _reshard_values(dy, ctx.src_mesh, ctx.src_placements, None)

    return ReshardFunction


_FUNCTION = []


def _own_fast_path(paddle, src: DistSpec, ranks) -> bool:
    """A 1-D mesh whose ranks form the job's world or a prepared group: paddle-ext's collectives
    then run over exactly the mesh's ranks, as Paddle's do, and write into the output in place."""
    if len(src.mesh_shape) != 1 or len(ranks) < 2 or len(ranks) % 2:  # odd: gloo p2p lockstep
        return False
    return sorted(ranks) == list(range(paddle.distributed.get_world_size())) or group_for(ranks) is not None


def _native(x, mesh, placements, src, dst, stats):
    """Paddle's own reshard (listeners and ``stats`` told)."""

    for listener in NATIVE_LISTENERS:
        listener(src, dst, x.element_size())
    if stats is not None:
        same = src.mesh_shape == dst.mesh_shape
        stats.update(plan="native", plan_bytes=sum(step.bytes for step in plan_reshard(
            src, dst, itemsize=x.element_size())) if same else None)
    return original_reshard()(x, mesh, list(placements))


def route(paddle, x, mesh, placements):
    """Where this call runs, decided before any data moves, with every named error raised:
    ``("reshape", specs)`` (a pure mesh reshape, local), ``("paddle", None)`` (Paddle's own reshard, exactly as without paddle-ext), ``("nccl", specs)``
    (Paddle's, NCCL), ``("native", specs)`` (Paddle's, exact here, after the request check) or
    ``("ext", specs)``; ``specs`` is :func:`_specs`' ``(src, dst, src ranks, dst ranks)``."""
    backend = None
    if isinstance(x, paddle.Tensor) and x.is_dist() and hasattr(mesh, "process_ids"):
        if x.process_mesh.process_ids == mesh.process_ids and x.process_mesh.shape != mesh.shape:
            specs = _specs(x, mesh, placements)
            if routing.pure_mesh_reshape(*specs):
                return "reshape", specs   # no data moves: local, in every process state
        backend = routing.call_backend(x, mesh)   # asked once per call
        if routing.to_paddle_first(paddle, x, mesh, backend):
            return "paddle", None
    specs = _specs(x, mesh, placements)
    src, dst, s_ranks, d_ranks = specs
    if backend == routing.NCCL and not routing.nccl_keeps(src, dst, s_ranks, d_ranks):
        return "nccl", specs
    differentiable = not x.stop_gradient and paddle.is_grad_enabled()
    # Paddle's own path is exact and moves the same bytes here; its backward gives a Partial
    # source a Replicate gradient, so those keep paddle-ext's path (x.grad keeps x's placements).
    # On a 1-D mesh that is the whole job or a prepared group, paddle-ext's executor is faster
    # (it gathers / reduces straight into the output: tools/bench_reshard.py), so it runs there.
    if s_ranks == d_ranks and native_is_exact(src, dst) and not (differentiable and src.partial_mesh_dims()) \
            and not _own_fast_path(paddle, src, s_ranks):
        return "native", specs
    return "ext", specs


def differentiable_reshard(x, mesh, placements, stats, values=None):
    """paddle-ext's executor as a PyLayer: backward reshards the gradient back to x's layout.
    ``values`` (the fast path's cached runner) replaces the planning of the forward."""
    if not _FUNCTION:
        _FUNCTION.append(_pylayer())
    return _FUNCTION[0].apply(x, mesh, list(placements), stats, values)


def reshard(x, mesh, placements, *, check: bool = True, stats: dict | None = None):
    """Reshard DistTensor ``x`` to ``placements`` on ``mesh`` with paddle-ext's minimal plan.

    ``placements`` are Paddle placements (``dist.Shard(0)``, ``dist.Partial(dist.ReduceType.kRedAvg)``,
    ...). Works across meshes (same or different shape, overlapping or not), for uneven and empty
    shards and every Partial reduce type. ``stats`` (a dict) receives the plan text, its bytes and
    the bytes this rank received. Raises :class:`ReshardPlanError` before any data moves when the
    request is invalid or ranks disagree. This is the full path, validated on every call;
    :mod:`.fast` serves repeated calls from a cache.
    """
    paddle = require_paddle("paddle_ext.reshard")
    kind, specs = route(paddle, x, mesh, placements)
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
        return _reshard_values(x, mesh, placements, stats, specs)
    return differentiable_reshard(x, mesh, placements, stats)


__all__ = ["PaddleBackend", "placements_of", "reshard"]
