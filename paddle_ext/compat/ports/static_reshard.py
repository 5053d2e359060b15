"""Static (PIR) ReshardFunctions for the transitions Paddle 3.3.1 lacks or gets wrong on CPU.

Paddle's reshard pass (``ReshardPasses.reshard_op_pass``) asks ``choose_reshard_func`` for the
first ReshardFunction whose ``is_suitable(src_attr, dst_attr)`` is true and lets it emit the ops
that replace a ``dist_op.reshard``. :func:`install_static_reshard` puts paddle-ext's functions at
the front of that list (idempotent); :func:`uninstall_static_reshard` takes them out again.

All five act on one 1-D mesh (source and destination on the same mesh). On CPU the static graph
only has working ``all_reduce`` and ``all_gather`` kernels (``send_v2``/``recv_v2``,
``all_to_all`` and ``reduce_scatter`` throw), so the compositions below are the cheapest ones that
run. ``S`` is the tensor's bytes, ``n`` the mesh size; "bytes" is what one rank receives.

==============  =================================================  ===============  ============
transition      ops (per rank)                                     bytes (even)     minimum
==============  =================================================  ===============  ============
S(i) -> P(op)   pad own shard at its offset with the op's neutral  0                0
                (0 / -inf / +inf; avg: x n). Paddle: no function.
R -> P(op)      sum: the mesh's first rank keeps it, others zeros;  0                0
                avg/max/min: every rank keeps it. Paddle: global
                rank 0 keeps it (all zeros on a mesh without 0).
S(i) -> S(j)    [pad to even] all_gather + slice own chunk         (n-1)/n * S      (n-1)/n^2*S
                Paddle: all_to_all (no CPU kernel), even only.
P(op) -> S(j)   all_reduce + slice own chunk                       2(n-1)/n * S     (n-1)/n * S
                Paddle: reduce_scatter (no CPU kernel).
S(i) -> R       [pad to even] all_gather [+ slice the padding off]  (n-1)/n * S      (n-1)/n * S
                Paddle: same when even; uneven fails to build.
==============  =================================================  ===============  ============

Meshes whose process ids are not in rank order (``[1, 0]``) gather in rank order and reorder
the chunks with one ``index_select``. Ops get dist types (global shape, dist attr, this rank's
real local shape) and op dist attrs with the source value's ``chunk_id``.

Uneven shapes use paddle-ext's ceil-first chunks (:class:`~paddle_ext.placements.DistSpec`), the
split Paddle's ``shard_tensor`` makes; where Paddle would reshape evenly these pad or slice by the
real chunk sizes. :func:`static_reshard_bytes` gives the bytes of a transition for a layout, to
set next to :func:`~paddle_ext.reshard.plan_reshard`'s minimum.
"""
from __future__ import annotations

import collections
import math
from typing import Sequence

from ...errors import ReshardPlanError
from ...placements import DistSpec, Partial, Replicate, Shard, format_placements
from .backend import NCCL, backend_of, route_unknown
from ..version import require_paddle
from .registries import static_reshard_funcs

paddle = require_paddle("paddle_ext.compat.ports.static_reshard")
from paddle.distributed.auto_parallel.static.process_group import new_process_group  # noqa: E402
from paddle.distributed.auto_parallel.static.reshard_funcs import (  # noqa: E402
    base_reshard_func as _base,
)

_pir = paddle.base.libpaddle.pir

# ReduceType name -> paddle-ext partial op; other reduce types (prod, any, all) fall to Paddle.
_REDUCE_OPS = {"kRedSum": "sum", "kRedAvg": "avg", "kRedMax": "max", "kRedMin": "min"}
_NEUTRAL = {"sum": 0.0, "avg": 0.0, "max": float("-inf"), "min": float("inf")}

#: how often each function emitted ops since import (class name -> count), for tests and doctor.
CALLS: collections.Counter = collections.Counter()


# -- reading Paddle's PIR dist attributes ----------------------------------------------------
def _layout(attr):
    """``(placement, mesh_ids)`` of a 1-D-mesh PIR dist attr, or None when paddle-ext does not
    cover it (an N-D mesh, several sharded dims, or a reduce type other than sum/avg/max/min)."""
    mesh = attr.process_mesh
    if mesh.ndim != 1:
        return None
    sharded = [d for d, m in enumerate(attr.dims_mapping) if m != -1]
    partial = dict(attr.partial_status)
    if len(sharded) > 1 or (sharded and partial):
        return None
    if partial:
        op = _REDUCE_OPS.get(partial[0].name)
        return None if op is None else (Partial(op), tuple(mesh.process_ids))
    if sharded:
        return Shard(sharded[0]), tuple(mesh.process_ids)
    return Replicate(), tuple(mesh.process_ids)


