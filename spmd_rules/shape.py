"""Reshape-like ops on DimTrans maps (see ``paddle_ext.spmd.dimtrans``), and transpose."""
from __future__ import annotations

from paddle_ext.errors import ShardingRuleError
from paddle_ext.placements import DistSpec
from paddle_ext.spmd.dimtrans import (expand_map, flatten_map, resolve_shape, squeeze_map, tile_map,
                                      unsqueeze_map, view_groups)
from paddle_ext.spmd.registry import View, register_spmd_rule

from ._names import axis_of, dims


@register_spmd_rule("reshape")
def reshape(x: DistSpec, shape: list[int]):
    """view_groups(x.shape, shape): Flatten shards via its leftmost dim, Split via its first piece"""
    target = resolve_shape(x.shape, shape)
    return View(view_groups(x.shape, target), target)


@register_spmd_rule("flatten")
def flatten(x: DistSpec, start_axis: int = 0, stop_axis: int = -1):
    """d0 (d1 d2) d3: the flattened group shards via its leftmost dim"""
    return View(flatten_map(x.shape, start_axis, stop_axis))


@register_spmd_rule("squeeze")
def squeeze(x: DistSpec, axis: list[int] = ()):
    """d0 1 d2 -> d0 d2"""
    return View(squeeze_map(x.shape, axis))


@register_spmd_rule("unsqueeze")
def unsqueeze(x: DistSpec, axis: list[int] = ()):
    """d0 d1 -> d0 1 d1"""
    return View(unsqueeze_map(x.ndim, axis))


@register_spmd_rule("expand")
def expand(x: DistSpec, shape: list[int]):
    """d0 1 -> d0 n: broadcast and new dims are replicated"""
    return View(expand_map(x.shape, shape))


@register_spmd_rule("tile")
def tile(x: DistSpec, repeat_times: list[int]):
    """d0 d1 -> d0 (d1*r): a repeated dim (r > 1) is replicated"""
    return View(tile_map(x.ndim, repeat_times))


@register_spmd_rule("transpose")
def transpose(x: DistSpec, perm: list[int]):
    """d0 d1 d2 -> d2 d0 d1 | partial(sum avg max min): 0   (perm=[2, 0, 1]; a copy keeps any partial)"""
    names = dims(x.ndim)
    axes = [axis_of(p, x.ndim, "transpose") for p in perm]
    if sorted(axes) != list(range(x.ndim)):
        raise ShardingRuleError(
            f"transpose: perm {list(perm)} is not a permutation of the {x.ndim} dims of a tensor of shape "
            f"{list(x.shape)}; give each of 0..{x.ndim - 1} exactly once, e.g. {list(range(x.ndim))[::-1]}")
    order = [names[a] for a in axes]
    return f"{' '.join(names)} -> {' '.join(order)} | partial(sum avg max min): 0"
