"""The fast path of a repeated reshard: one dict lookup, then the cached plan's collectives.

A training step calls ``dist.reshard`` with the same request again and again. The first call with a
**plan key** (source mesh, placements, global shape, dtype, target mesh and placements, whether a
gradient is needed, and the process state: parallel environment, backend, prepared groups) takes
the full path: the request converted and validated once, with its named errors, the routing
decision of :func:`.route.route` (Paddle's own reshard, a local mesh reshape, or paddle-ext's plan)
and the plan. Its outcome is
cached as a runner; the next call with the same key costs one key, one lookup and what the runner
does:

* **to Paddle**: Paddle's ``dist.reshard`` (hand-back decided from the key, nothing converted);
* **mesh reshape** (same ranks, another mesh shape, every rank keeping its slice): a local
  relabel (``compat.ports.mesh_reshape``), in every process state;
* **slice** (``R -> S(d)``, any plan of one local slice): a copy of this rank's slice, no
  communication;
* **gather** (``S(0) -> R`` on a 1-D mesh that is the world or a prepared group, equal shards):
  one gloo ``all_gather`` straight into the output;
* **all_reduce** (``P -> R`` there): a copy and one gloo ``all_reduce``;
* **all-to-all / reduce-scatter** (``S(i) -> S(j)``, ``P -> S(j)`` there, 2 ranks): the packed
  block the peer needs traded for mine by a send and a recv, received into the output; below
  :data:`GATHER_BELOW` bytes one all_gather instead (``S(0) -> S(j)`` on any number of ranks:
  the whole shards, then this rank's block; see :mod:`.fast_exchange`);
* otherwise the cached plan through the per-rank executor, without planning or validation again.

``check=True`` (``paddle_ext.reshard``'s default) keeps the cross-rank check on every call, at the
cost of one all_gather of 19 int64 per rank (the request's digest is cached): a call whose key
differs between ranks raises the same named error on every rank before any data moves.
``dist.reshard`` after ``install()`` has ``check=False``, as before. The debug switch
(``PADDLE_EXT_DEBUG=1`` in the environment, or :func:`set_debug` / ``paddle_ext.debug()``) sends
every call through the full path with the cross-rank check, for both. A call with ``stats`` takes
the full path too (it reports the plan).
"""
from __future__ import annotations

import os

from ..compat.fixes.outside_mesh_hint import watch_mesh
from ..compat.ports.convert import to_paddle_placements
from ..compat.ports.fast_tensor import NativeCall, ops as _ops
from ..compat.ports.mesh_reshape import local_mesh_reshape, reshape_placements
from ..compat.ports.views import require_writable_views
from ..placements import Partial, Replicate, Shard
from . import dygraph
from .layout import Geometry, coord_in, relative
from .paddle_backend import GATHER_DTYPES, PaddleBackend
from .fast_exchange import GATHER_BELOW, exchange_runner
from .per_rank import execute
from .planner import plan_reshard
from .route import GROUPS, NATIVE_LISTENERS, SAVED, even, group_for, note_no_parallel_env, route

DEBUG = [os.environ.get("PADDLE_EXT_DEBUG", "0") not in ("", "0")]
LIMIT = 4096            # entries; the cache is emptied when full (every rank alike)
_CACHE: dict = {}
_BACKEND: dict = {}
_MESHES: dict = {}


def set_debug(on: bool = True) -> bool:
    """Full checks on every call (``True``) or the cached fast path (``False``); returns the old value."""
    old, DEBUG[0] = DEBUG[0], bool(on)
    return old


def clear() -> None:
    """Forget every cached plan (install/uninstall do; a test may)."""
    _CACHE.clear()


def _backend(dist):
    """The world's backend, asked once per parallel environment (and per ``get_backend``
    function: a test double answers for itself); None before ``init_parallel_env()``."""
    if not dist.is_initialized():
        _BACKEND.clear()   # a later init_parallel_env() is asked again
        return None
    fn = dist.get_backend
    name = _BACKEND.get(fn)
    if name is None:
        name = _BACKEND[fn] = str(fn())
    return name