def _kinds(src_attr, dst_attr):
    """The two placements when both attrs are on the same 1-D mesh, else None."""
    src, dst = _layout(src_attr), _layout(dst_attr)
    if src is None or dst is None or src[1] != dst[1] or src_attr.process_mesh != dst_attr.process_mesh:
        return None
    return src[0], dst[0]


def _mesh_index(mesh) -> int:
    """This rank's index in ``mesh``. A rank outside it builds ops for index 0: Paddle's
    remove_other_rank_op pass drops ops whose mesh does not hold the rank."""
    ids = list(mesh.process_ids)
    rank = paddle.distributed.get_rank()
    return ids.index(rank) if rank in ids else 0


def _chunk_id(value) -> int:
    op = value.get_defining_op()
    return op.dist_attr.chunk_id if op is not None and op.dist_attr else -1


# -- building typed ops ----------------------------------------------------------------------
class _Emitter:
    """Gives each emitted op its result type (global shape, dist attr, local shape) and an op
    dist attr on ``mesh`` with the value's chunk_id, as Paddle's own functions do."""

    def __init__(self, mesh, chunk_id: int):
        self.mesh, self.chunk_id = mesh, chunk_id

    def attr(self, dims_mapping: Sequence[int], partial: dict | None = None):
        return _pir.create_tensor_dist_attribute(self.mesh, list(dims_mapping), partial or {})

    def typed(self, value, operand_attrs: list, attr, global_shape, local_shape=None):
        shaped = paddle.pir.create_shaped_type(value.type(), list(global_shape))
        if local_shape is None:
            dist_type = _pir.cvt_to_dist_type(shaped, attr)
        else:
            dist_type = _pir.cvt_to_dist_type(shaped, attr, list(local_shape))
        value.set_type(dist_type)
        op = value.get_defining_op()
        op.dist_attr = _pir.create_op_dist_attribute(self.mesh, operand_attrs, [attr], self.chunk_id)
        for i in range(1, op.num_operands()):  # constant inputs: pad's value, slice's starts/ends
            const = op.operand_source(i).get_defining_op()
            if const is not None and const.num_operands() == 0 and not const.dist_attr:
                rep = self.attr([-1] * len(const.result(0).shape))
                const.result(0).set_type(_pir.cvt_to_dist_type(const.result(0).type(), rep))
                const.dist_attr = _pir.create_op_dist_attribute(self.mesh, [], [rep], self.chunk_id)
        return value


def _group(mesh):
    """The collective group of ``mesh``'s ranks, in rank order as Paddle's own functions use
    (measured: a group in another order still gathers in rank order on gloo)."""
    return new_process_group(sorted(mesh.process_ids))


def _spec(shape, n: int, placement) -> DistSpec:
    return DistSpec(tuple(int(s) for s in shape), (n,), (placement,))


def _check_shape(name: str, value, src_attr, dst_attr):
    shape = list(value.shape)
    if any(s < 0 for s in shape):
        raise ReshardPlanError(
            f"{name}: the value has a dynamic shape {shape} (from {format_placements([_layout(src_attr)[0]])} "
            f"to {format_placements([_layout(dst_attr)[0]])} on mesh {list(src_attr.process_mesh.process_ids)}); "
            f"paddle-ext's static functions slice by static chunk sizes, so give the input a static shape "
            f"(e.g. InputSpec without -1) or call "
            f"paddle_ext.compat.ports.static_reshard.uninstall_static_reshard() to use Paddle's")
    return shape


