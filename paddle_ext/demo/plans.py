"""Named parallel plans for the demo: which mesh, and how the GPT is sharded on it.

A plan name joins parts with ``-``; each part is a strategy and its degree:

=========  ==========================================================================
``dpN``    data parallel: the batch is split over N ranks (``Shard(0)`` on the input)
``zeroK``  data parallel on 2 ranks with ZeRO stage K (1, 2, 3) through ``dist.shard_optimizer``;
           ``zeroKdN`` (e.g. ``zero3d4``) for another data-parallel degree
``tpN``    tensor parallel: q/k/v, gate/up column-parallel (``Shard(1)``), o/down
           row-parallel (``Shard(0)``), with an explicit P->R all-reduce after row layers
``spN``    sequence parallel on the tensor-parallel ranks (needs ``tpN`` of the same N):
           activations between blocks are ``Shard(seq)``; norms run on the shard; an
           all-gather before q/k/v and gate/up, a reduce-scatter (P->S) after o and down
``ppN``    pipeline parallel over N stages with ``--schedule`` (one of paddle-ext's)
=========  ==========================================================================

>>> parse_plan("dp2-tp2")
Plan(name='dp2-tp2', degrees=(('dp', 2), ('tp', 2)), zero_stage=0, sequence_parallel=False)
>>> parse_plan("zero3-tp2").mesh_dims, parse_plan("zero3-tp2").world_size
(('dp', 'tp'), 4)
>>> parse_plan("sp2-tp2").degrees
(('tp', 2),)
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import PaddleExtError

PLANS = {
    "dp2": "data parallel on 2 ranks",
    "tp2": "tensor parallel (column/row) on 2 ranks",
    "dp2-tp2": "2x2 mesh: data parallel x tensor parallel",
    "zero1-tp2": "2x2 mesh: ZeRO stage 1 on dp x tensor parallel",
    "zero2": "ZeRO stage 2 on 2 ranks",
    "zero3-tp2": "2x2 mesh: ZeRO stage 3 on dp x tensor parallel",
    "sp2-tp2": "tensor parallel with sequence-parallel norms on 2 ranks",
    "dp2-sp2-tp2": "2x2 mesh: data parallel x sequence+tensor parallel",
    "pp2": "pipeline parallel, 2 stages",
    "tp2-pp2": "2x2 mesh: tensor parallel x pipeline parallel",
    "dp2-pp2": "2x2 mesh: data parallel x pipeline parallel",
    "pp2-sp2-tp2": "2x2 mesh: pipeline parallel x sequence+tensor parallel",
}

_PART = re.compile(r"(dp|tp|pp|sp|zero[123])(?:d?(\d+))?\Z")
_ORDER = ("pp", "dp", "tp")  # mesh dim order: pipeline outermost, tensor parallel innermost


class PlanError(PaddleExtError):
    """A plan name that cannot be built; the message lists the documented plans."""


@dataclass(frozen=True)
class Plan:
    name: str
    degrees: tuple          # (("dp", 2), ("tp", 2)) in mesh-dim order
    zero_stage: int = 0
    sequence_parallel: bool = False

    @property
    def mesh_dims(self) -> tuple:
        return tuple(d for d, _ in self.degrees)

    @property
    def mesh_shape(self) -> tuple:
        return tuple(n for _, n in self.degrees)

    @property
    def world_size(self) -> int:
        size = 1
        for _, n in self.degrees:
            size *= n
        return size

    def degree(self, dim: str) -> int:
        return dict(self.degrees).get(dim, 1)


def parse_plan(name: str) -> Plan:
    """Parse a plan name such as ``dp2-tp2`` or ``zero3-tp2`` (see the module docstring)."""
    known = ", ".join(PLANS)
    if not isinstance(name, str) or not name:
        raise PlanError(f"plan name {name!r} is empty; use one of {known}")
    degrees, zero, sp = {}, 0, None
    for part in name.lower().split("-"):
        m = _PART.match(part)
        if not m:
            raise PlanError(f"plan {name!r}: cannot read {part!r}; parts are dpN, zeroK (K=1,2,3; zeroKdN for degree N), tpN, spN, ppN, "
                            f"joined by '-'; documented plans: {known}")
        kind = m.group(1)
        if m.group(2) is None and not kind.startswith("zero"):
            raise PlanError(f"plan {name!r}: {part!r} needs a degree, e.g. {kind}2; documented plans: {known}")
        n = int(m.group(2) or 2)
        if n < 2:
            raise PlanError(f"plan {name!r}: {part!r} has degree {n}; a parallel degree is at least 2 (drop the part)")
        if kind.startswith("zero"):
            zero, kind = int(kind[4]), "dp"
        if kind == "sp":
            sp = n
            continue
        if kind in degrees:
            raise PlanError(f"plan {name!r} sets {kind} twice; give each of dp/zero, tp, pp once")
        degrees[kind] = n
    if sp is not None and degrees.get("tp") != sp:
        raise PlanError(f"plan {name!r}: sequence parallel sp{sp} runs on the tensor-parallel ranks, so it needs tp{sp} too "
                        f"(e.g. sp{sp}-tp{sp})")
    if not degrees:
        raise PlanError(f"plan {name!r} has no parallel part; use one of {known}")
    ordered = tuple((d, degrees[d]) for d in _ORDER if d in degrees)
    return Plan(name=name.lower(), degrees=ordered, zero_stage=zero, sequence_parallel=sp is not None)
