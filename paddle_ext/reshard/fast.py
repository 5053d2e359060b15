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
  block the peer needs traded for mine, received into the output (below :data:`GATHER_BELOW`
  bytes by one all_gather of both blocks, else by a send and a recv);
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
from ..compat.ports.buffers import MIN_BYTES, fresh
from ..compat.ports.convert import to_paddle_placements
from ..compat.ports.fast_tensor import ops as _ops
from ..compat.ports.mesh_reshape import local_mesh_reshape, reshape_placements
from ..compat.ports.views import require_writable_views
from ..placements import Partial, Replicate, Shard
from . import dygraph
from .layout import Geometry, coord_in, relative
from .paddle_backend import GATHER_DTYPES, PaddleBackend
from .per_rank import execute
from .planner import plan_reshard
from .route import GROUPS, NATIVE_LISTENERS, SAVED, even, group_for, note_no_parallel_env, route

DEBUG = [os.environ.get("PADDLE_EXT_DEBUG", "0") not in ("", "0")]
LIMIT = 4096            # entries; the cache is emptied when full (every rank alike)
#: on 2 ranks, S(i) -> S(j) and P -> S(j) of fewer bytes (global tensor) than this trade their
#: blocks with one all_gather instead of a send and a recv (measured crossover, docs/reshard.md)
GATHER_BELOW = {2: 0}
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


def _key(o, installed: bool, x, mesh, placements):
    """The plan key: hashable, equal for equal requests in the same process state. The source
    mesh is ``None`` when it has the target's ranks and shape (the common case, one C++ compare);
    the source placements are the string Paddle caches on ``x``; the target ones are the placement
    objects (Paddle's hash and compare by kind, dim, split factor and reduce type), cheaper than
    their reprs. ``key[0]`` is ``installed``, ``key[7]`` whether no gradient is needed."""
    sm = x.process_mesh
    return (installed, None if o.same_mesh(sm, mesh) else (tuple(sm.process_ids), tuple(sm.shape)),
            o.placements_text(x), _mesh_key(mesh), tuple(placements), tuple(x.shape),
            id(x.dtype) if o.dtype_by_id else o.dtype_code(x), x.stop_gradient or not o.grad_enabled(),
            _backend(o.dist), len(GROUPS))


def _lookup(o, installed: bool, x, mesh, placements):
    """``(key, cached runner or None)``; ``(None, None)`` when ``x``/``mesh``/``placements`` are
    not what a key is made of (the full path names what is wrong)."""
    try:
        key = _key(o, installed, x, mesh, placements)
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
    paddle-ext cannot express, else as :func:`reshard` (``check`` as installed)."""
    o = _ops()
    if not o.in_dygraph() or not getattr(x, "is_dist", _no)():
        return original(x, mesh, placements)
    if DEBUG[0]:
        return dygraph.reshard(x, mesh, placements, check=True, installed=True)
    dist = o.dist
    if not dist.is_initialized() and dist.get_world_size() > 1:
        # no process group: every reshard within one mesh goes to Paddle (route.to_paddle_first),
        # decided before any key is built; a change of mesh takes the key (it may be refused)
        sm = x.process_mesh
        if sm.process_ids == mesh.process_ids and sm.shape == mesh.shape:
            note_no_parallel_env()
            return _original(o)(x, mesh, list(placements))
    key, entry = _lookup(o, True, x, mesh, placements)
    if entry is None:
        if key is None:
            return dygraph.reshard(x, mesh, placements, check=check, installed=True)
        if dist.get_rank() not in mesh.process_ids:
            watch_mesh(mesh)   # a first call: a target mesh without this rank gets the one-line hint
        entry = _build(o, key, x, mesh, placements)
    return entry(x, mesh, placements, check)


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
        original = _original(o)
        return _store(key, lambda x, mesh, placements, check: original(
            x, mesh, placements if placements.__class__ is list else list(placements)))
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
    differentiable = not key[7]

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
    or a prepared group, evenly divided; None for the others."""
    a, b, n, dims = src.placements[0], dst.placements[0], len(ranks), src.shape
    nbytes = _numel(dims) * x.element_size()
    gathers = str(x.dtype).replace("paddle.", "") in GATHER_DTYPES
    if kind == "all_gather" and a == Shard(0) and b == Replicate() and gathers:
        return _gather(o, x, dims, group, exact)
    if kind == "all_reduce" and isinstance(a, Partial) and b == Replicate():
        return _all_reduce(o, x, a.op, n, dims, group, exact)
    if n != 2 or kind not in ("all_to_all", "reduce_scatter"):
        return None
    k = ranks.index(rank)
    by_gather = gathers and nbytes < GATHER_BELOW.get(2, 0)
    if kind == "all_to_all" and by_gather and a.dim == 0:
        return _swap_gathered(o, x, b.dim, k, group, dims, exact)
    trade = _pair(o, k, ranks[1 - k], group, by_gather)
    if kind == "all_to_all":
        return _swap(o, x, a.dim, b.dim, k, trade, dims, exact)
    if isinstance(a, Partial) and isinstance(b, Shard):
        return _reduce_swap(o, x, a.op, b.dim, k, trade, dims, exact)
    return None


