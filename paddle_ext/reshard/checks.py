"""Rank-side helpers to check reshards against dense tensors (tests, the matrix, the benchmark).

A case is plain data (picklable) so that a parent process can send many of them to a launch:
``Case(id, shape, src_mesh, src, dst_mesh, dst)`` with meshes as nested lists of global ranks and
placements as text. On every rank :func:`run_case` builds the source DistTensor from exact local
parts (``paddle_ext.reshard.exact``; every rank computes the same parts from the seed), reshards
it with paddle-ext or with Paddle's native ``dist.reshard``, and returns this rank's local result.
The parent reassembles the result from all ranks with :func:`assemble_case` and compares it with
the dense tensor bit for bit.
"""
from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field

import numpy as np

import paddle
import paddle.distributed as dist

from ..compat.ports.internals import expected_place, local_value
from ..placements import DistSpec, parse_placements
from .exact import dense_for, exact_locals
from .layout import coord_in
from .planner import plan_bytes, plan_reshard
from ..compat.ports.convert import to_paddle_placements
from ..placements import format_placements
from ..simulated_ranks import assemble
from .dygraph import placements_of, reshard
from .route import original_reshard


@dataclass(frozen=True)
class Case:
    id: str
    shape: tuple
    src_mesh: tuple  # nested tuples of global ranks
    src: str
    dst_mesh: tuple
    dst: str
    dtype: str = "float32"
    seed: int = 0


def _shape_ranks(mesh) -> tuple[tuple, tuple]:
    arr = np.array(mesh)
    return tuple(arr.shape), tuple(int(r) for r in arr.reshape(-1))


def specs(case: Case) -> tuple[DistSpec, DistSpec, tuple, tuple]:
    s_shape, s_ranks = _shape_ranks(case.src_mesh)
    d_shape, d_ranks = _shape_ranks(case.dst_mesh)
    return (DistSpec(case.shape, s_shape, parse_placements(case.src)),
            DistSpec(case.shape, d_shape, parse_placements(case.dst)), s_ranks, d_ranks)


def expected_bytes(case: Case) -> int:
    src, dst, s_ranks, d_ranks = specs(case)
    return plan_bytes(plan_reshard(src, dst, src_ranks=s_ranks, dst_ranks=d_ranks,
                                   itemsize=np.dtype(case.dtype).itemsize))


def make_source(case: Case):
    """This rank's source DistTensor for ``case`` (exact integer-valued parts)."""

    src, _, s_ranks, _ = specs(case)
    mesh = dist.ProcessMesh(np.array(case.src_mesh).tolist())
    dense = dense_for(case.shape, np.dtype(case.dtype), case.seed)
    c = coord_in(s_ranks, src.mesh_shape, dist.get_rank())
    local = exact_locals(dense, src, case.seed)[c] if c is not None else \
        np.zeros([0] * len(case.shape), dtype=case.dtype)
    place = expected_place()
    return paddle.Tensor(paddle.to_tensor(local), dims=list(case.shape), process_mesh=mesh,
                         placements=to_paddle_placements(src.placements), place=place)


@dataclass
class Outcome:
    local: object = None          # this rank's local result (numpy) or None off-mesh
    error: str = ""
    placements: str = ""          # the placements Paddle reports on the result
    received: int = 0             # bytes this rank received (paddle-ext only)
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)


def run_case(case: Case, native: bool = False, check: bool = True) -> Outcome:
    """Reshard ``case`` on this rank (paddle-ext, or Paddle's own when ``native``)."""

    out = Outcome()
    _, dst, _, d_ranks = specs(case)
    try:
        x = make_source(case)
        mesh = dist.ProcessMesh(np.array(case.dst_mesh).tolist())
        target = to_paddle_placements(dst.placements)
        stats: dict = {}
        before = local_value(x).numpy().copy()
        t0 = time.perf_counter()
        if native:
            y = original_reshard()(x, mesh, target)
        else:
            y = reshard(x, mesh, target, check=check, stats=stats)
            if not np.array_equal(local_value(x).numpy(), before):  # the executor writes in place
                raise AssertionError(f"reshard wrote into its source tensor ({case.id})")
        out.seconds = time.perf_counter() - t0
        out.received = stats.get("received_bytes", 0)
        out.placements = format_placements(placements_of(y))
        if dist.get_rank() in d_ranks:
            out.local = local_value(y).numpy()
    except Exception as exc:  # reported per case; the parent classifies it
        out.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
        out.extra["traceback"] = traceback.format_exc()[-1500:]
    return out


def run_cases(cases, native: bool = False, check: bool = True) -> dict:
    """Every case in order on this rank; returns ``{case.id: Outcome}``."""
    return {c.id: run_case(c, native, check) for c in cases}


def assemble_case(case: Case, per_rank: list) -> tuple[bool, str]:
    """(bit-exact?, why) from each rank's :class:`Outcome` of ``case``."""

    _, dst, _, d_ranks = specs(case)
    errors = {r: o.error for r, o in enumerate(per_rank) if o.error}
    if errors:
        return False, "; ".join(f"rank {r}: {e}" for r, e in sorted(errors.items()))
    local = {}
    for i, c in enumerate(dst.coords()):
        arr = per_rank[d_ranks[i]].local
        if arr is None:
            return False, f"rank {d_ranks[i]} returned no local value"
        local[c] = arr
    dense = dense_for(case.shape, np.dtype(case.dtype), case.seed)
    try:
        got = assemble(local, dst, rtol=0, atol=0)
    except Exception as exc:
        return False, f"wrong layout: {exc}"
    if got.shape != dense.shape or not np.array_equal(got, dense):
        diff = np.abs(got.astype(np.float64) - dense).max() if got.shape == dense.shape else "shape"
        return False, f"wrong values (max abs diff {diff})"
    placed = {o.placements for r, o in enumerate(per_rank) if r in d_ranks}
    want = case.dst.replace(" ", "")
    if placed != {str(want)} and placed != {format_pl(case.dst)}:
        return False, f"values right but placements reported as {sorted(placed)}, asked {case.dst}"
    return True, ""


def format_pl(text: str) -> str:

    return format_placements(parse_placements(text))


__all__ = ["Case", "Outcome", "assemble_case", "expected_bytes", "make_source", "run_case",
           "run_cases", "specs"]
