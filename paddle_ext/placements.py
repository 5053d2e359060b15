"""The placement model: pure, frozen values with terse text forms.

A tensor distributed over a ProcessMesh is described by one placement per mesh dim:

* ``Replicate()``  -- text ``R``: every rank on that mesh dim holds the same values.
* ``Shard(d)``     -- text ``S(d)``: tensor dim ``d`` is split across that mesh dim.
* ``Partial(op)``  -- text ``P(sum)``, ``P(avg)``, ``P(max)``, ``P(min)``: every rank holds a
  partial value; the logical tensor is the reduction of them across that mesh dim.

A placement list prints as ``[S(0),R]`` and :func:`parse_placements` inverts it:

>>> parse_placements("[S(0), R, P(avg)]")
(Shard(dim=0), Replicate(), Partial(op='avg'))
>>> format_placements(parse_placements("[S(1),P]"))
'[S(1),P(sum)]'

Local shards follow Paddle's convention, *ceil-first*: a dim of size ``n`` split ``k`` ways gives
every shard ``ceil(n/k)`` elements except the tail, which may be short or empty.

>>> split_sizes(5, 2), split_sizes(5, 4), split_sizes(3, 4)
((3, 2), (2, 2, 1, 0), (1, 1, 1, 0))

When several mesh dims shard the same tensor dim (co-shard), the lower mesh dim is the outer
split, as in Paddle's default ``shard_order``:

>>> spec = DistSpec((3, 6), (2, 2), "[S(0),S(0)]")
>>> [spec.local_shape(c) for c in spec.coords()]
[(1, 6), (1, 6), (1, 6), (0, 6)]

Nothing here imports Paddle; conversion to Paddle objects lives in ``paddle_ext.compat``.
"""
from __future__ import annotations

import itertools
import math
import operator
import re
from dataclasses import dataclass
from typing import Iterator, Sequence, Union

from .errors import PlacementError

REDUCE_OPS = ("sum", "avg", "max", "min")


@dataclass(frozen=True)
class Replicate:
    """Every rank along the mesh dim holds the whole (remaining) tensor."""

    def __str__(self) -> str:
        return "R"

    def is_shard(self, dim: int | None = None) -> bool:
        return False

    def is_partial(self) -> bool:
        return False

    def is_replicate(self) -> bool:
        return True


@dataclass(frozen=True)
class Shard:
    """Tensor dim ``dim`` is split across the mesh dim, ceil-first."""

    dim: int

    def __post_init__(self) -> None:
        if isinstance(self.dim, bool) or not isinstance(self.dim, int):
            raise PlacementError(
                f"Shard(dim={self.dim!r}): dim must be an int tensor dimension, e.g. Shard(0)")
        if self.dim < 0:
            raise PlacementError(
                f"Shard(dim={self.dim}): dim must be >= 0; normalise negative dims with "
                f"dim % ndim before building the placement")

    def __str__(self) -> str:
        return f"S({self.dim})"

    def is_shard(self, dim: int | None = None) -> bool:
        return dim is None or dim == self.dim

    def is_partial(self) -> bool:
        return False

    def is_replicate(self) -> bool:
        return False


@dataclass(frozen=True)
class Partial:
    """Ranks hold partial values; the logical tensor is their reduction with ``op``."""

    op: str = "sum"

    def __post_init__(self) -> None:
        if self.op not in REDUCE_OPS:
            raise PlacementError(
                f"Partial(op={self.op!r}): unknown reduce op; use one of {', '.join(REDUCE_OPS)}")

    def __str__(self) -> str:
        return f"P({self.op})"

    def is_shard(self, dim: int | None = None) -> bool:
        return False

    def is_partial(self) -> bool:
        return True

    def is_replicate(self) -> bool:
        return False


Placement = Union[Replicate, Shard, Partial]
PLACEMENT_TYPES = (Replicate, Shard, Partial)

_TOKEN = re.compile(r"\s*(R|S\(\s*(-?\d+)\s*\)|P(?:\(\s*([a-z]*)\s*\))?)\s*\Z")


def parse_placement(text: str) -> Placement:
    """Parse ``R``, ``S(d)``, ``P`` or ``P(op)`` (the inverse of ``str(placement)``)."""
    if not isinstance(text, str):
        raise PlacementError(f"placement text must be a str such as 'S(0)', got {text!r}")
    m = _TOKEN.match(text)
    if not m:
        raise PlacementError(
            f"unknown placement {text!r}; write R, S(<dim>), P or P(<op>) with op in "
            f"{'/'.join(REDUCE_OPS)}, e.g. 'S(0)'")
    tok = m.group(1)
    if tok == "R":
        return Replicate()
    if tok.startswith("S"):
        return Shard(int(m.group(2)))
    op = m.group(3)
    return Partial(op if op else "sum")


