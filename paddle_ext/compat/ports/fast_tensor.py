"""The few Paddle primitives a repeated reshard needs, at the cost of the C++ call behind them.

The reshard fast path (:mod:`paddle_ext.reshard.fast`) runs a cached plan on every repeated
``dist.reshard``. Paddle's public Python spellings of its steps cost more than a small reshard
itself (measured on Paddle 3.3.1 CPU, 32x32 float32): ``paddle.empty`` ~9 us against ~2.5 us for
the op behind it, ``t[a:b]`` ~6 us against ~3 us, ``paddle.Tensor(local, dims=..., ...)`` ~23 us
(its Python ``__init__`` wrapper resolves the device string on every call) against ~2-4 us for
``dtensor_from_local``. :func:`ops` hands out the C++ entry points once, so the fast path pays only
for what it runs. Every function keeps the public API's result: a fresh tensor, the same dtype,
place, global shape and placements.
"""
from __future__ import annotations

from math import prod
from operator import attrgetter
from types import SimpleNamespace

from ..native import fast_key
from ..version import require_paddle
from .buffers import MIN_BYTES, fresh

_OPS: list = []


def _build():
    paddle = require_paddle("paddle_ext.reshard (fast path)")
    core, c_ops = paddle.base.core, paddle._C_ops
    place = paddle.framework._get_paddle_place(paddle.framework._current_expected_place())
    init = getattr(paddle, "original_init", None) or paddle.Tensor.__init__
    from_local = core.dtensor_from_local

    def empty(shape, dtype):
        return c_ops.empty(list(shape), dtype, place)

    def view(x, axis: int, start: int, stop: int):
        """``x[start:stop]`` along ``axis``: a view of ``x`` (strided unless ``axis`` leads)."""
        return c_ops.slice(x, [axis], [start], [stop], [1], [])

    def output(shape, dtype, itemsize: int):
        """A fresh result tensor: ``empty`` when small, else into huge pages (:func:`.buffers.fresh`)."""
        return empty(shape, dtype) if prod(shape) * itemsize < MIN_BYTES else fresh(paddle, shape, dtype)

    def take(x, axis: int, start: int, stop: int):
        """A fresh contiguous copy of ``x[start:stop]`` along ``axis`` (never a view of ``x``)."""
        v = view(x, axis, start, stop)
        return c_ops.assign(v) if v.is_contiguous() else v.contiguous()

    def take_rows(x, axis: int, start: int, stop: int):
        """:func:`take` along the leading axis (``axis`` 0), whose slice is always one dense block."""
        return c_ops.assign(c_ops.slice(x, [0], [start], [stop], [1], []))

    def copy_into(x, out):
        """Write ``x`` into ``out`` (a view of an output) in place: ``paddle.assign(x, output=out)``."""
        c_ops.assign_out_(x, out)

    def dist_tensor(local, dims, mesh, placements, even: bool):
        """A DistTensor from this rank's ``local`` part. ``even``: the global shape is what
        ``dtensor_from_local`` infers (local x mesh size per sharded dim); else ``dims`` is given."""
        if even:
            return from_local(local, mesh, placements)
        out = paddle.Tensor.__new__(paddle.Tensor)
        init(out, local, dims=list(dims), process_mesh=mesh, placements=placements, place=place)
        return out

    probe = paddle.zeros([1])
    # one Python object per dtype (Paddle 3.x's dtypes are enum singletons): its id names the dtype
    # and costs less than the object's hash; else the dtype's value
    dtype_by_id = probe.dtype is paddle.float32 and paddle.ones([2]).dtype is probe.dtype
    return SimpleNamespace(dtype_by_id=dtype_by_id, empty=empty, output=output, view=view, take=take, take_rows=take_rows, copy_into=copy_into,
                           dist_tensor=dist_tensor, local=paddle.Tensor._local_value, grad_enabled=core._has_grad,
                           in_dygraph=paddle.in_dynamic_mode, dist=paddle.distributed, paddle=paddle,
                           placements_text=attrgetter("_placements_str"), dtype_code=attrgetter("dtype.value"),
                           same_mesh=core.ProcessMesh.__eq__, compiled_key=fast_key.RESHARD_KEY,
                           compiled_same_mesh=fast_key.SAME_MESH, compiled_grad_state=fast_key.GRAD_STATE,
                           gloo_native=fast_key.GLOO_NATIVE, is_cpu=lambda t: t.place.is_cpu_place())