class _StaticReshard(_base.ReshardFunction):
    """Base of paddle-ext's static functions: ``covers(src, dst)`` on paddle-ext placements."""

    def covers(self, src, dst) -> bool:
        raise NotImplementedError

    def is_suitable(self, src_dist_attr, dst_dist_attr):
        kinds = _kinds(src_dist_attr, dst_dist_attr)
        if kinds is None or not self.covers(*kinds):
            return False
        backend = backend_of(None)  # the static program runs on the world's backend
        if backend == NCCL:
            return not self.paddle_exact_on_nccl(*kinds, src_dist_attr.process_mesh)
        return not route_unknown(backend, "static reshard functions")  # GLOO / no env: as before

    def paddle_exact_on_nccl(self, src, dst, mesh) -> bool:
        """True when Paddle's own function is exact for this transition on NCCL, whatever the shape."""
        return False

    def even_goes_to_paddle(self, src, dst) -> bool:
        """True when, on NCCL, Paddle's own function is exact for even shapes (decided in reshard)."""
        return False

    def reshard(self, src_dist_attr, dst_dist_attr, src_value, dst_type):
        src, dst = _kinds(src_dist_attr, dst_dist_attr)
        if backend_of(None) == NCCL and self.even_goes_to_paddle(src, dst) \
                and _even_value(src, src_value, src_dist_attr.process_mesh):
            theirs = _paddle_function(src_dist_attr, dst_dist_attr)
            if theirs is not None:  # an even shape on NCCL: Paddle's own ops, as without paddle-ext
                return theirs.reshard(src_dist_attr, dst_dist_attr, src_value, dst_type)
        name = type(self).__name__
        CALLS[name] += 1
        emit = _Emitter(src_dist_attr.process_mesh, _chunk_id(src_value))
        return self._emit(emit, src, dst, src_dist_attr, dst_dist_attr, src_value, dst_type)

    def _emit(self, emit, src, dst, src_attr, dst_attr, value, dst_type):
        raise NotImplementedError


def _even_value(src, value, mesh) -> bool:
    """The value's (global) shape is known, has no empty dim, and a Shard divides it evenly."""
    shape = list(value.shape)
    if any(d <= 0 for d in shape):
        return False
    return not isinstance(src, Shard) or shape[src.dim] % len(mesh.process_ids) == 0


def _paddle_function(src_attr, dst_attr):
    """Paddle's own suitable ReshardFunction (paddle-ext's skipped), or None."""
    for func in _base._g_reshard_func_list:
        if not isinstance(func, _StaticReshard) and func.is_suitable(src_attr, dst_attr):
            return func
    return None


class SToPStaticReshard(_StaticReshard):
    """S(i) -> P(op) with no communication: the rank's shard at its offset, the op's neutral
    elsewhere (0 for sum and avg, -inf for max, +inf for min), times n for avg. A Partial value's
    local shape is the full global shape. Paddle 3.3.1 has no S -> P function at all."""

    def covers(self, src, dst):
        return isinstance(src, Shard) and isinstance(dst, Partial)

    def _emit(self, emit, src, dst, src_attr, dst_attr, value, dst_type):
        shape = _check_shape(type(self).__name__, value, src_attr, dst_attr)
        n = len(src_attr.process_mesh.process_ids)
        (offset, length) = _spec(shape, n, src).local_slices((_mesh_index(src_attr.process_mesh),))[src.dim]
        paddings = [0] * (2 * len(shape))
        paddings[2 * src.dim] = offset
        paddings[2 * src.dim + 1] = shape[src.dim] - offset - length
        neutral = _NEUTRAL[dst.op]
        if dst.op in ("max", "min") and not _is_float(value):
            raise ReshardPlanError(
                f"S({src.dim}) -> P({dst.op}) on mesh {list(src_attr.process_mesh.process_ids)} needs an "
                f"infinite neutral element, but the value is {value.dtype}; cast it to a float dtype first")
        if any(paddings):
            out = paddle._C_ops.pad(value, paddings, neutral)
        else:  # a one-rank mesh: the shard is the whole tensor
            out = paddle._C_ops.assign(value)
        emit.typed(out, [src_attr], dst_attr, shape)
        if dst.op == "avg" and n > 1:
            out = emit.typed(paddle._C_ops.scale(out, float(n), 0.0, True), [dst_attr], dst_attr, shape)
        out.set_type(dst_type)
        return out


