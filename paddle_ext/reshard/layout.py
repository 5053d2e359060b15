"""Geometry shared by the planner and every executor: boxes, groups, pieces, exchange rounds, sides.

A rank's local array under a non-partial :class:`DistSpec` is a *box* of the global tensor: one
``(offset, length)`` per tensor dim (``DistSpec.local_slices``). Every data movement paddle-ext
plans is described by boxes, so the byte counts the planner reports are the ones the executors
move.

>>> from paddle_ext.placements import DistSpec
>>> src, dst = DistSpec((5, 4), (2,), "[S(0)]"), DistSpec((5, 4), (2,), "[S(1)]")
>>> [(p.src_rank, p.dst_rank, p.box) for p in pieces(src, (0, 1), dst, (0, 1))]
[(0, 0, ((0, 3), (0, 2))), (1, 0, ((3, 2), (0, 2))), (0, 1, ((0, 3), (2, 2))), (1, 1, ((3, 2), (2, 2)))]
>>> exchange_rounds((0, 1, 2, 3))
(((0, 3), (1, 2)), ((0, 2), (1, 3)), ((0, 1), (2, 3)))
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Sequence

from ..placements import DistSpec, Partial, coord_of_rank, rank_of_coord

Box = tuple  # tuple[tuple[int, int], ...]: (offset, length) per tensor dim


def box_numel(box: Box) -> int:
    return math.prod(length for _, length in box)


def intersect(a: Box, b: Box) -> Box | None:
    """The common box of ``a`` and ``b``, or None when it holds no element."""
    out = []
    for (oa, la), (ob, lb) in zip(a, b):
        lo, hi = max(oa, ob), min(oa + la, ob + lb)
        if hi <= lo:
            return None
        out.append((lo, hi - lo))
    return tuple(out)


def relative(inner: Box, outer: Box) -> Box:
    """``inner`` expressed in the coordinates of ``outer`` (which contains it)."""
    return tuple((oi - oo, li) for (oi, li), (oo, _) in zip(inner, outer))


def box_shape(box: Box) -> tuple[int, ...]:
    return tuple(length for _, length in box)


def group_coords(mesh_shape: Sequence[int], coord: Sequence[int], mesh_dim: int) -> list[tuple]:
    """The coordinates that differ from ``coord`` only on ``mesh_dim``, in mesh order."""
    coord = tuple(coord)
    return [coord[:mesh_dim] + (i,) + coord[mesh_dim + 1:] for i in range(mesh_shape[mesh_dim])]


def rank_at(ranks: Sequence[int], mesh_shape: Sequence[int], coord: Sequence[int]) -> int:
    return ranks[rank_of_coord(coord, mesh_shape)]


def coord_in(ranks: Sequence[int], mesh_shape: Sequence[int], rank: int) -> tuple | None:
    """Mesh coordinate of global ``rank`` or None if the mesh does not contain it."""
    try:
        return coord_of_rank(list(ranks).index(rank), mesh_shape)
    except ValueError:
        return None


def chunk_sizes(n: int, parts: int) -> tuple[int, ...]:
    """Ceil-first split of ``n`` elements (used to chunk flattened buffers)."""
    chunk = math.ceil(n / parts) if n else 0
    return tuple(max(0, min(chunk, n - i * chunk)) for i in range(parts))


@dataclass(frozen=True)
class Piece:
    """One block the destination needs: ``box`` (global coordinates) from ``src_rank``."""

    src_rank: int
    dst_rank: int
    box: Box


@functools.lru_cache(maxsize=4096)
def pieces(src: DistSpec, src_ranks: tuple, dst: DistSpec, dst_ranks: tuple) -> tuple[Piece, ...]:
    """Every block each destination rank needs, and the rank it comes from.

    The distinct source boxes tile the tensor (replicas share a box). A destination rank takes a
    block from itself when it holds that box, otherwise from holder ``index % len(holders)`` so
    that replicas share the sending. Only non-partial specs are valid here.
    """
    if src.partial_mesh_dims() or dst.partial_mesh_dims():
        raise ValueError("pieces() moves non-partial data only")
    holders: dict[Box, list[int]] = {}
    for i, c in enumerate(src.coords()):
        holders.setdefault(src.local_slices(c), []).append(src_ranks[i])
    cells = sorted(holders)
    out = []
    for i, c in enumerate(dst.coords()):
        r = dst_ranks[i]
        want = dst.local_slices(c)
        for cell in cells:
            part = intersect(cell, want)
            if part is None:
                continue
            hs = holders[cell]
            out.append(Piece(r if r in hs else hs[i % len(hs)], r, part))
    return tuple(out)


@functools.lru_cache(maxsize=4096)
def group_pieces(before: DistSpec, after: DistSpec, mesh_dim: int,
                 coord: tuple) -> tuple[tuple[int, int, Box], ...]:
    """Blocks exchanged inside the group along ``mesh_dim`` that contains ``coord``.

    Returns ``(from_index, to_index, box)`` with indices along ``mesh_dim``: member ``to`` needs
    ``box`` (global coordinates) of what member ``from`` holds. Only the placement on
    ``mesh_dim`` may differ between ``before`` and ``after`` (an all-to-all); other mesh dims,
    partial ones included, stay as they are because data never leaves the group.
    """
    members = group_coords(before.mesh_shape, coord, mesh_dim)
    out = []
    for k, ck in enumerate(members):
        want = after.local_slices(ck)
        for j, cj in enumerate(members):
            part = intersect(before.local_slices(cj), want)
            if part is not None:
                out.append((j, k, part))
    return tuple(out)


def received_elements(ps: Sequence[Piece]) -> dict[int, int]:
    """Elements each destination rank receives from other ranks."""
    got: dict[int, int] = {}
    for p in ps:
        got.setdefault(p.dst_rank, 0)
        if p.src_rank != p.dst_rank:
            got[p.dst_rank] += box_numel(p.box)
    return got


@functools.lru_cache(maxsize=256)
def exchange_rounds(members: tuple) -> tuple[tuple[tuple[int, int], ...], ...]:
    """Pairings of ``members`` (round-robin "circle" method): every pair meets exactly once.

    Every round is a matching, so when each rank walks the rounds in order and, inside a pair,
    the lower rank sends first while the higher receives first, blocking sends (gloo's) cannot
    deadlock. With an odd count one member sits out each round.
    """
    ms = list(members)
    if len(ms) % 2:
        ms.append(None)
    n = len(ms)
    rounds = []
    for _ in range(n - 1):
        pairs = []
        for i in range(n // 2):
            a, b = ms[i], ms[n - 1 - i]
            if a is not None and b is not None:
                pairs.append((min(a, b), max(a, b)))
        rounds.append(tuple(sorted(pairs)))
        ms = [ms[0], ms[-1]] + ms[1:-1]
    return tuple(rounds)


def partner_order(members: tuple, me: int) -> list[int]:
    """The peers of ``me`` in the order of :func:`exchange_rounds`."""
    out = []
    for rnd in exchange_rounds(members):
        for a, b in rnd:
            if me == a:
                out.append(b)
            elif me == b:
                out.append(a)
    return out


def neutral(op: str, dtype_kind: str, info=None):
    """The value that leaves a reduction unchanged (0 for sum/avg, -inf/min for max...)."""
    if op in ("sum", "avg"):
        return 0
    if dtype_kind == "f":
        return -math.inf if op == "max" else math.inf
    if dtype_kind == "b":
        return op == "min"
    return info.min if op == "max" else info.max


def is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def has_partial(placements) -> bool:
    return any(isinstance(p, Partial) for p in placements)


# -- where a step runs, and what every rank knows about a reshard -------------------------------
SRC, DST = "src", "dst"   #: a step on the source mesh / on the destination mesh
CROSS = "src->dst"        #: a step that moves data from the source mesh to the destination mesh


@dataclass(frozen=True)
class Geometry:
    """What every rank knows about a reshard: global shape, both meshes and their ranks."""

    shape: tuple
    src_mesh: tuple
    src_ranks: tuple
    dst_mesh: tuple
    dst_ranks: tuple

    def mesh(self, side: str) -> tuple:
        return self.dst_mesh if side == DST else self.src_mesh

    def ranks(self, side: str) -> tuple:
        return self.dst_ranks if side == DST else self.src_ranks

    def spec(self, side: str, placements) -> DistSpec:
        return DistSpec(self.shape, self.mesh(side), placements)
