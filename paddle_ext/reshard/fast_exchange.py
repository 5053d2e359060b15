"""The 2-rank exchange runners of the reshard fast path: ``S(i) -> S(j)`` and ``P -> S(j)`` on a
1-D mesh, even shards (:func:`exchange_runner`; :mod:`.fast` builds them once per plan key).

Each runner is ``values(x, mesh) -> DistTensor`` with every shape fixed when it is built, so a
call costs the communication, the copies it needs and building the output:

* ``S(0) -> S(j)`` below :data:`GATHER_BELOW` bytes (any number of ranks with an entry): one
  all_gather of the whole shards into a kept buffer and a copy of this rank's block
  (:func:`_gather_slice`);
* ``S(i) -> S(j)`` and ``P -> S(j)`` on 2 ranks otherwise: the block the peer needs traded for
  mine by a send and a recv, received straight into the output (:func:`_pair`).
"""
from __future__ import annotations

from math import prod

from ..compat.ports.fast_tensor import NativeCall
from ..compat.ports.views import require_writable_views
from ..placements import Partial, Shard

#: per world size, the global tensor's size in bytes below which ``S(0) -> S(j)`` takes one
#: all_gather of the whole shards and a slice instead of an exchange of blocks (2 ranks: a send
#: and a recv; more: the per-rank executor's rounds). Measured crossover, docs/reshard.md.
GATHER_BELOW = {2: 1 << 20}


def exchange_runner(o, x, kind, a, b, k, ranks, group, dims, exact, gathers: bool, gloo: bool = False):
    """The runner of a one-step ``S(i) -> S(j)`` (``kind`` "all_to_all") or ``P -> S(j)``
    ("reduce_scatter") plan on ``ranks`` (a 1-D mesh, even shards), ``k`` this rank's index, or
    None when no runner here serves it (the per-rank executor does). ``gloo``: the world's
    backend is gloo (the native gather serves CPU tensors there)."""
    n = len(ranks)
    if kind == "all_to_all" and a.dim == 0 and gathers and prod(dims) * x.element_size() < GATHER_BELOW.get(n, 0):
        return _gather_slice(o, x, b.dim, k, n, group, dims, exact, gloo)
    if n != 2:
        return None
    trade = _pair(o, k, ranks[1 - k], group)
    if kind == "all_to_all":
        return _swap(o, x, a.dim, b.dim, k, trade, dims, exact)
    if isinstance(a, Partial) and isinstance(b, Shard):
        return _reduce_swap(o, x, a.op, b.dim, k, trade, dims, exact)
    return None


def _pair(o, k, peer, group):
    """``trade(send, into)``: ``send`` goes to the peer, the peer's block of the same shape lands
    in ``into`` (a view of an output, strided or not), by a send and a recv (the lower rank sends
    first; gloo's send and recv each wait for the peer). One all_gather of both blocks instead
    was never faster for ``P -> S`` (docs/reshard.md, "crossover")."""
    dist, empty, copy_into = o.dist, o.empty, o.copy_into

    def trade(send, into):
        buf = into if into.is_contiguous() else empty(into.shape, into.dtype)
        if k == 0:
            dist.send(send, dst=peer, group=group)
            dist.recv(buf, src=peer, group=group)
        else:
            dist.recv(buf, src=peer, group=group)
            dist.send(send, dst=peer, group=group)
        if buf is not into:
            copy_into(buf, into)

    return trade


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
    pack = _packer(o, block, x.dtype, prod(block) * itemsize)

    def swapped(x, mesh):
        local = o.local(x)
        out = o.output(shape, local.dtype, itemsize)
        copy_into(view(local, dst_dim, k * b, (k + 1) * b), view(out, src_dim, k * a, (k + 1) * a))
        trade(pack(local, dst_dim, (1 - k) * b, (2 - k) * b), view(out, src_dim, (1 - k) * a, (2 - k) * a))
        return build(out, dims, mesh, exact, True)

    return swapped


def _gather_slice(o, x, dst_dim, k, n, group, dims, exact, gloo: bool = False):
    """``S(0) -> S(j)`` of a small tensor on n ranks: one all_gather of the whole dim-0 shards
    into a receive buffer kept by the runner (the stacked shards are the global tensor), then a
    copy of this rank's block of dim ``j`` as the output. n times the bytes of an all-to-all,
    one collective and one copy: below :data:`GATHER_BELOW` the cheapest way on gloo, where
    every op between two collectives costs more than itself (docs/reshard.md, "crossover").
    On gloo (:class:`~paddle_ext.compat.ports.fast_tensor.NativeCall`) both run in one native call."""
    gather, take, build = o.dist.stream.all_gather, o.take, o.dist_tensor
    b = dims[dst_dim] // n
    out_shape = [d // n if i == dst_dim else d for i, d in enumerate(dims)]
    native = NativeCall(o, x, gloo, group, out_shape, lambda out, mesh: build(out, dims, mesh, exact, True))
    kept = [o.empty(dims, x.dtype)]

    def gathered_slice(x, mesh):
        y = native.result(mesh, "gather_take", x, kept[0], dst_dim, k)
        if y is not None:
            return y
        local = o.local(x)
        gather(kept[0], local.contiguous(), group=group)
        return build(take(kept[0], dst_dim, k * b, (k + 1) * b), dims, mesh, exact, True)

    return gathered_slice


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
        buf = o.output(shape, local.dtype, x.element_size())
        trade(theirs, buf)
        mine = view(local, dim, k * half, (k + 1) * half)
        if op in ("sum", "avg"):
            buf.add_(mine)
        else:
            buf.copy_((paddle.maximum if op == "max" else paddle.minimum)(buf, mine))
        return build(buf / 2 if op == "avg" else buf, dims, mesh, exact, True)

    return reduced


__all__ = ["GATHER_BELOW", "KEEP_SEND_BELOW", "exchange_runner"]
