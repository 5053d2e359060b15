"""Merge a rank's consecutive static jobs of one micro-batch into one job (pure: no Paddle import).

Paddle's executor pays a fixed cost per job (set-up and dispatch; about 0.1 ms on a CPU core,
measured with ``tools/bench_static.py --profile``), and paddle-ext's job lists name every send
and receive as a job of its own: a two-chunk schedule ran 81 jobs per step where Paddle's own
FThenB runs 17. A merged job runs the union of its members' ops in program order, so two jobs
merge only when running them in program order is running them in the schedule's order:

* they are consecutive on the rank and of the same micro-batch (the executor keeps one scope
  per micro-batch);
* the later job's ops all come after the earlier jobs' ops in the program (:func:`program_key`:
  the forward by chunk, then the backward by chunk in reverse, each as receive, compute, send;
  the pass checks it for every send, which must not wait behind later work),
  or both are compute of the same chunk's backward (``backward_b`` and ``backward_w`` of one
  micro-batch: their ops interleave in the program, and nothing in between is a message);
* neither is the optimizer, nor a type the caller keeps alone (the forward of the last stage:
  Paddle's Engine fetches the loss from one job type, which must then be the same for every
  micro-batch; :func:`alone_types`).

A merged job type is its members' types joined by ``+`` (``recv_forward0+forward0+send_forward0``).

>>> merge_jobs([("recv_forward0", 0), ("forward0", 0), ("send_forward0", 0), ("forward0", 1), ("optimizer", 0)])
(('recv_forward0+forward0+send_forward0', 0), ('forward0', 1), ('optimizer', 0))
>>> merge_jobs([("backward_b1", 3), ("send_backward1", 3), ("backward_w1", 3)])
(('backward_b1+send_backward1', 3), ('backward_w1', 3))
"""
from __future__ import annotations

import re
from typing import Iterable, List, Sequence, Tuple

from paddle_ext.passes.stage_placement import stages_on_rank

__all__ = ["SEP", "program_key", "merge_jobs", "members", "groups", "alone_types"]

SEP = "+"
_TYPE = re.compile(r"^(recv_forward|forward|send_forward|recv_backward|backward_b|backward_w|backward|send_backward)"
                   r"(\d+)$")
_SUB = {"recv_forward": 0, "forward": 1, "send_forward": 2, "recv_backward": 0, "backward": 1, "backward_b": 1,
        "backward_w": 1, "send_backward": 2}

Job = Tuple[str, int]


def program_key(job_type: str) -> Tuple[int, int, int]:
    """Where a job type's ops sit in the rank's program: ``(phase, chunk order, part)``; the
    forward (phase 0) runs chunks up, the backward (phase 1) down; part is receive 0, compute 1,
    send 2. Raises ``ValueError`` for the optimizer or an unknown type.

    >>> sorted(["backward_b0", "send_forward1", "forward0", "recv_backward1"], key=program_key)
    ['forward0', 'send_forward1', 'recv_backward1', 'backward_b0']
    """
    found = _TYPE.match(job_type)
    if not found:
        raise ValueError(f"{job_type!r} is not a per-chunk pipeline job type")
    kind, chunk = found.group(1), int(found.group(2))
    backward = kind.endswith("backward") or kind.startswith("backward")
    return (1, -chunk, _SUB[kind]) if backward else (0, chunk, _SUB[kind])


def _is_compute(job_type: str) -> bool:
    return not job_type.startswith(("send_", "recv_"))


def _fits(group: Sequence[str], job_type: str) -> bool:
    """True if ``job_type`` may run after ``group`` in one job (module doc)."""
    try:
        key = program_key(job_type)
        keys = [program_key(t) for t in group]
    except ValueError:
        return False
    if all(key > k for k in keys):
        return True
    # backward_b / backward_w of one chunk: same key, compute only, nothing later in the group
    return _is_compute(job_type) and key == max(keys) and all(_is_compute(t) for t in group if program_key(t) == key)


def groups(jobs: Sequence[Job], alone: Iterable[str] = ()) -> List[List[int]]:
    """The positions of ``jobs`` each merged job takes, in order; types in ``alone`` stay jobs
    of their own."""
    alone = frozenset(alone)
    out: List[List[int]] = []
    for i, (job_type, mb) in enumerate(jobs):
        if out and job_type not in alone:
            last = out[-1]
            members_ = [jobs[j][0] for j in last]
            if (jobs[last[-1]][1] == mb and job_type not in members_ and not alone.intersection(members_)
                    and _fits(members_, job_type)):
                last.append(i)
                continue
        out.append([i])
    return out


def merge_jobs(jobs: Sequence[Job], alone: Iterable[str] = ()) -> Tuple[Job, ...]:
    """``jobs`` with each run of mergeable jobs replaced by one job (module doc)."""
    return tuple((SEP.join(jobs[i][0] for i in g), jobs[g[0]][1]) for g in groups(jobs, alone))


def alone_types(rank: int, pp_degree: int, n_chunks: int, placement: str) -> Tuple[str, ...]:
    """The job types rank ``rank`` keeps unmerged: the forward of the last stage, if it holds it.

    >>> alone_types(0, 2, 2, "v"), alone_types(1, 2, 1, "loop"), alone_types(0, 2, 1, "loop")
    (('forward1',), ('forward0',), ())
    """
    stages = list(stages_on_rank(rank, pp_degree, n_chunks, placement))
    last = pp_degree * n_chunks - 1
    return (f"forward{stages.index(last)}",) if last in stages else ()


def members(job_type: str) -> Tuple[str, ...]:
    """The job types a (possibly merged) job type runs."""
    return tuple(job_type.split(SEP))