def _mesh_key(mesh):
    """(ranks, shape) of a target ProcessMesh, remembered per mesh object (a step passes the same
    mesh again and again; the entry holds the mesh, so its id is not reused meanwhile)."""
    known = _MESHES.get(id(mesh))
    if known is not None and known[0] is mesh:
        return known[1]
    if len(_MESHES) >= 256:
        _MESHES.clear()
    key = (tuple(mesh.process_ids), tuple(mesh.shape))
    _MESHES[id(mesh)] = (mesh, key)
    return key


def _key(o, installed: bool, x, mesh, placements, backend):
    """The plan key: hashable, equal for equal requests in the same process state (``backend``:
    :func:`_backend`'s answer).

    Compiled (:data:`~paddle_ext.compat.native.fast_key.RESHARD_KEY` loaded, and the target a
    ProcessMesh with Paddle's placements): ``(installed, request, grad enabled, backend, groups)``,
    ``request`` the ``bytes`` of the source (mesh ranks and shape, global dims, dtype, placements),
    the target mesh and placements and ``x.stop_gradient``, read in C++ in one call.

    Else a tuple of the same facts read in Python: the source mesh ``None`` when it has the
    target's ranks and shape (one C++ compare), the placements string Paddle caches on ``x``, the
    shape, the dtype; the target mesh's ranks and shape, the target placements as Paddle's objects
    (hashed and compared by kind, dim, split factor and reduce type)."""
    compiled = o.compiled_key[0]
    if compiled is not None:
        request = compiled(x, mesh, placements)   # TypeError for a non-DistTensor: the full path names it
        if request is not None:
            return installed, request, o.grad_enabled(), backend, len(GROUPS)
    sm = x.process_mesh
    source = (None if o.same_mesh(sm, mesh) else (tuple(sm.process_ids), tuple(sm.shape)),
              o.placements_text(x), tuple(x.shape), id(x.dtype) if o.dtype_by_id else o.dtype_code(x))
    return (installed, source, _mesh_key(mesh), tuple(placements), x.stop_gradient, o.grad_enabled(),
            backend, len(GROUPS))


def _lookup(o, installed: bool, x, mesh, placements):
    """``(key, cached runner or None)``; ``(None, None)`` when ``x``/``mesh``/``placements`` are
    not what a key is made of (the full path names what is wrong)."""
    try:
        key = _key(o, installed, x, mesh, placements, _backend(o.dist))
        return key, _CACHE.get(key)
    except (AttributeError, TypeError):   # not a DistTensor / ProcessMesh, an unhashable placement
        return None, None


def reshard(x, mesh, placements, *, check: bool = True, stats: dict | None = None):
    """``paddle_ext.reshard``: the cached runner of this call's key, else the full path
    (:func:`.dygraph.reshard`), whose outcome is then cached."""
    if stats is not None or DEBUG[0]:
        return dygraph.reshard(x, mesh, placements, check=check or DEBUG[0], stats=stats)
    o = _ops()
    key, entry = _lookup(o, False, x, mesh, placements)
    if entry is None:
        if key is None:
            return dygraph.reshard(x, mesh, placements, check=check)
        entry = _build(o, key, x, mesh, placements)
    return entry(x, mesh, placements, check)