class RToPStaticReshard(_StaticReshard):
    """R -> P(op) with no communication. For sum the mesh's FIRST rank (index 0 in the mesh)
    keeps the value and the others hold zeros; for avg/max/min every rank keeps it.

    Paddle 3.3.1's RToPReshardFunction keeps the value on GLOBAL rank 0, so on a mesh without
    rank 0 (a later pipeline stage, ``ProcessMesh([1])``) every rank holds zeros: silently wrong.
    """

    def covers(self, src, dst):
        return isinstance(src, Replicate) and isinstance(dst, Partial)

    def paddle_exact_on_nccl(self, src, dst, mesh):
        # Paddle: sum keeps the value on global rank 0; avg/max keep it everywhere; min asserts
        return dst.op in ("avg", "max") or (dst.op == "sum" and list(mesh.process_ids)[0] == 0)

    def _emit(self, emit, src, dst, src_attr, dst_attr, value, dst_type):
        shape = list(value.shape)
        if dst.op == "sum" and _mesh_index(src_attr.process_mesh) != 0:
            out = paddle._C_ops.full_like(value, 0.0, value.dtype, _place())
        else:
            out = paddle._C_ops.assign(value)
        emit.typed(out, [src_attr], dst_attr, shape)
        out.set_type(dst_type)
        return out


def _gather(emit, src, src_attr, value, shape):
    """All-gather an S(i) value on a 1-D mesh into a replicated one, padding short chunks.

    Returns ``(value, padded)``: the replicated value, whose dim i is ``n * ceil(D_i/n)`` long
    when ``padded`` (the caller slices it back to D_i, in the same slice as any other cut).
    all_gather stacks along dim 0, so dim i is moved first and back with two transposes.
    """
    mesh = src_attr.process_mesh
    n, k, i, ndim = len(mesh.process_ids), _mesh_index(mesh), src.dim, len(shape)
    rep = emit.attr([-1] * ndim)
    if n == 1:  # one rank holds the whole tensor
        return emit.typed(paddle._C_ops.assign(value), [src_attr], rep, shape), False
    local = list(_spec(shape, n, src).local_shape((k,)))
    chunk = math.ceil(shape[i] / n) if shape[i] else 0
    first = emit.attr([0] + [-1] * (ndim - 1))  # sharded along dim 0
    perm = list(range(ndim))
    perm[0], perm[i] = perm[i], perm[0]
    moved = [shape[p] for p in perm]
    x = value
    if i != 0:
        x = emit.typed(paddle._C_ops.transpose(x, perm), [src_attr], first, moved, [local[p] for p in perm])
    padded_shape = [chunk * n] + moved[1:]
    if local[i] < chunk:  # this rank's chunk is short: zeros at its end, so chunks line up
        paddings = [0] * (2 * ndim)
        paddings[1] = chunk - local[i]
        x = emit.typed(paddle._C_ops.pad(x, paddings, 0.0), [first], first, padded_shape,
                       [chunk] + moved[1:])
    x = emit.typed(paddle._C_ops.all_gather(x, _group(mesh).id, n), [first], rep, padded_shape)
    ids = list(mesh.process_ids)
    if ids != sorted(ids):  # the gather stacks chunks in rank order; put them in mesh order
        order = [p for m in range(n) for p in range(sorted(ids).index(ids[m]) * chunk,
                                                    (sorted(ids).index(ids[m]) + 1) * chunk)]
        index = paddle._C_ops.full_int_array(order, paddle.int64, _place())
        x = emit.typed(paddle._C_ops.index_select(x, index, 0), [rep, emit.attr([-1])], rep, padded_shape)
    if i != 0:
        x = emit.typed(paddle._C_ops.transpose(x, perm), [rep], rep, [padded_shape[p] for p in perm])
    return x, chunk * n != shape[i]


class SToRStaticReshard(_StaticReshard):
    """S(i) -> R: all_gather, padded to even chunks when uneven, then the padding sliced off.

    Even shapes cost what Paddle's SToRReshardFunction costs ((n-1)/n * S); Paddle's uneven
    path fails while building ("'list' object has no attribute 'get_defining_op'" in
    s_to_r_reshard_func.py), and backward passes create uneven S -> R from explicit reshards."""

    def covers(self, src, dst):
        return isinstance(src, Shard) and isinstance(dst, Replicate)

    def even_goes_to_paddle(self, src, dst):
        return True  # all_gather; Paddle fails to build only uneven shapes

    def _emit(self, emit, src, dst, src_attr, dst_attr, value, dst_type):
        shape = _check_shape(type(self).__name__, value, src_attr, dst_attr)
        x, padded = _gather(emit, src, src_attr, value, shape)
        if padded:
            x = paddle._C_ops.slice(x, [src.dim], [0], [shape[src.dim]], [1], [])
            emit.typed(x, [emit.attr([-1] * len(shape))], dst_attr, shape)
        x.set_type(dst_type)
        return x


