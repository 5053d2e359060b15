"""Exact search for ZBAuto on small sizes: branch and bound over active schedules.

The search space is every order of ``F``, ``I`` and ``W`` on each rank (one stage per rank)
that respects the dependencies and the memory limit, with each kind kept in microbatch order
on a rank (microbatches are identical, so swapping two of them in a rank's order changes no
time). A schedule is built from time zero on: at each node the operation that could finish
first fixes a rank and a time, and the branches are the operations of that rank that could start
before it (Giffler and Thompson's rule; every schedule in which no operation can start earlier
without delaying another, an *active* schedule, is reached, and one of them is optimal because
left-shifting keeps every rank's order and so its memory). A branch is cut when a lower bound
(on each rank, the earliest start of an operation, from the dependencies, the per-kind order and
the memory limit, plus all the work that must follow it there) reaches the best makespan found. The first incumbent is the best
heuristic's, so the result is "proved optimal" or "no better schedule found within the
time limit".

>>> from paddle_ext.passes.schedules.zb_auto_model import Problem
>>> res = exact_search(Problem.one_stage_per_rank(2, 2, (1, 1, 1), 0, 2), time_limit_s=5)
>>> res.makespan, res.proved
(7.0, True)
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import List, Optional

from .zb_auto_model import Order, Problem

__all__ = ["ExactResult", "exact_search"]


@dataclass(frozen=True)
class ExactResult:
    """The best order found (``None`` if none beat ``upper_bound``), its makespan, whether the
    search finished (so the makespan is optimal), nodes visited and seconds spent."""

    order: Optional[Order]
    makespan: float
    proved: bool
    nodes: int
    seconds: float


class _Timeout(Exception):
    pass


def exact_search(pb: Problem, upper_bound: float = float("inf"), time_limit_s: float = 5.0) -> ExactResult:
    """The least makespan of ``pb`` (one stage per rank) below ``upper_bound``, with its order."""
    if pb.stage_ranks != tuple(range(pb.n_ranks)):
        raise ValueError("exact_search handles one stage per rank")
    p, m, lat, limit = pb.n_ranks, pb.n_microbatches, pb.latency, pb.memory_limit
    cf, ci, cw = pb.forward, pb.backward_input, pb.backward_weight
    n_f, n_i, n_w = [0] * p, [0] * p, [0] * p
    free = [0.0] * p
    end_f = [[None] * m for _ in range(p)]
    end_i = [[None] * m for _ in range(p)]
    work = [m * (cf + ci + cw)] * p
    rest = list(work)
    todo = [3 * m] * p  # operations left per rank
    order: List[list] = [[] for _ in range(p)]
    best = {"makespan": upper_bound, "order": None}
    nodes = [0]
    deadline = time.monotonic() + time_limit_s

    def eligible(r):
        out = []
        j = n_f[r]
        if j < m and n_f[r] - n_w[r] < limit:
            dep = 0.0 if r == 0 else end_f[r - 1][j]
            if dep is not None:
                out.append(("F", j, max(free[r], dep + (lat if r else 0.0)), cf))
        j = n_i[r]
        if j < n_f[r]:
            dep = end_f[r][j] if r == p - 1 else end_i[r + 1][j]
            if dep is not None:
                ready = max(end_f[r][j], dep + (lat if r != p - 1 else 0.0))
                out.append(("I", j, max(free[r], ready), ci))
        j = n_w[r]
        if j < n_i[r]:
            out.append(("W", j, max(free[r], end_i[r][j]), cw))
        return out

    def dfs():
        nodes[0] += 1
        if nodes[0] % 2048 == 0 and time.monotonic() > deadline:
            raise _Timeout
        if not any(todo):
            makespan = max(free)
            if makespan < best["makespan"] - 1e-9:
                best["makespan"], best["order"] = makespan, [list(o) for o in order]
            return
        if _lower_bound(pb, free, rest, n_f, n_i, n_w, end_f, end_i) >= best["makespan"] - 1e-9:
            return
        ops = [(r,) + op for r in range(p) if todo[r] for op in eligible(r)]
        if not ops:
            return  # memory deadlock on this branch
        r_star, _, _, est, dur = min(ops, key=lambda o: o[3] + o[4])
        c_star = est + dur
        branch = sorted((o for o in ops if o[0] == r_star and o[3] < c_star - 1e-12), key=lambda o: (o[3], o[1] != "I"))
        for r, kind, j, est, dur in branch:
            saved = free[r]
            free[r] = est + dur
            rest[r] -= dur
            todo[r] -= 1
            order[r].append((kind, r, j))
            if kind == "F":
                end_f[r][j] = free[r]
                n_f[r] += 1
            elif kind == "I":
                end_i[r][j] = free[r]
                n_i[r] += 1
            else:
                n_w[r] += 1
            dfs()
            if kind == "F":
                end_f[r][j] = None
                n_f[r] -= 1
            elif kind == "I":
                end_i[r][j] = None
                n_i[r] -= 1
            else:
                n_w[r] -= 1
            order[r].pop()
            rest[r] += dur
            todo[r] += 1
            free[r] = saved

    start = time.monotonic()
    proved = True
    try:
        dfs()
    except _Timeout:
        proved = False
    return ExactResult(best["order"], best["makespan"], proved, nodes[0], time.monotonic() - start)


def _lower_bound(pb: Problem, free, rest, n_f, n_i, n_w, end_f, end_i) -> float:
    """A lower bound on the makespan of any completion of the partial schedule (``dfs`` in
    :func:`exact_search` prunes with it). Earliest starts ("heads") of the unscheduled operations
    from the partial schedule, the chains between ranks, the per-kind order on a rank and the memory limit (F of microbatch
    j waits for W of j - limit); then on each rank, an operation's head plus everything that
    must follow it there."""
    p, m, lat, limit = pb.n_ranks, pb.n_microbatches, pb.latency, pb.memory_limit
    cf, ci, cw = pb.forward, pb.backward_input, pb.backward_weight
    bound = max(free[r] + rest[r] for r in range(p))
    h_f = [[0.0] * m for _ in range(p)]
    h_i = [[0.0] * m for _ in range(p)]
    for j in range(m):
        for r in range(p):
            if j < n_f[r]:
                h_f[r][j] = end_f[r][j] - cf
                continue
            h = free[r]
            if r:
                h = max(h, h_f[r - 1][j] + cf + lat)
            if j > n_f[r]:
                h = max(h, h_f[r][j - 1] + cf)
            if j >= limit and j - limit >= n_w[r]:
                h = max(h, h_i[r][j - limit] + ci + cw)  # W of j - limit frees the memory
            h_f[r][j] = h
            bound = max(bound, h + (m - j) * (cf + ci + cw))
        for r in range(p - 1, -1, -1):
            if j < n_i[r]:
                h_i[r][j] = end_i[r][j] - ci
                continue
            h = max(free[r], h_f[r][j] + cf)
            if r < p - 1:
                h = max(h, h_i[r + 1][j] + ci + lat)
            if j > n_i[r]:
                h = max(h, h_i[r][j - 1] + ci)
            h_i[r][j] = h
            bound = max(bound, h + (m - j) * (ci + cw))
    return bound
