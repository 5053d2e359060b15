"""Memory per rank of a plan (pure: no Paddle), and memory amounts written with units.

A rank holds (``d`` = dp degree, ``t`` = tp degree, parameters of the stages it runs, column and
row weights split over ``t``):

=================  =================================================================
parameters         local elements x itemsize; / d with ZeRO stage 3
gradients          the same; / d with ZeRO stage 2 or 3
optimizer states   AdamW's two moments: 2 x local elements x itemsize; / d from stage 1
activations        the schedule simulator's peak of live microbatch activations on the rank
                   (one microbatch of the whole per-replica batch without pipelining)
comm buffers       twice the largest single message (a send and a receive buffer)
process base       the profile's ``memory.process_base_bytes`` (runtime, libraries, context)
=================  =================================================================

>>> parse_memory("2GiB"), parse_memory("1.5 GB"), parse_memory("512m"), parse_memory(1000)
(2147483648, 1500000000, 536870912, 1000)
"""
from __future__ import annotations

import re
from typing import Dict, Iterable

from .candidates import Candidate
from .errors import MemoryUnitError
from .model_desc import LayerDesc, ParamDesc

_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1000, "kib": 1024, "m": 1024 ** 2, "mb": 1000 ** 2, "mib": 1024 ** 2,
          "g": 1024 ** 3, "gb": 1000 ** 3, "gib": 1024 ** 3, "t": 1024 ** 4, "tb": 1000 ** 4, "tib": 1024 ** 4}
_AMOUNT = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([a-zA-Z]*)\s*\Z")
ADAMW_STATES = 2


def parse_memory(text) -> int:
    """Bytes of ``"2GiB"``, ``"1.5GB"``, ``"512M"`` (K/M/G/T alone are binary), or an int of bytes."""
    if isinstance(text, int) and not isinstance(text, bool) and text > 0:
        return text
    m = _AMOUNT.match(str(text))
    unit = m.group(2).lower() if m else None
    if not m or unit not in _UNITS or float(m.group(1)) <= 0:
        raise MemoryUnitError(f"memory amount {text!r} is not a positive number with a unit; write e.g. 2GiB, "
                              f"1.5GB, 512MiB or a byte count (units: B, KiB, MiB, GiB, TiB, KB, MB, GB, TB; "
                              f"K, M, G, T mean KiB...)")
    return int(float(m.group(1)) * _UNITS[unit])


def format_bytes(n: float) -> str:
    """``1.5 GiB``: binary units, one decimal."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def local_param_elems(p: ParamDesc, tp: int) -> int:
    return p.numel // tp if p.role in ("column", "row") else p.numel


def local_param_shape(p: ParamDesc, tp: int) -> tuple:
    if p.role == "column":
        return p.shape[:-1] + (p.shape[-1] // tp,)
    if p.role == "row":
        return (p.shape[0] // tp,) + p.shape[1:]
    return p.shape


def state_bytes(layers: Iterable[LayerDesc], c: Candidate, itemsize: int) -> Dict[str, float]:
    """Parameters, gradients and optimizer states of ``layers`` on one rank of plan ``c``."""
    elems = sum(local_param_elems(p, c.tp) for layer in layers for p in layer.params)
    d = c.dp
    return {"parameters": elems * itemsize / (d if c.zero >= 3 else 1),
            "gradients": elems * itemsize / (d if c.zero >= 2 else 1),
            "optimizer states": ADAMW_STATES * elems * itemsize / (d if c.zero >= 1 else 1)}


def rank_memory(layers, c: Candidate, itemsize: int, activation_peak: float, comm_max_bytes: float,
                base: float) -> Dict[str, float]:
    """Every memory part of one rank (bytes); their sum is the rank's predicted peak."""
    parts = {"process base": float(base)}
    parts.update(state_bytes(layers, c, itemsize))
    parts["activations"] = float(activation_peak)
    parts["comm buffers"] = 2.0 * comm_max_bytes
    return parts


__all__ = ["parse_memory", "format_bytes", "state_bytes", "rank_memory", "local_param_elems", "local_param_shape"]
