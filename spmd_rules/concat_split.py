"""concat, stack, split, slice: written for one mesh dim (rows), expanded by the engine.

On one mesh dim a row says: if every input is ``S(d)`` (``d`` not the concat/split/sliced
axis) the outputs are ``S(d')``; these ops copy elements, so ``P(op)`` inputs give ``P(op)``
outputs for every reduce op (a replicated input meets ``P(avg|max|min)`` as it is, see
``paddle_ext.spmd.onedim``). The engine adds the all-Replicate row and picks per mesh dim.
"""
from __future__ import annotations

from paddle_ext.errors import ShardingRuleError
from paddle_ext.placements import REDUCE_OPS, DistSpec, Partial, Shard
from paddle_ext.spmd.registry import Rows, register_spmd_rule

from ._names import axis_of


def _rows(n_in: int, n_out: int, dim_pairs, linear: bool = True) -> tuple:
    rows = [((Shard(o),) * n_out, (Shard(i),) * n_in) for i, o in dim_pairs]
    if linear:
        rows += [((Partial(op),) * n_out, (Partial(op),) * n_in) for op in REDUCE_OPS]
    return tuple(rows)


@register_spmd_rule("concat")
def concat(x: list[DistSpec], axis: int = 0):
    """x0 .. xn -> out: S(d) rows for d != axis, P(op) rows (concat copies)"""
    nd = x[0].ndim
    a = axis_of(axis, nd, "concat")
    for k, s in enumerate(x):
        if s.ndim != nd:
            raise ShardingRuleError(f"concat: input {k} has rank {s.ndim} but input 0 has rank {nd}")
        bad = [d for d in range(nd) if d != a and s.shape[d] != x[0].shape[d]]
        if bad:
            raise ShardingRuleError(
                f"concat along axis {a}: input {k} has shape {list(s.shape)} but input 0 has "
                f"{list(x[0].shape)}; every dim except the concat axis must match (dim {bad[0]} differs)")
    shape = list(x[0].shape)
    shape[a] = sum(s.shape[a] for s in x)
    return Rows(_rows(len(x), 1, [(d, d) for d in range(nd) if d != a]), (tuple(shape),))


@register_spmd_rule("stack")
def stack(x: list[DistSpec], axis: int = 0):
    """x0 .. xn -> out with a new dim at axis: S(d) -> S(d or d+1), P(op) rows"""
    nd = x[0].ndim
    a = axis_of(axis, nd + 1, "stack")
    shape = list(x[0].shape)
    shape.insert(a, len(x))
    pairs = [(d, d if d < a else d + 1) for d in range(nd)]
    return Rows(_rows(len(x), 1, pairs), (tuple(shape),))


def _split_rows(x: DistSpec, sizes, axis: int, op: str) -> Rows:
    a = axis_of(axis, x.ndim, op)
    shapes = []
    for s in sizes:
        sh = list(x.shape)
        sh[a] = s
        shapes.append(tuple(sh))
    return Rows(_rows(1, len(sizes), [(d, d) for d in range(x.ndim) if d != a]), tuple(shapes))


@register_spmd_rule("split")
def split(x: DistSpec, sections: list[int], axis: int = 0):
    """x -> out0 .. outn split along axis: S(d) rows for d != axis, P(op) rows"""
    a = axis_of(axis, x.ndim, "split")
    secs = list(sections)
    if secs.count(-1) == 1:
        secs[secs.index(-1)] = x.shape[a] - sum(s for s in secs if s != -1)
    if sum(secs) != x.shape[a]:
        raise ShardingRuleError(f"split: sections {list(sections)} do not add up to dim {a} of size {x.shape[a]}")
    return _split_rows(x, secs, a, "split")


@register_spmd_rule("split_with_num")
def split_with_num(x: DistSpec, num: int, axis: int = 0):
    """x -> num equal pieces along axis: S(d) rows for d != axis, P(op) rows"""
    a = axis_of(axis, x.ndim, "split_with_num")
    if num <= 0 or x.shape[a] % num:
        raise ShardingRuleError(f"split_with_num: dim {a} of size {x.shape[a]} does not split into {num} pieces")
    return _split_rows(x, [x.shape[a] // num] * num, a, "split_with_num")


def slice_shape(shape, axes, starts, ends, decrease_axis=()) -> tuple[int, ...]:
    """Output shape of ``slice`` (python-style clamping of negative and large bounds)."""
    out = list(shape)
    for ax, st, en in zip(axes, starts, ends):
        n = shape[ax]
        out[ax] = len(range(*slice(st, en).indices(n)))
    return tuple(s for d, s in enumerate(out) if d not in set(decrease_axis))


@register_spmd_rule("slice")
def slice_(input: DistSpec, axes: list[int], starts: list[int], ends: list[int],
           infer_flags: list[int] = (), decrease_axis: list[int] = ()):
    """x -> x[sliced]: S(d) rows for d not sliced (index shifts past decreased axes), P(op) rows"""
    nd = input.ndim
    axes = [axis_of(a, nd, "slice") for a in axes]
    dec = {axis_of(a, nd, "slice") for a in decrease_axis}
    shape = slice_shape(input.shape, axes, starts, ends, dec)
    pairs = [(d, d - sum(1 for e in dec if e < d)) for d in range(nd) if d not in axes and d not in dec]
    return Rows(_rows(1, 1, pairs), (shape,))
