"""ZBAuto's heuristic: greedy list scheduling under a memory limit, then local improvement.

The greedy follows the zero-bubble paper's recipe for its automatic schedules, in our words:
each rank, whenever it is free, runs the backward for inputs (``I``, on the critical path) if
its input is there; otherwise a forward (``F``) if memory allows and the rank's warm-up cap is
not reached (optionally only if no ``I`` is known to arrive while the ``F`` would run, so the
``F`` creates no bubble); otherwise a pending weight backward (``W``), which fills what would
be a bubble and frees memory; otherwise it waits. The ranks are advanced in time order, so a
rank decides only on inputs that have already been produced.

A :class:`Policy` sets the per-rank warm-up cap (the number of microbatches forwarded but not
yet backwarded, ``factor * (p - r)`` shaped like 1F1B at factor 1 and ZB-H2 at factor 2),
whether an ``F`` may delay a known ``I``, whether a full rank runs ``W`` before ``I``, and an
optional admission interval (microbatch ``j`` enters the pipeline no earlier than ``j`` times a
rank's work per microbatch, scaled), which spaces the microbatches as a repeated building block
does and keeps the tight V-memory schedules flowing. :func:`heuristic_orders` runs a handful of policies and
keeps the fastest; :func:`improve` then swaps neighbouring actions while the makespan drops,
within a budget of timed orders.

With two stages on a rank (the V placement) a forward of the lower stage reserves a slot for
the same microbatch's forward on the upper stage, so memory never blocks the way down the V.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Callable, Iterable, List, Optional, Tuple

from .zb_auto_model import Order, Problem, Timing, evaluate, peak_memory

__all__ = ["Policy", "greedy_order", "default_policies", "heuristic_orders", "improve", "score", "span_score"]

_INF = float("inf")


@dataclass(frozen=True)
class Policy:
    """Knobs of one greedy run (see the module doc)."""

    warmup_factor: float = 1.0  # in-flight cap of rank r: factor * (p - r) - (factor - 1), at least 1
    f_may_delay_i: bool = True  # run an F even if a known I arrives before it would finish
    reserve_upper: bool = True  # V: a lower-stage F reserves the upper-stage slot (never deadlocks on memory)
    w_before_i_when_full: bool = False  # memory full: run a pending W before an I (frees memory sooner)
    admit_every: float = 0.0  # microbatch j enters stage 0 no earlier than j * admit_every * (a rank's work per mb)

    def cap(self, rank: int, n_ranks: int) -> float:
        if math.isinf(self.warmup_factor):
            return _INF
        return max(1, round(self.warmup_factor * (n_ranks - rank) - (self.warmup_factor - 1)))


def default_policies(n_chunks: int = 1) -> Tuple[Policy, ...]:
    """The policies :func:`heuristic_orders` tries for ``n_chunks`` stages per rank."""
    one = tuple(Policy(f, d) for f in (1.0, 1.25, 1.5, 1.75, 2.0, 3.0, _INF) for d in (True, False))
    if n_chunks == 1:
        return one
    # on the V: the policies that won somewhere on p 2..8, m p..4p, the three V budgets (unit costs)
    return (Policy(_INF, True, True), Policy(_INF, True, False), Policy(_INF, True, False, True)) + \
        tuple(Policy(_INF, True, False, w, a) for w in (True, False) for a in (1.0, 1.1, 1.2, 1.34, 1.5))


def score(timing: Timing) -> Tuple[float, float]:
    """What the search minimises: the makespan, then the longest rank span (steady-state bubble)."""
    return (round(timing.makespan, 9), round(timing.max_span, 9))


def span_score(timing: Timing) -> Tuple[float, float]:
    """The other order (ZBAuto's ``objective="span"``): the longest rank span, then the makespan."""
    return (round(timing.max_span, 9), round(timing.makespan, 9))


def greedy_order(pb: Problem, policy: Policy) -> Optional[Order]:
    """One greedy run (module doc); ``None`` if the policy deadlocks under the memory limit."""
    p, m, last, lat, ranks = pb.n_ranks, pb.n_microbatches, pb.n_stages - 1, pb.latency, pb.stage_ranks
    dur = {"F": pb.forward, "I": pb.backward_input, "W": pb.backward_weight}
    local = [pb.local_stages(r) for r in range(p)]
    end_f = [[None] * m for _ in range(pb.n_stages)]
    end_i = [[None] * m for _ in range(pb.n_stages)]
    n_f, n_i = [0] * pb.n_stages, [0] * pb.n_stages
    pending_w: List[List[Tuple[int, int]]] = [[] for _ in range(p)]  # (stage, mb) in I order
    live, reserved = [0] * p, [0] * p
    free = [0.0] * p
    todo = [3 * m * len(local[r]) for r in range(p)]
    order: Order = [[] for _ in range(p)]
    caps = [policy.cap(r, p) for r in range(p)]
    admit = policy.admit_every * len(local[0]) * (pb.forward + pb.backward_input + pb.backward_weight)
    blocked = set()  # ranks with nothing to do and nothing on its way, since the last action

    def input_time(kind: str, s: int, j: int, r: int) -> Optional[float]:
        """When the input of ``kind`` (stage ``s``, microbatch ``j``) is on rank ``r``; None if not made yet."""
        if kind == "F":
            if s == 0:
                return j * admit
            e = end_f[s - 1][j]
            return None if e is None else (e + lat if ranks[s - 1] != r else e)
        own = end_f[s][j]
        if own is None:
            return None
        if s == last:
            return own
        e = end_i[s + 1][j]
        return None if e is None else max(own, e + lat if ranks[s + 1] != r else e)

    heap = [(0.0, x) for x in range(p) if todo[x]]  # (free time, rank); stale entries are skipped
    while heap:
        t, r = heapq.heappop(heap)
        if t != free[r] or not todo[r]:
            continue
        stages = local[r]
        # the I that can start soonest, and the next known I arrival
        best_i, i_ready, next_i = None, _INF, _INF
        for s in reversed(stages):
            j = n_i[s]
            if j < n_f[s]:
                ready = input_time("I", s, j, r)
                if ready is not None and ready < i_ready:
                    best_i, i_ready = (s, j), ready
        if best_i is not None and i_ready > t:
            next_i, best_i = i_ready, None
        choice = None
        full = live[r] + (reserved[r] if policy.reserve_upper else 0) >= pb.memory_limit
        if best_i is not None and policy.w_before_i_when_full and full and pending_w[r]:
            choice = ("W",) + pending_w[r][0]
        elif best_i is not None:
            choice = ("I",) + best_i
        else:
            choice = _pick_forward(pb, policy, r, t, stages, n_f, n_i, live[r], reserved[r], caps[r], next_i,
                                   input_time)
        if choice is None and pending_w[r]:
            choice = ("W",) + pending_w[r][0]
        if choice is None:
            # wait for the next input already on its way; if none, for the other ranks
            waits = [x for x in (input_time(k, s, j, r) for s in stages for k, j in (("F", n_f[s]), ("I", n_i[s]))
                                 if j < m and (k == "F" or j < n_f[s])) if x is not None and x > t]
            others = [free[x] for x in range(p) if x != r and todo[x] and free[x] > t]
            if waits:
                free[r] = min(waits)
                heapq.heappush(heap, (free[r], r))
                continue
            blocked.add(r)
            if all(x in blocked for x in range(p) if todo[x]):
                return None  # every rank waits for another: this policy deadlocks under the limit
            free[r] = min(others) if others else t
            if not others:
                free[r] = t + 1e-9  # let a rank at the same time move first
            heapq.heappush(heap, (free[r], r))
            continue
        blocked.clear()
        kind, s, j = choice
        start = t if kind == "W" else max(t, input_time(kind, s, j, r))
        end = start + dur[kind]
        if kind == "F":
            end_f[s][j] = end
            n_f[s] += 1
            live[r] += 1
            if len(stages) > 1:
                if s == stages[0]:
                    reserved[r] += 1
                else:
                    reserved[r] -= 1
        elif kind == "I":
            end_i[s][j] = end
            n_i[s] += 1
            pending_w[r].append((s, j))
        else:
            pending_w[r].pop(0)
            live[r] -= 1
        order[r].append(choice)
        free[r] = end
        todo[r] -= 1
        if todo[r]:
            heapq.heappush(heap, (end, r))
    return order


def _pick_forward(pb: Problem, policy: Policy, r: int, t: float, stages, n_f, n_i, live: int, reserved: int,
                  cap: int, next_i: float, input_time) -> Optional[Tuple[str, int, int]]:
    """The F that rank ``r`` (free at ``t``, no I ready) may start now, upper stage first, or None:
    its input must be there, memory must allow it (counting the upper stages' reserved slots when
    ``policy.reserve_upper``), a new microbatch must respect the warm-up cap ``cap``, and unless
    ``policy.f_may_delay_i`` it must not delay the I arriving at ``next_i``."""
    m = pb.n_microbatches
    in_flight = sum(n_f[s] - n_i[s] for s in stages)
    for idx in range(len(stages) - 1, -1, -1):  # upper stage first: it is further down the V
        s = stages[idx]
        j = n_f[s]
        if j >= m:
            continue
        ready = input_time("F", s, j, r)
        if ready is None or ready > t:
            continue
        upper = idx > 0  # continues a microbatch already on this rank: no warm-up cap
        if policy.reserve_upper:
            over = not (upper and reserved > 0) and live + reserved + len(stages) - idx > pb.memory_limit
        else:
            over = live + 1 > pb.memory_limit
        if over or (not upper and in_flight >= cap):
            continue
        if not policy.f_may_delay_i and next_i < t + pb.forward and not upper:
            continue
        return ("F", s, j)
    return None


def heuristic_orders(pb: Problem, policies: Iterable[Policy] = ()) -> List[Tuple[Tuple[float, float], Order]]:
    """Every policy's greedy order that fits memory, as ``(score, order)``, best first."""
    found = []
    for policy in tuple(policies) or default_policies(max(len(pb.local_stages(r)) for r in range(pb.n_ranks))):
        order = greedy_order(pb, policy)
        if order is None or max(peak_memory(pb, order)) > pb.memory_limit:
            continue
        timing = evaluate(pb, order)
        if timing is not None:
            found.append((score(timing), order))
    found.sort(key=lambda x: x[0])
    return found


def _depends(a, b) -> bool:
    """True if ``b`` must stay after ``a`` on the same rank (same stage and microbatch, or same
    kind of the same stage: the per-stage FIFO order is kept)."""
    return a[1] == b[1] and (a[2] == b[2] or a[0] == b[0])


def improve(pb: Problem, order: Order, max_evaluations: int = 1000,
            key: Callable[[Timing], Tuple[float, ...]] = score) -> Tuple[Tuple[float, ...], Order]:
    """Local search from ``order``: swap two neighbouring actions of a rank (unless one needs the
    other) and keep the swap when ``key`` (default :func:`score`, makespan first) drops and memory
    still fits; until no swap helps or ``max_evaluations`` orders have been timed (a count, so
    every rank gets the same result)."""
    timing = evaluate(pb, order)
    best = key(timing)
    order = [list(acts) for acts in order]
    left = max_evaluations
    improved = True
    while improved and left > 0:
        improved = False
        for r in range(pb.n_ranks):
            acts = order[r]
            for i in range(1, len(acts)):
                if left <= 0:
                    break
                a, b = acts[i - 1], acts[i]
                if _depends(a, b):
                    continue
                acts[i - 1], acts[i] = b, a
                if max(peak_memory(pb, [acts])) <= pb.memory_limit:
                    left -= 1
                    t = evaluate(pb, order)
                    if t is not None and key(t) < best:
                        best, improved = key(t), True
                        continue
                acts[i - 1], acts[i] = a, b
    return best, order