def ops() -> SimpleNamespace:
    """``empty(shape, dtype)``, ``output(shape, dtype, itemsize)`` (a fresh result, huge pages when
    large), ``view``/``take``/``take_rows(x, axis, start, stop)``, ``copy_into(x, out)``,
    ``dist_tensor(local, dims, mesh, placements, even)``, ``local(x)`` (a DistTensor's local tensor),
    ``placements_text(x)`` (the placements string Paddle caches on a DistTensor: equal strings, equal
    placements), ``dtype_code(x)`` (an int per dtype; the dtype object's hash costs more), ``dtype_by_id`` (True
    when ``id(x.dtype)`` names the dtype: one object per dtype),
    ``same_mesh(a, b)`` (equal ranks and shape: the C++ compare, without ``ProcessMesh.__eq__``'s
    Python lists), ``compiled_same_mesh`` (a one-item list: the compiled
    :data:`~paddle_ext.compat.native.fast_key.SAME_MESH` once loaded, else None: the same compare
    from a DistTensor and a mesh, without the tensor's Python mesh object), ``compiled_grad_state`` (a
    one-item list: :data:`~paddle_ext.compat.native.fast_key.GRAD_STATE` once loaded, else None: None
    outside dygraph, else whether grad is on, in one call), ``compiled_key`` (a one-item list: the compiled request key
    :data:`~paddle_ext.compat.native.fast_key.RESHARD_KEY` once loaded, else None), ``gloo_native`` (a
    one-item list: the compiled module of :data:`~paddle_ext.compat.native.fast_key.GLOO_NATIVE`
    once loaded, else None),
    ``is_cpu(t)``, ``grad_enabled()``, ``in_dygraph()``, ``dist``, ``paddle`` (built once)."""
    if not _OPS:
        _OPS.append(_build())
    return _OPS[0]


#: the dtypes the one-call gloo runners (:class:`NativeCall`) serve; others take Paddle's collectives
NATIVE_DTYPES = ("float32", "float64", "int32", "int64")


#: results of at most this many bytes are kept for reuse (:meth:`NativeCall.result`): building a
#: DistTensor on a fresh output after a gloo wait costs ~16-29 us a call on this VM (32x32 float32)
KEEP_RESULTS_BELOW = 256 << 10


class NativeCall:
    """A one-collective runner's call into the compiled gloo functions
    (:data:`~paddle_ext.compat.native.fast_key.GLOO_NATIVE`), for CPU tensors on a gloo world:
    ``call(name, local, *args)`` writes the result into an output of ``out_shape`` and returns it,
    or returns None when the runner must use Paddle's collective instead (not built yet, another
    backend or device; a ValueError of the native call, raised before any data moves). The output
    is the previous call's when nothing holds it any more (``sole_owner``: no result, view or
    DistTensor shares it), else a fresh one: on this VM a Paddle op between two gloo collectives
    (a ``paddle.empty``) costs several times its own time.

    ``make(out, mesh) -> DistTensor`` builds the result; :meth:`result` returns it. For a key
    whose results need no gradient (``x`` stops it, or grad is off) and are small, the result is
    written into one of the last two results it returned when nothing else holds that one any more
    (``free_slot``: no Python reference, no tensor on it or its memory, no gradient), else ``make``
    builds one on a fresh output (``reuse=False``: always; ``make`` does not return the output it
    is given). Two, so that ``y = dist.reshard(x, ...)`` in a loop, which still holds the last
    result during the call, reuses the one before it."""

    def __init__(self, o, x, gloo: bool, group, out_shape, make, reuse: bool = True):
        served = gloo and o.is_cpu(x) and str(x.dtype).replace("paddle.", "") in NATIVE_DTYPES
        self.module = o.gloo_native if served else [None]
        self.ring = "0" if group is None else str(group.id)   # a dygraph group's gloo communicator: its id
        self.o, self.out_shape, self.itemsize = o, list(out_shape), x.element_size()
        self.last, self.refused = None, False
        self.make = make
        self.keep = reuse and prod(out_shape) * self.itemsize <= KEEP_RESULTS_BELOW and (
            x.stop_gradient or not o.grad_enabled())
        self.kept, self.meshes, self.next = [], [], 0

    def __call__(self, name, local, *args):
        module = self.module[0]
        if module is None or self.refused:
            return None
        out = self.last
        if out is None or not module.sole_owner(out):   # the caller still holds the last result
            out = self.last = self.o.output(self.out_shape, local.dtype, self.itemsize)
        fn = getattr(module, name)
        try:
            fn(local, out, self.ring, *args)
        except ValueError:   # a strided local value: once more with a contiguous copy
            try:
                fn(local.contiguous(), out, self.ring, *args)
            except ValueError:   # no gloo communicator for this group: Paddle's collective from now on
                self.refused = True
                return None
        return out

    def result(self, mesh, name, x, *args):
        """The DistTensor of ``name`` on the DistTensor ``x`` (the native call reads its local
        value), on ``mesh``; None when Paddle's collective must serve (as :meth:`__call__`)."""
        module, kept = self.module[0], self.kept
        if module is None or self.refused or not self.keep:
            out = self(name, self.o.local(x), *args)
            return None if out is None else self.make(out, mesh)
        i = module.free_slot(kept) if kept else -1
        if i >= 0 and self.meshes[i] is mesh:
            try:
                getattr(module, name)(x, kept[i], self.ring, *args)
                return kept[i]
            except ValueError:   # a strided local value, or no communicator: the general call decides
                pass
        out = self(name, self.o.local(x), *args)
        if out is None:
            return None
        self.last = None   # the DistTensor owns the output now: free when it is
        made = self.make(out, mesh)
        if len(kept) < 2:
            kept.append(made)
            self.meshes.append(mesh)
        else:
            kept[self.next], self.meshes[self.next] = made, mesh
            self.next = 1 - self.next
        return made


__all__ = ["KEEP_RESULTS_BELOW", "NATIVE_DTYPES", "NativeCall", "ops"]
