"""The reshard executor's backend on Paddle dygraph tensors (gloo point-to-point and collectives).

:class:`PaddleBackend` implements :class:`~.backend.ReshardBackend` and its in-place extension:
the per-rank code (:mod:`.per_rank`) runs a plan on a real rank through it, as it runs on
simulated ranks through :class:`~.simulated.NumpyBackend`. Point-to-point ``dist.send`` /
``dist.recv`` (measured faster than gloo's all_gather on this build, and exact for uneven and
empty shards); gloo's ``all_gather`` and ``all_reduce`` where the group is the backend's whole
group. The source tensor is never written: reductions run on a copy.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..compat.ports.buffers import fresh

#: the dtypes gloo's all_gather (GlooCommContext) takes; bfloat16 and bool measured on 2 ranks
GATHER_DTYPES = ("float32", "float64", "float16", "bfloat16", "int32", "int64", "int8", "uint8", "bool")


class PaddleBackend:
    """:class:`~.backend.ReshardBackend` (and :class:`~.backend.InPlaceBackend`) on Paddle
    dygraph tensors: gloo point-to-point, and gloo's collectives over ``group``."""

    in_place = True   # views, recv_into, reduce_into, all_gather_into (backend.InPlaceBackend)

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

    def all_gather_into(self, out, x, members) -> bool:
        """gloo's all_gather of equal shards straight into ``out`` (rank-major slabs); False
        when ``members`` is not this backend's whole group or gloo lacks the dtype."""
        if len(set(members)) == 1:  # a group of one: no communication (no group may exist)
            self.p.assign(x, output=out)
            return True
        if tuple(sorted(members)) != self.world or list(members) != sorted(members) \
                or str(x.dtype).replace("paddle.", "") not in GATHER_DTYPES:
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


__all__ = ["GATHER_DTYPES", "PaddleBackend"]
