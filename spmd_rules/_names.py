"""Factor-name helpers shared by the rule modules."""
from __future__ import annotations

from paddle_ext.errors import ShardingRuleError


def dims(n: int, prefix: str = "d") -> list[str]:
    """``['d0', 'd1', ...]``: one factor name per tensor dim."""
    return [f"{prefix}{i}" for i in range(n)]


def axis_of(axis: int, ndim: int, op: str) -> int:
    """Normalise a possibly negative axis, or raise naming the op."""
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        raise ShardingRuleError(f"{op}: axis {axis} is out of range for a tensor of rank {ndim}; "
                                f"use an axis in [{-ndim}, {ndim - 1}]")
    return axis % max(ndim, 1)


def operand(names) -> str:
    return " ".join(names)
