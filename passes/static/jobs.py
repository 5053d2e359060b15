"""Compile an IR schedule into one rank's static job list (pure: no Paddle import).

A static pipeline plan is, per rank, an ordered list of ``(job type, micro-batch)``; each job
type names one sub-program of the rank's program. :func:`compile_jobs` generates the named
schedule, lowers it with :func:`~paddle_ext.passes.lowering.add_send_recv` (blocking-send safe:
both ends of every channel meet their messages in one global order), moves each receive to just
before its use and each send to just after its producer, per channel in the same order
(:func:`~.async_order.late_receives`: the static gloo send never waits) and translates the rank's
actions, with the chunk (the rank's local stage index, as Paddle's VPP numbers it) as suffix:

====================  =================  ====================  =================
IR action             job type           IR action             job type
====================  =================  ====================  =================
``F``                 ``forward{c}``     ``RECV_F``            ``recv_forward{c}``
``B``                 ``backward{c}``    ``SEND_F``            ``send_forward{c}``
``I``                 ``backward_b{c}``  ``RECV_B``            ``recv_backward{c}``
``W``                 ``backward_w{c}``  ``SEND_B``            ``send_backward{c}``
====================  =================  ====================  =================

and ends with ``("optimizer", 0)``. Without a backward split (``split_backward=False``, the
fallback when a program cannot be split) ``I`` becomes ``backward{c}`` and ``W`` is dropped;
with a split, a full ``B`` (DualPipeV mixes both) becomes ``backward_b{c}`` then ``backward_w{c}``.

>>> [f"{t}:{mb}" for t, mb in compile_jobs("1F1B", 2, 3, rank=1)]
['recv_forward0:0', 'forward0:0', 'backward0:0', 'send_backward0:0', 'recv_forward0:1', 'forward0:1', 'backward0:1', 'send_backward0:1', 'recv_forward0:2', 'forward0:2', 'backward0:2', 'send_backward0:2', 'optimizer:0']
>>> [t for t, _ in compile_jobs("ZBV", 2, 2, rank=0)][:6]
['forward0', 'send_forward0', 'forward0', 'send_forward0', 'recv_forward1', 'forward1']
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from paddle_ext.errors import ScheduleError
from paddle_ext.passes.lowering import add_send_recv
from paddle_ext.passes.schedule_ir import Kind
from paddle_ext.passes.schedules import get_schedule_info
from paddle_ext.passes.static.async_order import late_receives
from paddle_ext.passes.stage_placement import stages_on_rank

__all__ = ["JOB_OF_KIND", "OPTIMIZER", "compile_jobs", "jobs_of_rank", "job_types", "rank_schedule", "format_jobs", "run_kind", "uses_split"]

OPTIMIZER = "optimizer"
JOB_OF_KIND: Dict[Kind, str] = {
    Kind.F: "forward", Kind.B: "backward", Kind.I: "backward_b", Kind.W: "backward_w",
    Kind.SEND_F: "send_forward", Kind.RECV_F: "recv_forward",
    Kind.SEND_B: "send_backward", Kind.RECV_B: "recv_backward",
}

Job = Tuple[str, int]


def rank_schedule(name: str, pp_degree: int, n_microbatches: int, n_chunks: Optional[int] = None):
    """``(info, lowered schedule, n_chunks)`` for the named schedule (all ranks)."""
    info = get_schedule_info(name)
    chunks = info.default_chunks if n_chunks is None else n_chunks
    schedule = info.generate(pp_degree, n_microbatches, chunks)
    return info, late_receives(add_send_recv(schedule), pp_degree, chunks, info.placement), chunks


def run_kind(kind: Kind, split: bool) -> Kind:
    """The kind an action runs as: without a backward split an ``I`` is the full backward."""
    return Kind.B if kind is Kind.I and not split else kind


def uses_split(lowered) -> bool:
    """True if the schedule has ``W`` actions (a backward split into ``I`` and ``W``)."""
    return any(a is not None and a.kind is Kind.W for actions in lowered.values() for a in actions)


def compile_jobs(name: str, pp_degree: int, n_microbatches: int, n_chunks: Optional[int] = None, *,
                 rank: int, split_backward: Optional[bool] = None) -> Tuple[Job, ...]:
    """Rank ``rank``'s ``(job type, micro-batch)`` list for schedule ``name`` (see module doc).

    ``split_backward`` defaults to whether the schedule has ``W`` actions; when it splits, a
    full ``B`` (DualPipeV mixes them) becomes ``backward_b{c}`` then ``backward_w{c}``."""
    _check_rank(rank, pp_degree)
    return jobs_of_rank(rank_schedule(name, pp_degree, n_microbatches, n_chunks), rank=rank,
                        split_backward=split_backward)


def jobs_of_rank(generated, *, rank: int, split_backward: Optional[bool] = None) -> Tuple[Job, ...]:
    """:func:`compile_jobs` from a schedule :func:`rank_schedule` already generated and lowered
    (``generated`` is its ``(info, lowered, n_chunks)``), so a caller that inspects the
    schedule first (:func:`uses_split`) does not generate it twice."""
    info, lowered, chunks = generated
    pp_degree = len(lowered)
    _check_rank(rank, pp_degree)
    split = uses_split(lowered) if split_backward is None else split_backward
    chunk_of = {stage: c for c, stage in enumerate(stages_on_rank(rank, pp_degree, chunks, info.placement))}
    jobs: List[Job] = []
    for action in lowered[rank]:
        if action is None:
            continue
        kind, chunk, mb = action.kind, chunk_of[action.stage], action.microbatch
        if kind is Kind.W and not split:
            continue
        kind = run_kind(kind, split)
        if kind is Kind.B and split:
            jobs += [(f"backward_b{chunk}", mb), (f"backward_w{chunk}", mb)]
            continue
        jobs.append((f"{JOB_OF_KIND[kind]}{chunk}", mb))
    jobs.append((OPTIMIZER, 0))
    return tuple(jobs)


def _check_rank(rank: int, pp_degree: int) -> None:
    if not 0 <= rank < pp_degree:
        raise ScheduleError(f"pipeline rank {rank} is outside 0..{pp_degree - 1}; pp_stage must be "
                            f"below pp_degree={pp_degree}")


def job_types(jobs) -> Tuple[str, ...]:
    """The distinct job types of ``jobs`` in first-use order."""
    return tuple(dict.fromkeys(t for t, _ in jobs))


def format_jobs(jobs, width: int = 100) -> str:
    """``forward0:0 send_forward0:0 ...`` wrapped at ``width`` characters."""
    words, lines, line = [f"{t}:{mb}" for t, mb in jobs], [], ""
    for w in words:
        if line and len(line) + 1 + len(w) > width:
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}" if line else w
    return "\n".join(lines + [line] if line else lines)