class SToSStaticReshard(_StaticReshard):
    """S(i) -> S(j), i != j: all_gather (padded to even chunks when uneven) + slice own chunk.

    Bytes received per rank: (n-1) * ceil(D_i/n) * (other dims), (n-1)/n * S when even, n times
    an all_to_all's (n-1)/n^2 * S, which has no CPU kernel (Paddle's SToSReshardFunction uses it
    and also reshapes as if every chunk were equal)."""

    def covers(self, src, dst):
        return isinstance(src, Shard) and isinstance(dst, Shard) and src.dim != dst.dim

    def even_goes_to_paddle(self, src, dst):
        return True  # Paddle's all_to_all runs on NCCL for even shapes

    def _emit(self, emit, src, dst, src_attr, dst_attr, value, dst_type):
        shape = _check_shape(type(self).__name__, value, src_attr, dst_attr)
        mesh = src_attr.process_mesh
        n, k = len(mesh.process_ids), _mesh_index(mesh)
        x, padded = _gather(emit, src, src_attr, value, shape)
        dst_spec = _spec(shape, n, dst)
        offset, length = dst_spec.local_slices((k,))[dst.dim]
        axes, starts, ends = [dst.dim], [offset], [offset + length]
        if padded:  # drop the padding and keep this rank's chunk of dim j, in one slice
            axes, starts, ends = axes + [src.dim], starts + [0], ends + [shape[src.dim]]
        out = paddle._C_ops.slice(x, axes, starts, ends, [1] * len(axes), [])
        return _finish(emit, out, emit.attr([-1] * len(shape)), dst_attr, dst_type, shape,
                       dst_spec.local_shape((k,)))


class PToSStaticReshard(_StaticReshard):
    """P(op) -> S(j): all_reduce + slice own chunk (avg: sum then / n).

    Bytes received per rank: a ring all_reduce's 2(n-1)/n * S, twice a reduce_scatter's
    (n-1)/n * S, which has no CPU kernel. Uneven chunks slice by their real size (Paddle pads)."""

    def covers(self, src, dst):
        return isinstance(src, Partial) and isinstance(dst, Shard)

    def even_goes_to_paddle(self, src, dst):
        return src.op == "sum"  # reduce_scatter(sum) on NCCL; other reduce types have no function

    def _emit(self, emit, src, dst, src_attr, dst_attr, value, dst_type):
        shape = _check_shape(type(self).__name__, value, src_attr, dst_attr)
        mesh = src_attr.process_mesh
        n, k = len(mesh.process_ids), _mesh_index(mesh)
        rep = emit.attr([-1] * len(shape))
        if n == 1:  # one rank: its partial value is the value
            x = emit.typed(paddle._C_ops.assign(value), [src_attr], rep, shape)
        else:
            reduce = "sum" if src.op == "avg" else src.op
            reduce_type = getattr(paddle.base.core.ReduceType, {v: k_ for k_, v in _REDUCE_OPS.items()}[reduce])
            x = emit.typed(paddle._C_ops.all_reduce(value, _group(mesh).id, int(reduce_type)),
                           [src_attr], rep, shape)
            if src.op == "avg":
                x = emit.typed(paddle._C_ops.scale(x, 1.0 / n, 0.0, True), [rep], rep, shape)
        dst_spec = _spec(shape, n, dst)
        offset, length = dst_spec.local_slices((k,))[dst.dim]
        out = paddle._C_ops.slice(x, [dst.dim], [offset], [offset + length], [1], [])
        return _finish(emit, out, rep, dst_attr, dst_type, shape, dst_spec.local_shape((k,)))


def _finish(emit, out, operand_attr, dst_attr, dst_type, shape, local_shape):
    """Type the last op as Paddle's ``dst_type`` says, with this rank's real local shape (Paddle's
    own type gives every rank the ceil chunk, which is wrong for the last ranks when uneven)."""
    emit.typed(out, [operand_attr], dst_attr, shape, local_shape)
    if list(out._local_shape) == list(dst_type._local_shape):
        out.set_type(dst_type)
    return out


def _place():
    return paddle.framework._current_expected_place()


def _is_float(value) -> bool:
    return str(value.dtype).split(".")[-1].lower() in ("float16", "bfloat16", "float32", "float64")


