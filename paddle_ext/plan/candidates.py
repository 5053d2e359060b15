"""The plans the search considers for a model on N ranks (pure: no Paddle).

Each is a :class:`~paddle_ext.parallel_plan.ParallelPlan` (``Candidate`` is the same class): a
mesh ``pp x dp x tp`` (pipeline outermost, tensor parallel innermost), a ZeRO stage on ``dp``,
sequence parallelism on the ``tp`` ranks, a pipeline schedule with its microbatch count, and the
global batch; its name is the text form the demo and ``parse_plan`` read.
:func:`enumerate_candidates` lists every one that the model's sizes allow:

* ``tp`` divides the heads, the hidden size and the MLP width; ``sp`` needs ``tp > 1`` dividing
  the sequence; ``dp`` divides the batch; ZeRO stages 1-3 need ``dp > 1``;
* ``pp > 1``: every schedule of :mod:`paddle_ext.passes.schedules` with its own chunks per rank
  ``v``, ``pp * v`` stages of at least one layer each, microbatch counts (powers of two) that
  divide the per-replica batch and that the schedule accepts.

Activation recompute is not enumerated: the demo's runner has no recompute, so a plan using it
could not be proved by running (docs/plan.md).

>>> c = enumerate_candidates(n_layers=6, heads=4, hidden=32, ffn=64, seq=16, batch=8, nproc=4, schedules=["1F1B"])
>>> len(c), sum(1 for x in c if x.pp == 1)   # 14 without pipeline; pp2: 4 ZeRO x 3 m + 2 sp x 4 m; pp4: 4 m
(38, 14)
>>> Candidate(pp=2, dp=1, tp=2, sp=True, schedule="ZBV", chunks=2, microbatches=4, batch=8).name
'pp2-sp2-tp2:ZBV:m4'
"""
from __future__ import annotations

from typing import Tuple

from ..parallel_plan import ParallelPlan
from ..passes.schedules import SCHEDULES
from .errors import MeshFactorError


# a plan the search considers is a ParallelPlan: the demo and the real-model runner run the same value
Candidate = ParallelPlan


def factorisations(nproc: int) -> Tuple[Tuple[int, int, int], ...]:
    """Every ``(pp, dp, tp)`` with ``pp * dp * tp == nproc``."""
    out = []
    for pp in range(1, nproc + 1):
        if nproc % pp:
            continue
        for dp in range(1, nproc // pp + 1):
            if (nproc // pp) % dp == 0:
                out.append((pp, dp, nproc // pp // dp))
    return tuple(out)


def _powers_of_two(limit: int, cap: int):
    m = 1
    while m <= min(limit, cap):
        yield m
        m *= 2


def enumerate_candidates(n_layers: int, heads: int, hidden: int, ffn: int, seq: int, batch: int, nproc: int,
                         schedules=None, max_microbatches: int = 64) -> Tuple[ParallelPlan, ...]:
    """All candidates for a model of ``n_layers`` pipeline pieces (embedding, blocks, head) on
    ``nproc`` ranks; :class:`MeshFactorError` when none fits (the message says why)."""
    if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 2:
        raise MeshFactorError(f"--nproc {nproc!r}: a parallel plan needs at least 2 ranks")
    infos = [SCHEDULES[s] for s in (schedules or SCHEDULES)]
    out = []
    for pp, dp, tp in factorisations(nproc):
        if tp > 1 and (heads % tp or hidden % tp or ffn % tp):
            continue
        if batch % dp:
            continue
        zeros = (0, 1, 2, 3) if dp > 1 else (0,)
        sps = (False, True) if tp > 1 and seq % tp == 0 else (False,)
        for zero in zeros:
            for sp in sps:
                if pp == 1:
                    out.append(ParallelPlan(1, dp, tp, zero, sp, None, 1, 1, batch))
                    continue
                for info in infos:
                    v = info.default_chunks
                    if pp * v > n_layers:
                        continue
                    for m in _powers_of_two(batch // dp, max_microbatches):
                        if (batch // dp) % m == 0 and info.valid_sizes(pp, m, v):
                            out.append(ParallelPlan(pp, dp, tp, zero, sp, info.name, v, m, batch))
    if not out:
        raise MeshFactorError(
            f"no plan fits {nproc} ranks: every factorisation pp x dp x tp = {nproc} fails "
            f"(tp must divide heads {heads}, hidden {hidden} and MLP width {ffn}; dp must divide the batch "
            f"{batch}; pp x chunks must be at most the {n_layers} pipeline pieces); choose another --nproc, "
            f"--batch or model size")
    return tuple(out)


__all__ = ["Candidate", "ParallelPlan", "enumerate_candidates", "factorisations"]