def _pair(o, k, peer, group, by_gather: bool):
    """``trade(send, into)``: ``send`` goes to the peer, the peer's block of the same shape lands
    in ``into`` (a view of an output, strided or not). Point-to-point (the lower rank sends
    first; gloo's send and recv each wait for the peer), or, below :data:`GATHER_BELOW`, one
    all_gather of both blocks: one round trip instead of two, the same bytes received."""
    dist, view, empty, copy_into = o.dist, o.view, o.empty, o.copy_into
    gather = dist.stream.all_gather

    def by_all_gather(send, into):
        r = send.shape[0]
        both = empty([2 * r] + list(send.shape[1:]), send.dtype)
        gather(both, send, group=group)
        copy_into(view(both, 0, (1 - k) * r, (2 - k) * r), into)

    def by_p2p(send, into):
        buf = into if into.is_contiguous() else empty(into.shape, into.dtype)
        if k == 0:
            dist.send(send, dst=peer, group=group)
            dist.recv(buf, src=peer, group=group)
        else:
            dist.recv(buf, src=peer, group=group)
            dist.send(send, dst=peer, group=group)
        if buf is not into:
            copy_into(buf, into)

    return by_all_gather if by_gather else by_p2p


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _out(o, shape, dtype, itemsize):
    if _numel(shape) * itemsize < MIN_BYTES:
        return o.empty(shape, dtype)
    return fresh(o.paddle, shape, dtype)   # huge pages for large CPU outputs (compat.ports.buffers)


def _gather(o, x, dims, group, exact):
    """``S(0) -> R``: one gloo all_gather of the dim-0 shards straight into the output."""
    gather, build, itemsize = o.dist.stream.all_gather, o.dist_tensor, x.element_size()

    def gathered(x, mesh):
        local = o.local(x)
        out = _out(o, dims, local.dtype, itemsize)
        gather(out, local.contiguous(), group=group)
        return build(out, dims, mesh, exact, True)

    return gathered


def _all_reduce(o, x, op, n, dims, group, exact):
    """``P -> R``: a copy of the source (never written; into huge pages when large) and one gloo
    all_reduce (avg: then / n)."""
    dist, build, copy_into, itemsize = o.dist, o.dist_tensor, o.copy_into, x.element_size()
    red = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX,
           "min": dist.ReduceOp.MIN}[op]

    def reduced(x, mesh):
        local = o.local(x)
        y = _out(o, dims, local.dtype, itemsize)
        copy_into(local, y)
        dist.all_reduce(y, op=red, group=group)
        return build(y / n if op == "avg" else y, dims, mesh, exact, True)

    return reduced


#: blocks of at most this many bytes are packed into a send buffer kept by the cached runner
#: (gloo sends a buffer it has sent before faster than a fresh one: per call, 2 ranks, 32x32
#: float32, one all_gather from a kept buffer 66 us, from a fresh copy 117-176 us)
KEEP_SEND_BELOW = 256 << 10


