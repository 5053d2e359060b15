"""ZBAuto's tuned candidates and the lower bounds that say when a schedule is optimal.

**Shape.** One stage per rank, backward split. Rank ``r`` runs ZB-H1/ZB-H2's phase order
(:func:`._phases.split_backward_phases`) with its own ``warmup[r]`` and ``defer[r]``:
``warmup[r]`` forwards, then F/I pairs, then F/I/W, the ``W`` of microbatch ``k`` right after
the ``I`` of microbatch ``k + defer[r]``, the last ``defer[r]`` W's at the end. Its peak is
``warmup[r] + defer[r] + 1`` live activations (fewer when ``m`` is small), kept ``<= K``.

**Start.** ZB-H2's ``(2(p-1-r), 2r)`` when ``K >= 2p - 1``; below, the same shape scaled to
``K``: ``warmup = round(a (p-1-r))``, ``defer = round(a r)`` with ``a = (K-1)/(p-1)`` (ZB-H1's
``(p-1-r, r)`` at ``K = p``), and below ``K = p`` the warm-up capped at ``K - 1``.

**Repair.** The longest stage span ends with the last microbatch's backward coming back down the
pipeline. Walking that chain from the rank with the longest span towards the last rank, the first
rank whose ``I`` waited on itself (busy with a ``W`` when the input arrived) defers one more
``W``; if no rank waited, the last rank does (so its last ``I`` runs earlier and more of its
W's fill its tail). A rank without a free memory slot trades one warm-up forward for the
deferral. A step is kept if the longest span (then the makespan) does not grow; at most ``2p``
steps, each one timed order (:func:`.zb_auto_model.evaluate`), so the result is deterministic.

**Lower bounds** (one stage per rank, ``T = F + B + W``, ``A = (p-1)(F + B + 2L)``,
``k = min(K, m)``):

* makespan ``>= (p-1)(F + L) + mT``: the last rank starts after ``p - 1`` forwards and messages;
* longest stage span ``>= mT + max(0, A + W - kW, A + F - kF)``, from rank 0 (which starts at
  0): (a) when the last rank ends its last ``I`` it has at most ``k`` W's left (each one holds an
  activation), so that ``I`` ends at ``>= (p-1)(F+L) + mT - kW``; it then needs ``p - 1``
  hops of ``B + L`` to reach rank 0, which still runs that ``I``'s ``W``; (b) rank 0's first
  ``I`` cannot start before ``A + F`` and before it rank 0 can run only forwards, at most ``k``.

At ``K = 2p`` on the zero-bubble paper's Table 9 costs the repaired shape meets both bounds
(tests/unit/test_zb_auto_objectives.py): it is ZB-H2 with the last two ranks deferring one more
``W``, so it is optimal in both objectives under paddle-ext's memory model.

>>> from .zb_auto_model import Problem
>>> pb = Problem.one_stage_per_rank(8, 32, (29.802, 29.428, 19.530), 0.577, 16)  # 6.2B, Table 9
>>> found = tuned_orders(pb)
>>> best = min(found, key=lambda x: (x[1].max_span, x[1].makespan))
>>> [round(x, 3) for x in (best[1].makespan, best[1].max_span)], [round(x, 3) for x in lower_bounds(pb)]
([2732.973, 2650.058], [2732.973, 2650.058])
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from ._phases import expand_phases, split_backward_phases
from .zb_auto_model import Order, Problem, Timing, evaluate, peak_memory

__all__ = ["lower_bounds", "start_shape", "shape_order", "tuned_orders"]

_EPS = 1e-9


def lower_bounds(pb: Problem) -> Tuple[float, float]:
    """``(makespan, longest stage span)`` no schedule of ``pb`` beats (module doc; one stage per rank)."""
    if pb.stage_ranks != tuple(range(pb.n_ranks)):
        raise ValueError("lower_bounds handles one stage per rank")
    p, m, lat = pb.n_ranks, pb.n_microbatches, pb.latency
    f, b, w = pb.forward, pb.backward_input, pb.backward_weight
    work = m * (f + b + w)
    k = min(pb.memory_limit, m)
    chain = (p - 1) * (f + b + 2 * lat)
    return (p - 1) * (f + lat) + work, work + max(0.0, chain + w - k * w, chain + f - k * f)


def start_shape(n_ranks: int, memory_limit: int) -> Tuple[List[int], List[int]]:
    """``(warmup, defer)`` per rank before any repair (module doc, "Start")."""
    p, k = n_ranks, memory_limit
    if p == 1:
        return [0], [0]
    if k >= 2 * p - 1:
        return [2 * (p - 1 - r) for r in range(p)], [2 * r for r in range(p)]
    a = max(1.0, (k - 1) / (p - 1))
    warmup = [min(k - 1, int(a * (p - 1 - r) + 0.5)) for r in range(p)]
    return warmup, [max(0, min(int(a * r + 0.5), k - 1 - warmup[r])) for r in range(p)]


def shape_order(pb: Problem, rank: int, warmup: int, defer: int) -> List[Tuple[str, int, int]]:
    """One rank's order of the shape (stage ``rank`` on rank ``rank``)."""
    m = pb.n_microbatches
    return [(a.kind.value, rank, a.microbatch)
            for a in expand_phases(split_backward_phases(m, warmup=warmup, defer=defer), (rank,), m)]


