"""Execute a reshard plan on simulated ranks: numpy arrays, one thread per rank.

Each rank runs the same per-rank code as the dygraph executor (:mod:`.per_rank`). A send blocks
until the peer has taken the message, as gloo's does, so an ordering that would deadlock on real
ranks fails here too (:class:`SimulationError` after ``timeout`` seconds). World-group
all_gather / all_reduce reduce in rank order, so results are deterministic.

>>> import numpy as np
>>> from paddle_ext.placements import DistSpec
>>> from paddle_ext.simulated_ranks import shard_dense, assemble
>>> x = np.arange(35, dtype=np.float32).reshape(5, 7)
>>> src, dst = DistSpec((5, 7), (2,), "[S(0)]"), DistSpec((5, 7), (2,), "[S(1)]")
>>> out = simulate_reshard(shard_dense(x, src), src, dst)
>>> bool((assemble(out, dst) == x).all())
True
"""
from __future__ import annotations

import queue
import threading
from typing import Mapping, Sequence

import numpy as np

from ..errors import ReshardPlanError
from ..placements import DistSpec
from .layout import Geometry, coord_in
from .per_rank import execute
from .planner import plan_reshard, _ranks

_REDUCE = {"sum": np.add, "max": np.maximum, "min": np.minimum}


class SimulationError(ReshardPlanError):
    """A simulated rank failed or waited too long (a deadlock on real ranks)."""


class _World:
    def __init__(self, ranks: Sequence[int], timeout: float):
        self.ranks = tuple(sorted(ranks))
        self.timeout = timeout
        self.boxes = {(a, b): queue.Queue() for a in self.ranks for b in self.ranks if a != b}
        self.barrier = threading.Barrier(len(self.ranks))
        self.slots: dict = {}