def installed(original, check: bool, x, mesh, placements):
    """``dist.reshard`` after ``install()``: Paddle's ``original`` for static graphs and what
    paddle-ext cannot express, else as :func:`reshard` (``check`` as installed).

    A call handed back to Paddle is decided in as few steps as the state allows: without a
    process group, within one mesh, before any key (one C++ mesh compare); else from the key,
    whose cached decision is :data:`TO_PADDLE`. With the compiled key loaded, the key is built
    here (the tuple of :func:`_key`, which a test holds it to) and a non-DistTensor is the one
    that key refuses."""
    o = _O[0] if _O else _first_ops()
    compiled = o.compiled_key[0]
    if compiled is None or DEBUG[0]:
        return _installed(o, original, check, x, mesh, placements)
    grad_state = o.compiled_grad_state[0]
    if grad_state is None:   # not loaded: Paddle's two Python tests
        grad = o.grad_enabled() if o.in_dygraph() else None
    else:
        grad = grad_state()   # None outside dygraph, else whether grad is on
    if grad is None:
        return original(x, mesh, placements)
    dist = o.dist
    if dist.is_initialized():
        backend = _BACKEND.get(dist.get_backend) or _backend(dist)
    else:
        # no process group: every reshard within one mesh goes to Paddle (route.to_paddle_first),
        # decided before any key is built; a change of mesh takes the key (it may be refused)
        if _world(dist) > 1 and o.compiled_same_mesh[0](x, mesh):   # False for a non-DistTensor
            return _no_parallel_env(original, x, mesh, placements)
        backend = _backend(dist)
    try:
        request = compiled(x, mesh, placements)
    except TypeError:   # not a DistTensor: Paddle's own function answers
        return original(x, mesh, placements)
    if request is None:   # a target the compiled key does not read: the Python key and the full path
        return _installed(o, original, check, x, mesh, placements)
    key = (True, request, grad, backend, len(GROUPS))
    entry = _CACHE.get(key)
    if entry is TO_PADDLE:
        return original(x, mesh, placements if placements.__class__ is list else list(placements))
    if entry is None:
        entry = _first_call(o, key, x, mesh, placements)
    return entry(x, mesh, placements, check)


def _installed(o, original, check: bool, x, mesh, placements):
    """:func:`installed` with the Python key (the compiled one not loaded, or a target it does
    not read) or the debug switch on."""
    if not getattr(x, "is_dist", _no)() or not o.in_dygraph():
        return original(x, mesh, placements)
    if DEBUG[0]:
        return dygraph.reshard(x, mesh, placements, check=True, installed=True)
    dist = o.dist
    if not dist.is_initialized() and _world(dist) > 1 and o.same_mesh(x.process_mesh, mesh):
        return _no_parallel_env(original, x, mesh, placements)   # as in installed()
    key, entry = _lookup(o, True, x, mesh, placements)
    if entry is TO_PADDLE:
        return original(x, mesh, placements if placements.__class__ is list else list(placements))
    if entry is None:
        if key is None:
            return dygraph.reshard(x, mesh, placements, check=check, installed=True)
        entry = _first_call(o, key, x, mesh, placements)
    return entry(x, mesh, placements, check)


def _no_parallel_env(original, x, mesh, placements):
    """Paddle's reshard without a process group (within one mesh), with the one log line."""
    if not _NOTED:   # note_once, asked once
        note_no_parallel_env()
        _NOTED.append(True)
    return original(x, mesh, placements if placements.__class__ is list else list(placements))


def _first_call(o, key, x, mesh, placements):
    """A key's first call after ``install()``: the full path's decision, cached."""
    if o.dist.get_rank() not in mesh.process_ids:
        watch_mesh(mesh)   # a target mesh without this rank gets the one-line hint
    return _build(o, key, x, mesh, placements)


_O: list = []        # ops(), once built
_NOTED: list = []    # the no-parallel-env line logged
_WORLD: dict = {}    # the world size before init_parallel_env(), per get_world_size function


def _first_ops():
    _O.append(_ops())
    return _O[0]


def _world(dist) -> int:
    """The world size without a process group: what Paddle's ``ParallelEnv`` read from the
    environment once (asked once per ``get_world_size`` function: a test double answers for itself)."""
    fn = dist.get_world_size
    n = _WORLD.get(fn)
    if n is None:
        n = _WORLD[fn] = fn()
    return n


class _ToPaddle:
    """The cached decision "Paddle's own reshard serves this key" (``entry(x, mesh, placements,
    check)`` as every runner; :func:`installed` calls Paddle's function itself when it finds it)."""

    __slots__ = ()

    def __call__(self, x, mesh, placements, check):
        return _original(_ops())(x, mesh, placements if placements.__class__ is list else list(placements))


TO_PADDLE = _ToPaddle()


def _no():
    return False


def _store(key, entry):
    if len(_CACHE) >= LIMIT:
        _CACHE.clear()
    _CACHE[key] = entry
    return entry


def _original(o):
    return SAVED.get("dist") or o.dist.reshard