def _packer(o, block_shape, dtype, nbytes: int):
    """``pack(x, axis, start, stop) -> contiguous tensor`` holding ``x[start:stop]`` along
    ``axis``: a copy into one buffer kept for the runner's life (small blocks: the buffer is sent
    and never handed out), else a fresh copy (``take``)."""
    copy_into, empty, view = o.copy_into, o.empty, o.view
    if nbytes > KEEP_SEND_BELOW:
        return o.take
    kept = []

    def pack(x, axis, start, stop):
        if not kept:
            kept.append(empty(block_shape, dtype))
        copy_into(view(x, axis, start, stop), kept[0])
        return kept[0]

    return pack


def _swap(o, x, src_dim, dst_dim, k, trade, dims, exact):
    """``S(i) -> S(j)`` on 2 ranks: my own block into the output, the peer's block packed and
    traded for mine, received straight into the output."""
    require_writable_views()   # the output is built in slices of itself
    view, copy_into, build = o.view, o.copy_into, o.dist_tensor
    itemsize = x.element_size()
    a, b = dims[src_dim] // 2, dims[dst_dim] // 2
    shape = list(dims)
    shape[dst_dim] = b
    block = list(shape)
    block[src_dim] = a
    pack = _packer(o, block, x.dtype, _numel(block) * itemsize)

    def swapped(x, mesh):
        local = o.local(x)
        out = _out(o, shape, local.dtype, itemsize)
        copy_into(view(local, dst_dim, k * b, (k + 1) * b), view(out, src_dim, k * a, (k + 1) * a))
        trade(pack(local, dst_dim, (1 - k) * b, (2 - k) * b), view(out, src_dim, (1 - k) * a, (2 - k) * a))
        return build(out, dims, mesh, exact, True)

    return swapped


def _swap_gathered(o, x, dst_dim, k, group, dims, exact):
    """``S(0) -> S(j)`` on 2 ranks, small tensors: one all_gather straight into the output, each
    rank sending the block its peer keeps (the output's rows from rank r are rank r's block), then
    this rank's own rows overwritten with the block it keeps. One collective instead of a send and
    a recv (each a gloo round trip); the same bytes received."""
    require_writable_views()   # the output is built in slices of itself
    gather, view, copy_into, build = o.dist.stream.all_gather, o.view, o.copy_into, o.dist_tensor
    a, b = dims[0] // 2, dims[dst_dim] // 2
    shape = list(dims)
    shape[dst_dim] = b
    block = list(shape)
    block[0] = a
    pack = _packer(o, block, x.dtype, _numel(block) * x.element_size())

    def swapped(x, mesh):
        local = o.local(x)
        out = o.empty(shape, local.dtype)
        gather(out, pack(local, dst_dim, (1 - k) * b, (2 - k) * b), group=group)
        copy_into(view(local, dst_dim, k * b, (k + 1) * b), view(out, 0, k * a, (k + 1) * a))
        return build(out, dims, mesh, exact, True)

    return swapped


def _reduce_swap(o, x, op, dim, k, trade, dims, exact):
    """``P -> S(d)`` on 2 ranks: trade the part of my partial value the peer keeps for the
    peer's part of mine and reduce mine into the received buffer (as the per-rank executor does)."""
    view, take, paddle, build = o.view, o.take, o.paddle, o.dist_tensor
    half = dims[dim] // 2
    shape = list(dims)
    shape[dim] = half

    def reduced(x, mesh):
        local = o.local(x)
        theirs = view(local, dim, (1 - k) * half, (2 - k) * half)
        theirs = theirs if theirs.is_contiguous() else take(local, dim, (1 - k) * half, (2 - k) * half)
        buf = _out(o, shape, local.dtype, x.element_size())
        trade(theirs, buf)
        mine = view(local, dim, k * half, (k + 1) * half)
        if op in ("sum", "avg"):
            buf.add_(mine)
        else:
            buf.copy_((paddle.maximum if op == "max" else paddle.minimum)(buf, mine))
        return build(buf / 2 if op == "avg" else buf, dims, mesh, exact, True)

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
