"""A dispatched op's tensor slots: one entry per tensor parameter of its rule -- a tensor, a
list of tensors, or None. The rule and the plan see them flat (lists spliced in, Nones
dropped); the local function gets them back in their slots.

>>> flatten_slots(["a", ["b", "c"], None, "d"])
['a', 'b', 'c', 'd']
>>> restructure(["a", ["b", "c"], None, "d"], [1, 2, 3, 4])
[1, [2, 3], None, 4]
"""
from __future__ import annotations

from typing import Sequence


def flatten_slots(slots: Sequence) -> list:
    """The tensors of ``slots`` in order, lists spliced in and Nones dropped."""
    flat = []
    for s in slots:
        if isinstance(s, (list, tuple)):
            flat.extend(s)
        elif s is not None:
            flat.append(s)
    return flat


def restructure(slots: Sequence, flat: Sequence) -> list:
    """``flat`` (one value per tensor of ``slots``) put back in the shape of ``slots``."""
    out, k = [], 0
    for s in slots:
        if isinstance(s, (list, tuple)):
            out.append(list(flat[k:k + len(s)]))
            k += len(s)
        elif s is None:
            out.append(None)
        else:
            out.append(flat[k])
            k += 1
    return out


def is_flat(slots: Sequence) -> bool:
    """No slot is a list or None: the slots are their own flat form."""
    return not any(isinstance(s, (list, tuple)) or s is None for s in slots)


__all__ = ["flatten_slots", "is_flat", "restructure"]