def _build(o, key, x, mesh, placements):
    """The full path's decision for ``key`` (named errors raised, nothing cached then), cached."""
    kind, specs = route(o.paddle, x, mesh, placements, installed=key[0])
    if kind == "paddle":
        return _store(key, TO_PADDLE)
    if kind == "reshape":
        exact = reshape_placements(specs[0], specs[1])
        return _store(key, lambda x, mesh, placements, check: local_mesh_reshape(x, mesh, *exact))
    src, dst = specs[0], specs[1]
    itemsize = x.element_size()
    checker = _Checker(o, x, specs)

    original = _original(o)   # install()/uninstall empty the cache: a runner never outlives it
    checks = kind == "native"

    def native(x, mesh, placements, check):
        if check and checks:
            checker()
        if NATIVE_LISTENERS:
            for listener in NATIVE_LISTENERS:
                listener(src, dst, itemsize)
        return original(x, mesh, placements if placements.__class__ is list else list(placements))

    if kind != "ext":
        return _store(key, native)
    values = _runner(o, x, specs)
    differentiable = not x.stop_gradient and o.grad_enabled()

    def ext(x, mesh, placements, check):
        if check:
            checker()
        if differentiable:
            return dygraph.differentiable(x, mesh, values)
        return values(x, mesh)

    return _store(key, ext)


class _Checker:
    """The cross-rank request check of one key, its digest and buffers made on first use."""

    def __init__(self, o, x, specs):
        self.o, self.x, self.specs, self.state = o, x, specs, None

    def __call__(self):
        paddle = self.o.paddle
        if self.state is None:
            src, dst, s_ranks, d_ranks = self.specs
            where = dygraph.check_group(paddle, s_ranks, d_ranks)
            if where is None:
                self.state = ()
                return
            mine = dygraph.request_meta(self.x, *self.specs)
            self.state = (paddle.to_tensor(mine, dtype="int64"),
                          paddle.empty([len(where[0]) * len(mine)], dtype="int64"), where, mine,
                          (self.x, dst, d_ranks))
            self.x = None   # the key holds what the message needs; do not keep the tensor alive
        if self.state:
            dygraph.check_meta(paddle, *self.state)


def _runner(o, x, specs):
    """``values(x, mesh) -> DistTensor`` for paddle-ext's plan of ``specs`` on this rank."""
    src, dst, s_ranks, d_ranks = specs
    plan = plan_reshard(src, dst, src_ranks=s_ranks, dst_ranks=d_ranks, itemsize=x.element_size(),
                        dtype=str(x.dtype).replace("paddle.", ""))
    dist = o.dist
    rank = dist.get_rank()
    exact = to_paddle_placements(dst.placements)
    members = sorted(set(s_ranks) | set(d_ranks))
    group = group_for(members)
    world = members if group is not None else list(range(dist.get_world_size()))
    if len(plan) == 1 and s_ranks == d_ranks and rank in s_ranks:
        if plan[0].collective == "slice":
            special = _slice(o, x, src, dst, rank, s_ranks, exact)
        elif len(src.mesh_shape) == 1 and list(s_ranks) == world and len(world) > 1 and even(src) \
                and even(dst) and all(src.shape):
            special = _collective(o, x, plan[0].collective, src, dst, rank, s_ranks, group, exact)
        else:
            special = None
        if special is not None:
            return special
    return _plan_runner(o, x, plan, specs, rank, world, group, exact)


def _slice(o, x, src, dst, rank, ranks, exact):
    """R -> S(d) (a plan of one local slice): a copy of this rank's slice, no communication."""
    c = coord_in(ranks, src.mesh_shape, rank)
    rel = relative(dst.local_slices(c), src.local_slices(c))
    cut = [(d, at, n) for d, ((at, n), size) in enumerate(zip(rel, o.local(x).shape)) if n != size]
    if len(cut) != 1:
        return None
    (axis, start, length), = cut
    take, build, dims = (o.take_rows if axis == 0 else o.take), o.dist_tensor, src.shape
    evenly = even(dst) and len(dst.mesh_shape) == 1

    def sliced(x, mesh):
        return build(take(o.local(x), axis, start, start + length), dims, mesh, exact, evenly)

    return sliced


