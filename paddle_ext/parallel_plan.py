"""A parallel plan: the one value the planner prints, the demo runs and the real-model runner runs (pure).

A :class:`ParallelPlan` says how a model is spread over ``pp * dp * tp`` ranks: the mesh
``[pp, dp, tp]`` (pipeline outermost, tensor parallel innermost; a dim of degree 1 is left out of
the mesh), the ZeRO level on ``dp`` (0: plain data parallel), sequence parallelism on the ``tp``
ranks, the pipeline schedule with its chunks per rank and microbatches, and the global batch.

It has one text form, which ``paddle-ext plan`` prints and :func:`parse_plan` reads back::

    pp2-zero2d4-sp8-tp8:DualPipeV:m32
    |   |       |   |   |         '-- 32 microbatches per step
    |   |       |   |   '-- the pipeline schedule (paddle_ext.passes.schedules)
    |   |       |   '-- tensor parallel on 8 ranks
    |   |       '-- sequence parallel on those 8 ranks (spN needs tpN)
    |   '-- data parallel on 4 ranks with ZeRO stage 2 (dpN without ZeRO; zeroK alone is zeroKd2)
    '-- pipeline parallel over 2 ranks

Parts may come in any order (``tp2-pp2`` reads as ``pp2-tp2``); ``single`` is one rank. The
schedule part is ``:Schedule:mM`` and, when the chunks per rank differ from the schedule's own,
``:vV``. A ``ppN`` plan without a schedule part has its schedule chosen later
(:meth:`ParallelPlan.with_schedule`). The batch is not part of the text (``parse_plan(text,
batch=...)``).

>>> p = parse_plan("pp2-zero2d4-sp8-tp8:DualPipeV:m32", batch=128)
>>> p.mesh_dims, p.mesh_shape, p.zero, p.sp, p.chunks, p.world_size
(('pp', 'dp', 'tp'), (2, 4, 8), 2, True, 2, 64)
>>> str(p), parse_plan(str(p), batch=128) == p
('pp2-zero2d4-sp8-tp8:DualPipeV:m32', True)
>>> str(parse_plan("zero3-tp2")), parse_plan("tp2-pp2").layout, str(ParallelPlan())
('zero3d2-tp2', 'pp2-tp2', 'single')
"""
from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from typing import Iterable, Optional, Tuple

from .errors import PaddleExtError
from .errors import ScheduleError
from .passes.schedules import get_schedule_info

MESH_ORDER = ("pp", "dp", "tp")   # mesh dim order: pipeline outermost, tensor parallel innermost
ZERO_LEVELS = (0, 1, 2, 3)
_PART = re.compile(r"(dp|tp|pp|sp|zero[0-9]+)(?:d?(\d+))?\Z")
_HOW = "parts are dpN, zeroK (K=1,2,3; zeroKdN for degree N), tpN, spN, ppN, joined by '-'"
_EXAMPLE = ("'single' is one rank; a pipeline plan may add ':Schedule:mM', e.g. "
            "pp2-zero2d4-sp8-tp8:DualPipeV:m32")


class PlanError(PaddleExtError):
    """A plan that cannot be read or built; the message says which part and what would work."""


