"""embedding: ``out[..., h] = W[ids[...], h]`` -- a one-hot contraction over the vocabulary,
so a vocab-sharded table gives ``Partial(sum)`` (each rank looks up the ids it owns and
writes zeros for the rest). A lookup copies rows of the table: a partial table (any reduce op)
gives the same partial output."""
from __future__ import annotations

from paddle_ext.placements import DistSpec
from paddle_ext.spmd.registry import register_spmd_rule


@register_spmd_rule("embedding")
def embedding(x: DistSpec, weight: DistSpec, padding_idx: int = -1, sparse: bool = False):
    """..., vocab hidden -> ... hidden | reduce(sum): vocab | partial(sum avg max min): 1"""
    return "..., vocab hidden -> ... hidden | reduce(sum): vocab | partial(sum avg max min): 1"