def _collective(o, x, kind, src, dst, rank, ranks, group, exact):
    """Runners with no per-call layout work for one-step plans on a 1-D mesh that is the world
    or a prepared group, evenly divided (exchanges: :mod:`.fast_exchange`); None for the others."""
    a, b, dims = src.placements[0], dst.placements[0], src.shape
    gathers = str(x.dtype).replace("paddle.", "") in GATHER_DTYPES
    gloo = (_backend(o.dist) or "").lower() == "gloo"
    if kind == "all_gather" and a == Shard(0) and b == Replicate() and gathers:
        return _gather(o, x, dims, group, exact, gloo)
    if kind == "all_reduce" and isinstance(a, Partial) and b == Replicate():
        return _all_reduce(o, x, a.op, len(ranks), dims, group, exact, gloo)
    if kind in ("all_to_all", "reduce_scatter"):
        return exchange_runner(o, x, kind, a, b, ranks.index(rank), ranks, group, dims, exact, gathers, gloo)
    return None


def _gather(o, x, dims, group, exact, gloo: bool):
    """``S(0) -> R``: one gloo all_gather of the dim-0 shards straight into the output (on gloo,
    CPU: one native call, :class:`~paddle_ext.compat.ports.fast_tensor.NativeCall`)."""
    gather, build, itemsize = o.dist.stream.all_gather, o.dist_tensor, x.element_size()
    native = NativeCall(o, x, gloo, group, dims, lambda out, mesh: build(out, dims, mesh, exact, True))

    def gathered(x, mesh):
        y = native.result(mesh, "all_gather_into", x)
        if y is not None:
            return y
        local = o.local(x)
        out = o.output(dims, local.dtype, itemsize)
        gather(out, local.contiguous(), group=group)
        return build(out, dims, mesh, exact, True)

    return gathered


def _all_reduce(o, x, op, n, dims, group, exact, gloo: bool):
    """``P -> R``: a copy of the source (never written; into huge pages when large) and one gloo
    all_reduce (avg: then / n); on gloo, CPU: one native all_reduce out of place (no copy)."""
    dist, build, copy_into, itemsize = o.dist, o.dist_tensor, o.copy_into, x.element_size()
    red = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX,
           "min": dist.ReduceOp.MIN}[op]
    reduce_type = {"sum": 0, "avg": 0, "max": 1, "min": 2}[op]   # phi::ReduceType, as GlooCommContext reads it
    scale = (lambda y: y / n) if op == "avg" else (lambda y: y)
    native = NativeCall(o, x, gloo, group, dims, lambda out, mesh: build(scale(out), dims, mesh, exact, True),
                        reuse=op != "avg")   # an avg result is a new tensor, not the output written

    def reduced(x, mesh):
        out = native.result(mesh, "all_reduce_into", x, reduce_type)
        if out is not None:
            return out
        local = o.local(x)
        y = o.output(dims, local.dtype, itemsize)
        copy_into(local, y)
        dist.all_reduce(y, op=red, group=group)
        return build(scale(y), dims, mesh, exact, True)

    return reduced


def _plan_runner(o, x, plan, specs, rank, world, group, exact):
    require_writable_views()   # every executor builds outputs in slices of themselves
    src, dst, s_ranks, d_ranks = specs
    geo = Geometry(src.shape, src.mesh_shape, s_ranks, dst.mesh_shape, d_ranks)
    paddle, build = o.paddle, o.dist_tensor
    dtype, ndim = x.dtype, len(src.shape)
    like = paddle.empty([0], dtype=dtype)
    holds = rank in s_ranks

    def planned(x, mesh):
        be = PaddleBackend(paddle, rank, world, like, None, group=group)
        out = execute(be, geo, plan, o.local(x) if holds else None)  # every rank walks the rounds
        if out is None:
            out = paddle.empty([0] * ndim, dtype=dtype)
        return build(out, geo.shape, mesh, exact, False)

    return planned


__all__ = ["DEBUG", "GATHER_BELOW", "LIMIT", "clear", "installed", "reshard", "set_debug"]
