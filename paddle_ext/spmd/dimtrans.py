"""DimTrans: reshape-like ops as data, one output dim at a time.

Each output dim is described by a small frozen value:

* ``InputDim(d)``          -- the output dim is input dim ``d``.
* ``Singleton()``          -- a dim of size 1.
* ``Flatten(dims)``        -- several input dims merged into one.
* ``Split(dim, shape, i)`` -- the ``i``-th piece of an input dim (or a Flatten) split into ``shape``.
* ``Broadcast(dim, n)``    -- an input dim of size 1 expanded to size ``n``.
* ``NewDim(n)``            -- a new dim of size ``n`` (expand adds leading dims).
* ``Repeat(dim, times)``   -- an input dim tiled ``times`` times.

The normalising constructors ``Flatten.new`` / ``Split.new`` / ``Repeat.new`` drop trivial
cases (flattening one dim is that dim; a split into one piece is the input):

>>> view_groups((6, 12, 48), (72, 6, 8))
(Flatten(dims=(InputDim(dim=0), InputDim(dim=1))), Split(dim=InputDim(dim=2), shape=(6, 8), index=0), Split(dim=InputDim(dim=2), shape=(6, 8), index=1))
>>> view_groups((4, 1, 6), (4, 6))
(InputDim(dim=0), InputDim(dim=2))
>>> view_groups((5, 1), (5, 1, 1))     # a size-1 dim matched by a size-1 dim is that dim
(InputDim(dim=0), InputDim(dim=1), Singleton())
>>> resolve_shape((4, 6, 8), (0, -1))
(4, 48)

Sharding laws of :func:`infer_dimtrans` (Paddle's, plus the uneven cases it gets wrong):

1. ``Singleton``, ``NewDim``, ``Broadcast`` and ``Repeat(times > 1)`` outputs are replicated.
2. ``InputDim(d)`` inherits input dim ``d``'s mesh dims.
3. ``Flatten`` is sharded only through its **leftmost** input dim; the other flattened dims must
   be replicated. The leftmost dim must divide evenly by its mesh dims unless it is the only
   non-trivial dim (a flatten of uneven row blocks is not a block of the flat tensor). When the
   leftmost dim is sharded, the mesh dims of the other flattened dims move onto it (a co-shard,
   Paddle's behaviour; an all-to-all instead of an all-gather) while it still divides evenly.
4. ``Split`` keeps the sharding only on its **leftmost** piece, and only when that piece's size
   divides by the mesh dims; the input dim is otherwise replicated.
5. Every input mesh dim the output cannot carry becomes a required reshard to ``Replicate``;
   a ``Partial`` input stays partial (reshape-like ops are linear).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence, Union

from ..errors import ShardingRuleError
from ..placements import DistSpec, Partial
from .einsum import check_same_mesh
from .result import RuleResult, make_result, spec_from_mapping


@dataclass(frozen=True)
class InputDim:
    dim: int


@dataclass(frozen=True)
class Singleton:
    pass


@dataclass(frozen=True)
class Flatten:
    dims: tuple

    @staticmethod
    def new(dims: Sequence["DimSpec"]) -> "DimSpec":
        dims = tuple(dims)
        if not dims:
            return Singleton()
        return dims[0] if len(dims) == 1 else Flatten(dims)


@dataclass(frozen=True)
class Split:
    dim: object
    shape: tuple
    index: int

    @staticmethod
    def new(dim: "DimSpec", shape: Sequence[int], index: int) -> "DimSpec":
        shape = tuple(shape)
        if shape[index] == 1 or isinstance(dim, Singleton):
            return Singleton()
        kept = tuple(s for s in shape if s != 1)
        if len(kept) == 1:
            return dim
        return Split(dim, kept, sum(1 for s in shape[:index] if s != 1))


@dataclass(frozen=True)
class Broadcast:
    dim: object
    size: int


@dataclass(frozen=True)
class NewDim:
    size: int


@dataclass(frozen=True)
class Repeat:
    dim: object
    times: int

    @staticmethod
    def new(dim: "DimSpec", times: int) -> "DimSpec":
        return dim if times == 1 else Repeat(dim, times)


DimSpec = Union[InputDim, Singleton, Flatten, Split, Broadcast, NewDim, Repeat]


# -- dim maps of the reshape-like ops ------------------------------------------------------------
def resolve_shape(src: Sequence[int], tgt: Sequence[int], op: str = "reshape") -> tuple[int, ...]:
    """Resolve ``0`` (copy the input dim at that index) and one ``-1`` (infer) in ``tgt``."""
    tgt = [int(t) for t in tgt]
    out = [src[i] if t == 0 and i < len(src) else t for i, t in enumerate(tgt)]
    if out.count(-1) > 1:
        raise ShardingRuleError(f"{op}: target shape {tgt} has more than one -1; infer at most one dim")
    total = math.prod(src)
    known = math.prod(t for t in out if t != -1)
    if -1 in out:
        if known == 0 or total % known:
            raise ShardingRuleError(f"{op}: cannot infer -1 in {tgt} for an input of shape {list(src)}")
        out[out.index(-1)] = total // known
    if math.prod(out) != total or any(t < 0 for t in out):
        raise ShardingRuleError(f"{op}: target shape {tgt} (resolved {out}) does not hold the "
                                f"{total} elements of shape {list(src)}; fix the target shape")
    return tuple(out)


def view_groups(src: Sequence[int], tgt: Sequence[int]) -> tuple:
    """Dim map of ``reshape(src -> tgt)`` by greedy prefix-product matching (Paddle's order)."""
    tgt = resolve_shape(src, tgt)
    out: list = []
    i = j = 0
    while i < len(src) or j < len(tgt):
        s = src[i] if i < len(src) else 1
        t = tgt[j] if j < len(tgt) else 1
        group = [i] if i < len(src) else []
        pieces = [t] if j < len(tgt) else []
        i, j = i + (i < len(src)), j + (j < len(tgt))
        if s == 1 and t == 1 and group and pieces:
            out.append(InputDim(group[0]))
            continue
        if s == 1 and t != 1:
            j -= 1 if pieces else 0
            pieces = []
        elif s != 1 and t == 1:
            i -= 1 if group else 0
            group = []
        else:
            while s != t:
                if s < t:
                    group.append(i)
                    s *= src[i]
                    i += 1
                else:
                    pieces.append(tgt[j])
                    t *= tgt[j]
                    j += 1
        if pieces:
            flat = Flatten.new([InputDim(d) for d in group if src[d] > 1])
            out.extend(Split.new(flat, pieces, k) for k in range(len(pieces)))
    return tuple(out)


def flatten_map(shape: Sequence[int], start: int, stop: int) -> tuple:
    n = len(shape)
    if n == 0:
        return (Singleton(),)
    start, stop = start % n, stop % n
    if start > stop:
        raise ShardingRuleError(f"flatten: start_axis {start} > stop_axis {stop} for rank {n}")
    dims = [InputDim(d) for d in range(n)]
    if start == stop:       # flattening one dim is that dim, size 1 included
        return tuple(dims)
    mid = Flatten.new([InputDim(d) for d in range(start, stop + 1) if shape[d] != 1])
    return tuple(dims[:start]) + (mid,) + tuple(dims[stop + 1:])


def squeeze_map(shape: Sequence[int], axes: Sequence[int]) -> tuple:
    n = len(shape)
    axes = {a % n for a in axes} if axes else {d for d in range(n) if shape[d] == 1}
    return tuple(InputDim(d) for d in range(n) if not (d in axes and shape[d] == 1))


def unsqueeze_map(ndim: int, axes: Sequence[int]) -> tuple:
    out: list = [InputDim(d) for d in range(ndim)]
    for a in axes:
        a = a + len(out) + 1 if a < 0 else a
        out.insert(min(a, len(out)), Singleton())
    return tuple(out)


def expand_map(shape: Sequence[int], target: Sequence[int]) -> tuple:
    new = len(target) - len(shape)
    if new < 0:
        raise ShardingRuleError(f"expand: target {list(target)} has fewer dims than the input {list(shape)}")
    out: list = [NewDim(t) if t != 1 else Singleton() for t in target[:new]]
    for d, (s, t) in enumerate(zip(shape, target[new:])):
        t = s if t == -1 else t
        if s == t:
            out.append(InputDim(d) if s != 1 else Singleton())
        elif s == 1:
            out.append(Broadcast(InputDim(d), t))
        else:
            raise ShardingRuleError(f"expand: input dim {d} of size {s} cannot expand to {t}; "
                                    f"only size-1 dims broadcast")
    return tuple(out)


def tile_map(ndim: int, repeats: Sequence[int]) -> tuple:
    repeats = list(repeats)
    bad = [r for r in repeats if isinstance(r, bool) or not hasattr(type(r), "__index__") or r < 0]
    if bad:
        raise ShardingRuleError(
            f"tile: repeat_times {repeats} has {bad[0]!r}; every repeat count must be an int >= 0 "
            f"(1 keeps a dim as it is)")
    new = len(repeats) - ndim
    lead = [NewDim(r) if r != 1 else Singleton() for r in repeats[:max(new, 0)]]
    body = repeats[max(new, 0):]
    body = [1] * (ndim - len(body)) + body
    return tuple(lead) + tuple(Repeat.new(InputDim(d), r) for d, r in enumerate(body))


# -- inference ----------------------------------------------------------------------------------
def _flatten_of(spec: DimSpec):
    """The Flatten inside ``spec`` (itself, or the input of a Split), if any."""
    if isinstance(spec, Flatten):
        return spec
    if isinstance(spec, Split) and isinstance(spec.dim, Flatten):
        return spec.dim
    return None


def _even_mdims(spec: DistSpec, ds: DimSpec, d: int, cond, mdims: list[int], mesh) -> list[int]:
    """Drop trailing mesh dims until laws 3 and 4 hold for the sharded input dim ``d``."""
    flat = _flatten_of(ds)
    rest = math.prod(spec.shape[x] for x in _flat_members(flat)[1:]) if flat is not None else 1
    while mdims:
        n = math.prod(mesh[m] for m in mdims)
        if (rest > 1 and spec.shape[d] % n) or (isinstance(cond, int) and cond % n):
            mdims.pop()
        else:
            break
    return mdims


def _onto_leftmost(spec: DistSpec, flat: Flatten, d: int, mdims: list[int], mesh) -> list[int]:
    """Law 3's co-shard: the mesh dims of ``flat``'s other members join its sharded leftmost
    dim ``d`` as inner splits while ``d`` divides evenly by all of them. Only a mesh dim after
    ``d``'s own joins (a co-shard splits by ascending mesh dims, outer first): an earlier one would
    re-nest ``d``'s existing blocks, a move no per-mesh-dim reshard states."""
    for x in _flat_members(flat)[1:]:
        for m in spec.shard_mesh_dims(x):
            if m > max(mdims) and spec.shape[d] % math.prod(mesh[k] for k in mdims + [m]) == 0:
                mdims = mdims + [m]
    return mdims


def _leftmost(spec: DimSpec):
    """(input dim, even-size requirement) a DimSpec may inherit sharding from, or None."""
    if isinstance(spec, InputDim):
        return spec.dim, None
    if isinstance(spec, Flatten):
        first = spec.dims[0]
        inner = _leftmost(first)
        return (inner[0], "flatten") if inner else None
    if isinstance(spec, Split):
        inner = _leftmost(spec.dim)
        if inner is None or spec.index != 0:
            return None
        return inner[0], spec.shape[0]
    return None


def _flat_members(spec: DimSpec) -> list[int]:
    if isinstance(spec, InputDim):
        return [spec.dim]
    if isinstance(spec, (Flatten,)):
        return [d for x in spec.dims for d in _flat_members(x)]
    if isinstance(spec, (Split, Broadcast, Repeat)):
        return _flat_members(spec.dim)
    return []


def out_shape_of(dim_map: Sequence[DimSpec], shape: Sequence[int]) -> tuple[int, ...]:
    def size(s):
        if isinstance(s, InputDim):
            return shape[s.dim]
        if isinstance(s, Singleton):
            return 1
        if isinstance(s, Flatten):
            return math.prod(size(x) for x in s.dims)
        if isinstance(s, Split):
            return s.shape[s.index]
        if isinstance(s, (Broadcast, NewDim)):
            return s.size
        return size(s.dim) * s.times
    return tuple(size(s) for s in dim_map)


def infer_dimtrans(spec: DistSpec, dim_map: Sequence[DimSpec], op: str = "reshape",
                   out_shape: Sequence[int] | None = None) -> RuleResult:
    """Forward inference for a reshape-like op described by ``dim_map`` (laws 1-5)."""
    mesh = check_same_mesh(op, [spec])
    out_shape = tuple(out_shape) if out_shape is not None else out_shape_of(dim_map, spec.shape)
    keep: dict[int, list[int]] = {}
    out_mapping: list[list[int]] = []
    for k, ds in enumerate(dim_map):
        src = _leftmost(ds)
        mdims: list[int] = []
        if src is not None:
            d, cond = src
            mdims = _even_mdims(spec, ds, d, cond, list(spec.shard_mesh_dims(d)), mesh)
            if mdims and isinstance(ds, Flatten):
                mdims = _onto_leftmost(spec, ds, d, mdims, mesh)
            keep[d] = mdims
        out_mapping.append(mdims)
    in_mapping = [keep.get(d, []) for d in range(spec.ndim)]
    partial = {m: p.op for m, p in enumerate(spec.placements) if isinstance(p, Partial)}
    required = spec_from_mapping(spec.shape, mesh, in_mapping, partial)
    out = spec_from_mapping(out_shape, mesh, out_mapping, partial)
    return make_result(op, [spec], [required], [out], dims_text(dim_map))


def infer_dimtrans_reverse(spec: DistSpec, out: DistSpec, dim_map: Sequence[DimSpec],
                           op: str = "reshape") -> RuleResult:
    """Input layout from the output layout: each output dim hands its mesh dims back to the
    input dim it inherits from (law 3/4 conditions apply in reverse)."""
    mesh = check_same_mesh(op, [spec, out])
    if len(dim_map) != out.ndim:
        raise ShardingRuleError(f"{op}: the output spec has rank {out.ndim} but the op gives rank {len(dim_map)}")
    in_mapping: list[list[int]] = [[] for _ in range(spec.ndim)]
    used: set[int] = set()
    for k, ds in enumerate(dim_map):
        src = _leftmost(ds)
        if src is None:
            continue
        d, cond = src
        mdims = [m for m in out.shard_mesh_dims(k) if m not in used]
        mdims = _even_mdims(spec, ds, d, cond, mdims, mesh)
        if isinstance(ds, Split):
            # a split piece maps back to its input dim only when the input dim is that piece's block
            while mdims and spec.shape[d] % math.prod(mesh[m] for m in mdims):
                mdims.pop()
        in_mapping[d] = mdims
        used.update(mdims)
    required = spec_from_mapping(spec.shape, mesh, in_mapping)
    return make_result(op, [spec], [required], [out], dims_text(dim_map))


def dims_text(dim_map: Sequence[DimSpec]) -> str:
    """Compact text of a dim map, e.g. ``(d0 d1), d2[0/6x8], d2[1/6x8]``."""
    def t(s):
        if isinstance(s, InputDim):
            return f"d{s.dim}"
        if isinstance(s, Singleton):
            return "1"
        if isinstance(s, Flatten):
            return "(" + " ".join(t(x) for x in s.dims) + ")"
        if isinstance(s, Split):
            return f"{t(s.dim)}[{s.index}/{'x'.join(map(str, s.shape))}]"
        if isinstance(s, Broadcast):
            return f"{t(s.dim)}->{s.size}"
        if isinstance(s, NewDim):
            return f"new{s.size}"
        return f"{t(s.dim)}*{s.times}"
    return ", ".join(t(s) for s in dim_map)


__all__ = ["Broadcast", "DimSpec", "Flatten", "InputDim", "NewDim", "Repeat", "Singleton", "Split",
           "dims_text", "expand_map", "flatten_map", "infer_dimtrans", "infer_dimtrans_reverse",
           "out_shape_of", "resolve_shape", "squeeze_map", "tile_map", "unsqueeze_map", "view_groups"]