# -- install ---------------------------------------------------------------------------------
#: the functions :func:`install_static_reshard` puts first, in this order.
STATIC_FUNCTIONS = (SToPStaticReshard, RToPStaticReshard, SToSStaticReshard, PToSStaticReshard,
                    SToRStaticReshard)


def _registry() -> list:

    funcs = static_reshard_funcs()
    if not funcs:  # Paddle fills the list when its register module is imported
        # stays here: importing it registers Paddle's reshard functions, wanted only when the list is empty
        import paddle.distributed.auto_parallel.static.reshard_funcs.reshard_func_register  # noqa: F401

        funcs = static_reshard_funcs()
    return funcs


def installed_static_functions() -> list:
    """paddle-ext's functions currently in Paddle's list (empty when not installed)."""
    return [f for f in _registry() if isinstance(f, _StaticReshard)]


def install_static_reshard() -> bool:
    """Put paddle-ext's static ReshardFunctions at the front of Paddle's registry (idempotent).

    Returns True if this call installed them, False if they already were first.
    """
    funcs = _registry()
    ours = [cls() for cls in STATIC_FUNCTIONS]
    if [type(f) for f in funcs[:len(ours)]] == list(STATIC_FUNCTIONS):
        return False
    uninstall_static_reshard()
    funcs[0:0] = ours
    return True


def uninstall_static_reshard() -> bool:
    """Remove paddle-ext's functions from Paddle's registry; returns True if any were there."""
    funcs = _registry()
    before = len(funcs)
    funcs[:] = [f for f in funcs if not isinstance(f, _StaticReshard)]
    return len(funcs) != before


def is_static_reshard_installed() -> bool:
    return bool(installed_static_functions())


# -- bytes -----------------------------------------------------------------------------------
def static_reshard_bytes(src: DistSpec, dst: DistSpec, itemsize: int = 4) -> int:
    """Bytes one rank receives (maximum over ranks) when a static function runs ``src -> dst``.

    ``src`` and ``dst`` are 1-D-mesh layouts of the same shape; all_reduce is counted as a ring
    all-reduce (reduce-scatter + all-gather), as the planner counts it.

    >>> from paddle_ext.placements import DistSpec
    >>> static_reshard_bytes(DistSpec((4, 6), (2,), "[S(0)]"), DistSpec((4, 6), (2,), "[S(1)]"))
    48
    >>> static_reshard_bytes(DistSpec((4, 6), (2,), "[P(sum)]"), DistSpec((4, 6), (2,), "[S(0)]"))
    96
    >>> static_reshard_bytes(DistSpec((4, 6), (2,), "[S(0)]"), DistSpec((4, 6), (2,), "[P(sum)]"))
    0
    """
    if len(src.mesh_shape) != 1 or src.mesh_shape != dst.mesh_shape or src.shape != dst.shape:
        raise ReshardPlanError(
            f"static_reshard_bytes: {src} -> {dst}: paddle-ext's static functions act on one 1-D mesh "
            f"and one shape; give two specs with the same shape and the same 1-D mesh")
    (a,), (b,), n = src.placements, dst.placements, src.mesh_shape[0]
    numel = math.prod(src.shape)
    if isinstance(b, Partial) and isinstance(a, (Shard, Replicate)):
        return 0
    if isinstance(a, Shard) and (isinstance(b, Replicate) or (isinstance(b, Shard) and a.dim != b.dim)):
        if n == 1:
            return 0
        chunk = math.ceil(src.shape[a.dim] / n) if src.shape[a.dim] else 0
        return (n - 1) * chunk * (numel // src.shape[a.dim] if src.shape[a.dim] else 0) * itemsize
    if isinstance(a, Partial) and isinstance(b, Shard):
        if n == 1:
            return 0
        mine = math.ceil(numel / n)
        return ((n - 1) * mine + (numel - mine)) * itemsize
    raise ReshardPlanError(
        f"static_reshard_bytes: {format_placements(src.placements)} -> {format_placements(dst.placements)} "
        f"is not one of paddle-ext's static functions (S->P, R->P, S(i)->S(j), P->S, S->R); "
        f"Paddle's own function runs it")


__all__ = ["CALLS", "PToSStaticReshard", "RToPStaticReshard", "STATIC_FUNCTIONS", "SToPStaticReshard",
           "SToRStaticReshard", "SToSStaticReshard", "install_static_reshard", "installed_static_functions",
           "is_static_reshard_installed", "static_reshard_bytes", "uninstall_static_reshard"]