def tuned_orders(pb: Problem, max_steps: Optional[int] = None) -> List[Tuple[Tuple[Sequence[int], Sequence[int]],
                                                                         Timing, Order]]:
    """The start shape and every kept repair step (module doc), as ``((warmup, defer), timing,
    order)``; steps whose order deadlocks or exceeds the memory limit are skipped."""
    p = pb.n_ranks
    warmup, defer = start_shape(p, pb.memory_limit)
    orders = [shape_order(pb, r, warmup[r], defer[r]) for r in range(p)]
    if max(peak_memory(pb, orders)) > pb.memory_limit:
        return []
    record: dict = {}
    timing = evaluate(pb, orders, record)
    if timing is None:
        return []
    found = [((tuple(warmup), tuple(defer)), timing, [list(o) for o in orders])]
    best = (timing.max_span, timing.makespan)
    for _ in range(2 * p if max_steps is None else max_steps):
        r = _waiting_rank(pb, timing, record)
        if r is None:
            break
        saved = orders[r], warmup[r], defer[r]
        order_r = shape_order(pb, r, warmup[r], defer[r] + 1)
        if max(peak_memory(pb, [order_r])) > pb.memory_limit:
            if warmup[r] == 0:
                break
            warmup[r] -= 1
            order_r = shape_order(pb, r, warmup[r], defer[r] + 1)
        defer[r] += 1
        orders[r] = order_r
        new_record: dict = {}
        new = evaluate(pb, orders, new_record)
        if new is None or (new.max_span, new.makespan) > (best[0] + _EPS, best[1] + _EPS):
            orders[r], warmup[r], defer[r] = saved
            break
        timing, record, best = new, new_record, (new.max_span, new.makespan)
        found.append(((tuple(warmup), tuple(defer)), timing, [list(o) for o in orders]))
    return found


def _waiting_rank(pb: Problem, timing: Timing, record: dict) -> Optional[int]:
    """The rank to defer one more ``W`` (module doc, "Repair"); ``None`` if the last rank is the
    longest or nothing on the chain can change."""
    p, last_mb = pb.n_ranks, pb.n_microbatches - 1
    spans = [end - start for start, end in timing.spans]
    critical = max(range(p), key=lambda r: (spans[r], -r))
    if critical == p - 1:
        return None
    for r in range(critical + 1, p - 1):
        start, ready = record[(r, last_mb)]
        if start > ready + _EPS:
            return r
    return p - 1