def _split_top_level(body: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in body:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def parse_placements(text: str | Sequence) -> tuple[Placement, ...]:
    """Parse ``[S(0),R]`` (brackets optional) or pass through a sequence of placements/strings."""
    if isinstance(text, str):
        body = text.strip()
        if body.startswith("[") != body.endswith("]"):
            raise PlacementError(f"unbalanced brackets in placements {text!r}; write e.g. '[S(0),R]'")
        if body.startswith("["):
            body = body[1:-1]
        if not body.strip():
            raise PlacementError(
                f"empty placement list {text!r}; give one placement per mesh dim, e.g. '[R]'")
        return tuple(parse_placement(p) for p in _split_top_level(body))
    try:
        items = list(text)
    except TypeError:
        raise PlacementError(
            f"placements must be a string such as '[S(0),R]' or a list of placements, got {text!r}"
        ) from None
    out = []
    for p in items:
        if isinstance(p, PLACEMENT_TYPES):
            out.append(p)
        elif isinstance(p, str):
            out.append(parse_placement(p))
        else:
            raise PlacementError(
                f"{p!r} is not a paddle-ext placement; use Replicate(), Shard(d), Partial(op) or "
                f"their text forms (Paddle placements convert with paddle_ext.compat.from_paddle_placements)")
    return tuple(out)


def format_placements(placements: Sequence[Placement]) -> str:
    """``[S(0),R]``: the terse text form, inverted by :func:`parse_placements`."""
    return "[" + ",".join(str(p) for p in placements) + "]"


def check_mesh_shape(mesh_shape: Sequence[int]) -> tuple[int, ...]:
    """Return ``mesh_shape`` as a tuple of positive ints or raise :class:`PlacementError`."""
    try:
        shape = tuple(mesh_shape)
    except TypeError:
        raise PlacementError(f"mesh shape must be a sequence of ints such as (2, 2), got {mesh_shape!r}") from None
    if not shape:
        raise PlacementError("mesh shape is empty; a ProcessMesh has at least one dim, e.g. (2,)")
    for s in shape:
        if isinstance(s, bool) or not isinstance(s, int) or s <= 0:
            raise PlacementError(
                f"mesh shape {list(shape)} has size {s!r}; every mesh dim must be a positive int")
    return shape


def split_sizes(n: int, parts: int) -> tuple[int, ...]:
    """Sizes of ``parts`` ceil-first shards of a dim of size ``n`` (Paddle's convention)."""
    if parts <= 0:
        raise PlacementError(f"cannot split a dim into {parts} parts; parts must be >= 1")
    chunk = math.ceil(n / parts) if n else 0
    return tuple(max(0, min(chunk, n - i * chunk)) for i in range(parts))


def split_offsets(n: int, parts: int) -> tuple[int, ...]:
    """Start offsets matching :func:`split_sizes` (an empty shard starts at ``n``)."""
    chunk = math.ceil(n / parts) if n else 0
    return tuple(min(i * chunk, n) for i in range(parts))


@dataclass(frozen=True)
class DistSpec:
    """A distributed tensor's layout: global shape, mesh shape, one placement per mesh dim.

    ``placements`` accepts a text form (``"[S(0),R]"``) or a sequence; it is stored as a tuple
    of placement values. Construction validates everything and raises :class:`PlacementError`
    with the fix.

    >>> str(DistSpec((5, 7), (2,), "[S(0)]"))
    '[5,7] on mesh 2 as [S(0)]'
    """

    shape: tuple[int, ...]
    mesh_shape: tuple[int, ...]
    placements: tuple[Placement, ...]

    def __init__(self, shape: Sequence[int], mesh_shape: Sequence[int],
                 placements: str | Sequence) -> None:
        try:
            sizes = tuple(shape)
        except TypeError:
            raise PlacementError(f"tensor shape must be a sequence of ints, got {shape!r}") from None
        for s in sizes:
            if isinstance(s, bool) or not hasattr(type(s), "__index__"):
                raise PlacementError(
                    f"tensor shape {list(sizes)} has size {s!r}; every tensor dim must be an int, "
                    f"e.g. (4, 6)")
        shape_t = tuple(operator.index(s) for s in sizes)
        if any(s < 0 for s in shape_t):
            raise PlacementError(f"tensor shape {list(shape_t)} has a negative size")
        mesh_t = check_mesh_shape(mesh_shape)
        pls = parse_placements(placements)
        object.__setattr__(self, "shape", shape_t)
        object.__setattr__(self, "mesh_shape", mesh_t)
        object.__setattr__(self, "placements", pls)
        self._check()
        # specs key the rule caches: hash once, not on every lookup
        object.__setattr__(self, "_hash", hash((shape_t, mesh_t, pls)))

    def __hash__(self) -> int:
        return self._hash

    def _check(self) -> None:
        if len(self.placements) != len(self.mesh_shape):
            raise PlacementError(
                f"{format_placements(self.placements)} has {len(self.placements)} placements but the "
                f"mesh {list(self.mesh_shape)} has {len(self.mesh_shape)} dims; give exactly one "
                f"placement per mesh dim (use R for mesh dims that do not split the tensor)")
        for i, p in enumerate(self.placements):
            if isinstance(p, Shard) and p.dim >= len(self.shape):
                raise PlacementError(
                    f"{p} on mesh dim {i} shards tensor dim {p.dim}, but the tensor {list(self.shape)} "
                    f"has rank {len(self.shape)}; use a dim in 0..{len(self.shape) - 1} or R")

    # -- text ---------------------------------------------------------------------------------
    def __str__(self) -> str:
        shape = ",".join(map(str, self.shape))
        mesh = "x".join(map(str, self.mesh_shape))
        return f"[{shape}] on mesh {mesh} as {format_placements(self.placements)}"

    # -- structure ----------------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def world_size(self) -> int:
        return math.prod(self.mesh_shape)

    def with_placements(self, placements: str | Sequence) -> "DistSpec":
        return DistSpec(self.shape, self.mesh_shape, placements)

    def shard_mesh_dims(self, tensor_dim: int) -> tuple[int, ...]:
        """Mesh dims sharding ``tensor_dim``, outer split first (ascending mesh dim)."""
        return tuple(i for i, p in enumerate(self.placements) if isinstance(p, Shard) and p.dim == tensor_dim)

    def partial_mesh_dims(self) -> tuple[int, ...]:
        return tuple(i for i, p in enumerate(self.placements) if isinstance(p, Partial))

    def dims_mapping(self) -> list[list[int]]:
        """Per tensor dim, the mesh dims sharding it (Paddle's multi dims_mapping)."""
        return [list(self.shard_mesh_dims(d)) for d in range(self.ndim)]

    def coords(self) -> Iterator[tuple[int, ...]]:
        """Mesh coordinates in row-major (rank) order."""
        return itertools.product(*(range(s) for s in self.mesh_shape))

    # -- local shards -------------------------------------------------------------------------
    def local_slices(self, coord: Sequence[int]) -> tuple[tuple[int, int], ...]:
        """``(offset, length)`` per tensor dim of the shard held at mesh coordinate ``coord``."""
        coord = tuple(coord)
        if len(coord) != len(self.mesh_shape) or any(
                not 0 <= c < s for c, s in zip(coord, self.mesh_shape)):
            raise PlacementError(
                f"mesh coordinate {list(coord)} is outside the mesh {list(self.mesh_shape)}")
        out = []
        for d, n in enumerate(self.shape):
            off, length = 0, n
            for m in self.shard_mesh_dims(d):
                sizes = split_sizes(length, self.mesh_shape[m])
                offs = split_offsets(length, self.mesh_shape[m])
                off, length = off + offs[coord[m]], sizes[coord[m]]
            out.append((off, length))
        return tuple(out)

    def local_shape(self, coord: Sequence[int]) -> tuple[int, ...]:
        return tuple(length for _, length in self.local_slices(coord))

    def local_numel(self, coord: Sequence[int]) -> int:
        return math.prod(self.local_shape(coord))

    def numel(self) -> int:
        return math.prod(self.shape)


def coord_of_rank(index: int, mesh_shape: Sequence[int]) -> tuple[int, ...]:
    """Mesh coordinate of the ``index``-th process of a row-major mesh."""
    out = []
    for s in reversed(tuple(mesh_shape)):
        out.append(index % s)
        index //= s
    return tuple(reversed(out))


def rank_of_coord(coord: Sequence[int], mesh_shape: Sequence[int]) -> int:
    """Row-major index of a mesh coordinate (inverse of :func:`coord_of_rank`)."""
    idx = 0
    for c, s in zip(coord, mesh_shape):
        idx = idx * s + c
    return idx