class NumpyBackend:
    """:class:`~.backend.ReshardBackend` on numpy arrays, with simulated gloo communication."""

    in_place = False   # no views handed out: pieces are concatenated or put into a fresh buffer

    def __init__(self, rank: int, world: _World, like: np.ndarray, stats: dict | None,
                 lockstep: bool = False, padding: dict | None = None):
        self.rank, self._w, self.like, self._stats = rank, world, like, stats
        self._padding = padding
        self.world = world.ranks
        self.lockstep = lockstep
        self._seq = 0  # gloo-like per-group sequence number of point-to-point calls

    # arrays
    @staticmethod
    def _sl(box):
        return tuple(slice(o, o + n) for o, n in box)

    def empty(self, shape, like):
        return np.zeros(shape, dtype=like.dtype)

    def full(self, shape, value, like):
        return np.full(shape, value, dtype=like.dtype)

    def take(self, x, box):
        return np.ascontiguousarray(x[self._sl(box)])

    def put(self, out, box, x):
        out[self._sl(box)] = x
        return out

    def reduce(self, a, b, op):
        return _REDUCE[op](a, b)

    def scale(self, x, factor):
        return (x * np.asarray(factor, dtype=x.dtype)).astype(x.dtype)

    def divide(self, x, n):
        return (x / np.asarray(n, dtype=x.dtype)).astype(x.dtype)

    def flat(self, x):
        return np.ascontiguousarray(x).reshape(-1)

    def reshape(self, x, shape):
        return np.asarray(x).reshape(shape)

    def concat(self, xs, axis):
        return np.concatenate(xs, axis=axis)

    def concat_flat(self, xs, like):
        return np.concatenate([np.asarray(x).reshape(-1) for x in xs]) if xs else \
            np.zeros(0, like.dtype)

    def split_flat(self, x, sizes):
        cuts = np.cumsum(sizes)[:-1]
        return np.split(np.asarray(x).reshape(-1), cuts)

    def numel(self, x):
        return int(np.size(x))

    def shape(self, x):
        return np.shape(x)

    def dtype_kind(self, x):
        return "f" if x.dtype.kind == "f" else ("b" if x.dtype.kind == "b" else "i")

    def dtype_info(self, x):
        return np.iinfo(x.dtype) if x.dtype.kind in "iu" else None

    # communication
    def count(self, nbytes: int) -> None:
        if self._stats is not None:
            self._stats[self.rank] = self._stats.get(self.rank, 0) + int(nbytes)

    def send(self, x, peer):
        done = threading.Event()
        self._w.boxes[(self.rank, peer)].put((np.array(x, copy=True), done, self._seq))
        self._seq += 1
        if not done.wait(self._w.timeout):
            raise SimulationError(f"rank {self.rank}: send to rank {peer} was never received (deadlock)")

    def recv(self, numel, like, peer, count: bool = True):
        try:
            x, done, seq = self._w.boxes[(peer, self.rank)].get(timeout=self._w.timeout)
        except queue.Empty:
            raise SimulationError(f"rank {self.rank}: nothing arrived from rank {peer} (deadlock)") from None
        done.set()
        mine, self._seq = self._seq, self._seq + 1
        if self.lockstep and seq != mine:
            raise SimulationError(
                f"rank {self.rank}: message from rank {peer} has sequence number {seq}, this rank "
                f"expects {mine}; on gloo this message would never match (timeout)")
        if x.size != numel:
            raise SimulationError(f"rank {self.rank}: expected {numel} elements from rank {peer}, got {x.size}")
        if count:
            self.count(x.nbytes)
        return x.reshape(-1)

    def _world_group(self, members) -> bool:
        return tuple(sorted(members)) == self.world

    def _collect(self, x):
        self._seq += 1  # a gloo collective takes one number from the group's counter on every rank
        self._w.slots[self.rank] = x
        self._w.barrier.wait(self._w.timeout)
        vals = dict(self._w.slots)
        self._w.barrier.wait(self._w.timeout)
        return vals

    def gather_sizes(self, vec):
        vals = self._collect(list(vec))
        return [list(vals[r]) for r in self.world]

    def scatter(self, buf, numel, like, root, payload=None):
        """gloo's scatter over the whole world: ``root``'s buffer in equal chunks, in rank order."""
        vals = self._collect(None if buf is None else np.array(buf, copy=True))
        full = vals[root]
        if full is None or full.size != numel * len(self.world):
            raise SimulationError(f"rank {self.rank}: scatter from rank {root} expected {numel} elements per "
                                  f"rank, the root gave {None if full is None else full.size}")
        k = self.world.index(self.rank)
        if self.rank != root:
            payload = numel if payload is None else payload
            self.count(payload * full.itemsize)
            if self._padding is not None:
                self._padding[self.rank] = self._padding.get(self.rank, 0) + (numel - payload) * full.itemsize
        return full[k * numel:(k + 1) * numel].astype(like.dtype, copy=False)

    def all_reduce(self, x, op, members):
        if len(set(members)) == 1:
            return np.array(x, copy=True)
        if not self._world_group(members):
            return None
        vals = self._collect(x)
        n = len(members)
        chunk = -(-x.size // n) if x.size else 0
        mine = max(0, min(chunk, x.size - chunk * list(members).index(self.rank)))
        self.count(((n - 1) * mine + (x.size - mine)) * x.itemsize)
        return _reduce_in_order([vals[r] for r in members], op)


def _reduce_in_order(parts, op):
    acc = parts[0]
    for p in parts[1:]:
        acc = _REDUCE[op](acc, p)
    return acc


def _check_local(local, src: DistSpec) -> None:
    """Refuse ``local`` unless it holds one array of the right local shape per source coordinate.

    Checked before any rank thread starts: inside a thread a missing coordinate or a wrong shape
    surfaces as a timeout or as wrong data.
    """
    if not isinstance(src, DistSpec):
        raise ReshardPlanError(f"source must be a DistSpec(shape, mesh_shape, placements), got {src!r}")
    how = "give one array per source mesh coordinate, e.g. simulated_ranks.shard_dense(x, src)"
    if not isinstance(local, Mapping):
        raise ReshardPlanError(f"local must map source mesh coordinates to arrays, got "
                               f"{type(local).__name__}; {how}")
    coords = list(src.coords())
    if not local:
        raise ReshardPlanError(f"local is empty, but the source {src} has {len(coords)} mesh "
                               f"coordinates; {how}")
    missing = [c for c in coords if c not in local]
    if missing:
        raise ReshardPlanError(f"no local array for source mesh coordinate {list(missing[0])} of {src} "
                               f"({len(missing)} of {len(coords)} coordinates missing); {how}")
    known = set(coords)
    extra = [k for k in local if k not in known]
    if extra:
        raise ReshardPlanError(f"local has key {extra[0]!r}, which is not a mesh coordinate of the source "
                               f"{src}; {how}")
    for c in coords:
        got, want = tuple(np.shape(local[c])), src.local_shape(c)
        if got != want:
            raise ReshardPlanError(f"the local array at source mesh coordinate {list(c)} has shape {list(got)}, "
                                   f"but {src} puts a shard of shape {list(want)} there; {how}")


def simulate_reshard(local: Mapping[tuple, np.ndarray], src: DistSpec, dst: DistSpec, *,
                     src_ranks: Sequence[int] | None = None, dst_ranks: Sequence[int] | None = None,
                     plan=None, stats: dict | None = None, timeout: float = 20.0,
                     lockstep: bool | None = None, padding: dict | None = None) -> dict:
    """Run the plan from ``src`` to ``dst`` on simulated ranks.

    ``local`` maps source mesh coordinates to arrays (e.g. ``simulated_ranks.shard_dense``).
    Returns the destination mesh coordinates' arrays. ``stats``, if given, receives each global
    rank's received bytes. ``lockstep`` (default: on) runs the exchanges as the gloo backend
    does (pairwise rounds on even groups, scatters on odd ones) and checks gloo's per-group
    message sequence numbers. ``padding``, if given, receives each rank's padding bytes (odd
    groups: each sender's scatter chunk is padded to its largest piece).
    """
    _check_local(local, src)
    s_ranks = _ranks(src_ranks, src.mesh_shape, "source")
    d_ranks = _ranks(dst_ranks if dst_ranks is not None else
                     (s_ranks if src.mesh_shape == dst.mesh_shape else None), dst.mesh_shape, "destination")
    if plan is None:
        first = next(iter(local.values()))
        plan = plan_reshard(src, dst, src_ranks=s_ranks, dst_ranks=d_ranks, itemsize=first.itemsize)
    geo = Geometry(src.shape, src.mesh_shape, s_ranks, dst.mesh_shape, d_ranks)
    world = _World(set(s_ranks) | set(d_ranks), timeout)
    if lockstep is None:
        lockstep = True
    like = np.zeros(0, dtype=next(iter(local.values())).dtype)
    results: dict = {}
    errors: list = []

    def run(rank):
        c = coord_in(s_ranks, src.mesh_shape, rank)
        mine = None if c is None else np.asarray(local[c])
        be = NumpyBackend(rank, world, like, stats, lockstep, padding)
        try:
            results[rank] = execute(be, geo, plan, mine)
        except BaseException as exc:  # reported below with the rank
            errors.append((rank, exc))
            world.barrier.abort()

    threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in world.ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout * 4)
    if errors:
        rank, exc = sorted(errors, key=lambda e: isinstance(e[1], threading.BrokenBarrierError))[0]
        raise SimulationError(f"simulated rank {rank} failed during {src} -> {dst}: "
                              f"{type(exc).__name__}: {exc}") from exc
    out = {}
    for i, c in enumerate(dst.coords()):
        out[c] = results[d_ranks[i]]
    return out


__all__ = ["NumpyBackend", "SimulationError", "simulate_reshard"]