def _positive(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlanError(f"plan field {name}={value!r}: expected a positive int")


@dataclass(frozen=True)
class ParallelPlan:
    """How a model is spread over ranks (see the module docstring); ``str(plan)`` is its text form.

    ``chunks=0`` (the default) means the schedule's own chunks per rank (1 without a schedule).
    """

    pp: int = 1
    dp: int = 1
    tp: int = 1
    zero: int = 0
    sp: bool = False
    schedule: Optional[str] = None
    chunks: int = 0
    microbatches: int = 1
    batch: int = 8

    def __post_init__(self):
        for name in ("pp", "dp", "tp", "microbatches", "batch"):
            _positive(name, getattr(self, name))
        if self.zero not in ZERO_LEVELS or isinstance(self.zero, bool):
            raise PlanError(f"plan field zero={self.zero!r}: the ZeRO level is one of {ZERO_LEVELS}")
        if self.zero and self.dp == 1:
            raise PlanError(f"plan with zero={self.zero} and dp=1: ZeRO shards over the data-parallel ranks, "
                            f"so it needs dp >= 2 (or zero=0)")
        if self.sp and self.tp == 1:
            raise PlanError("plan with sp=True and tp=1: sequence parallelism runs on the tensor-parallel ranks, "
                            "so it needs tp >= 2")
        if self.schedule is None:
            if self.chunks not in (0, 1):
                raise PlanError(f"plan with chunks={self.chunks} and no schedule: chunks per rank belong to a "
                                f"pipeline schedule; give schedule= too")
            object.__setattr__(self, "chunks", 1)
            return
        if self.pp == 1:
            raise PlanError(f"plan with schedule={self.schedule!r} and pp=1: a pipeline schedule needs pp >= 2 "
                            f"(or schedule=None)")
        try:
            info = get_schedule_info(self.schedule)
        except ScheduleError as exc:
            raise PlanError(f"plan: {exc}") from None
        object.__setattr__(self, "schedule", info.name)
        if self.chunks == 0:
            object.__setattr__(self, "chunks", info.default_chunks)
        _positive("chunks", self.chunks)

    # -- the mesh -------------------------------------------------------------------------------
    @property
    def world_size(self) -> int:
        return self.pp * self.dp * self.tp

    @property
    def degrees(self) -> Tuple[Tuple[str, int], ...]:
        """``(("pp", 2), ("dp", 4), ...)``: the mesh dims of degree > 1, in mesh order."""
        return tuple((d, n) for d, n in zip(MESH_ORDER, (self.pp, self.dp, self.tp)) if n > 1)

    @property
    def mesh_dims(self) -> Tuple[str, ...]:
        return tuple(d for d, _ in self.degrees)

    @property
    def mesh_shape(self) -> Tuple[int, ...]:
        return tuple(n for _, n in self.degrees)

    def degree(self, dim: str) -> int:
        """The degree of mesh dim ``dim`` ("pp", "dp", "tp"; "mp" is "tp"), 1 when not parallel."""
        if dim == "mp":
            dim = "tp"
        if dim not in MESH_ORDER:
            raise PlanError(f"mesh dim {dim!r}: a plan's mesh dims are {MESH_ORDER} ('mp' is 'tp')")
        return getattr(self, dim)

    # -- the pipeline ---------------------------------------------------------------------------
    @property
    def n_stages(self) -> int:
        return self.pp * self.chunks

    @property
    def microbatch_samples(self) -> int:
        """Samples in one microbatch on one data-parallel replica."""
        return self.batch // (self.dp * self.microbatches)

    def with_schedule(self, schedule: Optional[str], microbatches: int = 1, chunks: int = 0) -> "ParallelPlan":
        """The same mesh with another pipeline schedule (``None`` and 1 microbatch without pipeline)."""
        if self.pp == 1:
            return replace(self, schedule=None, chunks=1, microbatches=1)
        return replace(self, schedule=schedule, chunks=chunks, microbatches=microbatches)

    def unbuilt(self, builds: Iterable[str]) -> Tuple[str, ...]:
        """The fields this plan sets away from a default plan's that are not in ``builds``: what a
        runner building only ``builds`` would silently drop, so its ``runnable`` refuses the plan."""
        default = ParallelPlan()
        return tuple(f.name for f in fields(self)
                     if f.name not in builds and getattr(self, f.name) != getattr(default, f.name))

    # -- the text form --------------------------------------------------------------------------
    @property
    def layout(self) -> str:
        """The mesh part of the text form: ``pp2-zero2d4-sp8-tp8`` (``single`` on one rank)."""
        parts = [f"pp{self.pp}"] if self.pp > 1 else []
        if self.dp > 1:
            parts.append(f"zero{self.zero}d{self.dp}" if self.zero else f"dp{self.dp}")
        if self.tp > 1:
            parts += ([f"sp{self.tp}"] if self.sp else []) + [f"tp{self.tp}"]
        return "-".join(parts) or "single"

    @property
    def name(self) -> str:
        """The text form: ``pp2-zero2d4-sp8-tp8:DualPipeV:m32`` (:func:`parse_plan` reads it)."""
        if self.schedule is None:
            return self.layout
        own = get_schedule_info(self.schedule).default_chunks
        return f"{self.layout}:{self.schedule}:m{self.microbatches}" + (f":v{self.chunks}" if self.chunks != own else "")

    def __str__(self) -> str:
        return self.name


def _read_layout(text: str, layout: str, hint: str) -> dict:
    fields, sp = {}, None
    for part in layout.split("-"):
        m = _PART.match(part)
        if not m:
            raise PlanError(f"plan {text!r}: cannot read {part!r}; {_HOW}; {hint}")
        kind, digits = m.group(1), m.group(2)
        if digits is None and not kind.startswith("zero"):
            raise PlanError(f"plan {text!r}: {part!r} needs a degree, e.g. {kind}2; {hint}")
        n = int(digits or 2)
        if n < 2:
            raise PlanError(f"plan {text!r}: {part!r} has degree {n}; a parallel degree is at least 2 (drop the part)")
        if kind.startswith("zero"):
            level = int(kind[4:])
            if level not in ZERO_LEVELS[1:]:
                raise PlanError(f"plan {text!r}: {part!r} has ZeRO stage {level}; stages are 1, 2, 3 (dpN for none)")
            fields["zero"], kind = level, "dp"
        if kind == "sp":
            sp = n
            continue
        if kind in fields:
            raise PlanError(f"plan {text!r} sets {kind} twice; give each of dp/zero, tp, pp once")
        fields[kind] = n
    if sp is not None and fields.get("tp") != sp:
        raise PlanError(f"plan {text!r}: sequence parallel sp{sp} runs on the tensor-parallel ranks, so it needs "
                        f"tp{sp} too (e.g. sp{sp}-tp{sp})")
    fields["sp"] = sp is not None
    return fields


def _read_schedule(text: str, parts) -> dict:
    if len(parts) not in (2, 3) or not re.fullmatch(r"m\d+", parts[1]) \
            or (len(parts) == 3 and not re.fullmatch(r"v\d+", parts[2])):
        raise PlanError(f"plan {text!r}: the schedule part is ':Schedule:mM' (optionally ':vV' for V chunks per "
                        f"rank), e.g. pp2-tp2:1F1B:m4")
    out = {"schedule": parts[0], "microbatches": int(parts[1][1:])}
    if len(parts) == 3:
        out["chunks"] = int(parts[2][1:])
    return out


def parse_plan(text: str, batch: int = 8, hint: str = _EXAMPLE) -> ParallelPlan:
    """Read a plan's text form (see the module docstring); :class:`PlanError` says what is wrong
    and ends with ``hint`` (what would work: by default the form of a pipeline plan)."""
    if not isinstance(text, str) or not text.strip():
        raise PlanError(f"plan {text!r} is empty; {hint}")
    layout, *schedule = text.strip().split(":")
    fields = {} if layout.lower() == "single" else _read_layout(text, layout.lower(), hint)
    if schedule:
        if fields.get("pp", 1) == 1:
            raise PlanError(f"plan {text!r}: a schedule part needs a ppN part (pipeline parallelism)")
        fields.update(_read_schedule(text, schedule))
    return ParallelPlan(batch=batch, **fields)


FIELDS = tuple(f.name for f in fields(ParallelPlan))   # every dimension a runner must build or refuse

__all__ = ["FIELDS", "MESH_ORDER", "ParallelPlan", "PlanError", "ZERO_LEVELS", "parse_plan"]
