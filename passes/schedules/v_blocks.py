"""V-Min and V-Half orders built from the controllable-memory paper's V-shaped building block.

Qi et al., "Pipeline Parallelism with Controllable Memory" (2024), build a pipeline schedule by
repeating one *building block* (each rank's ``F``, ``I`` and ``W`` of one microbatch, at fixed
offsets) every ``6`` unit slots, the rank's work per microbatch on a V (two chunks, ``F = I = W
= 1``). The block's *lifespan* on a rank (first ``F`` to last ``W``) divided by that interval is
the number of microbatches alive at once, so the block sets the peak activation memory. The
facts used here are the paper's and its authors' published offsets; the code is our own.

Placement ``v``: rank ``r`` holds chunk 0 = stage ``r`` and chunk 1 = stage ``2p - 1 - r``. A
rank's block has four timed actions, in unit slots (``g`` a gap that keeps the four apart modulo
6 when ``p`` is a multiple of 3, resp. even):

==========  ==================  ==================  ======================  ======================
block       F chunk 0           F chunk 1           I chunk 1               I chunk 0
==========  ==================  ==================  ======================  ======================
V-Min       ``r``               ``2p - 1 - r``      ``2p + g + r``          ``4p + g - 1 - r``
            (``g = 2`` if ``p % 3 == 0`` else 0)
V-Half      ``2r``              ``3p - 2 - r``      ``3p + g - 1 + 2r``     ``6p + g - 2 - r``
            (``g = 3`` if ``p`` even else 0)
==========  ==================  ==================  ======================  ======================

Rank 0's chunk-0 activation lives about ``4p`` slots in V-Min (``6p`` in V-Half), its chunk-1
one a few: about ``2p/3`` (``p``) stage activations at once, a third (a half) of 1F1B's ``2p``.

The full schedule: block ``j`` of microbatch ``j`` at offset ``6j``; every ``W`` in the first free
slot after its ``I`` (chunk 1's before chunk 0's); then *squeezed*: in slot order, each action of
the warm-up (before rank 0's first ``I`` of chunk 0) and of the cool-down (after rank 0's last
``F``) moves to the earliest free slot after its inputs, if that keeps every rank within the
repeated blocks' peak; the steady part stays as repeated. The paper squeezes twice (once with
the ``W``'s placed, once with ``W`` left to fill the free slots) and times the order as early as
the inputs allow in between; so do we. The result is an order per rank (unit costs decide the
order; the simulator times it at any costs). It is built for any ``p >= 1``, ``m >= 1``; its
peak is ``2 min(budget, m)`` stage activations, the budget being ``(p + 4) // 3`` (V-Min) or
``(p + 2) // 2`` (V-Half) microbatches. Past ``1.75 p + 8`` microbatches the steady part is exactly
periodic, so the rows of that size are spliced (one period repeated) rather than recomputed:
the same order (tested), in time that does not grow with ``m``.

>>> from paddle_ext.passes import simulate_schedule
>>> from paddle_ext.passes.schedules.zb_auto_model import to_schedule
>>> r = simulate_schedule(to_schedule(block_order("VHalf", 4, 8)))
>>> r.makespan, max(r.peak_activations)
(53.0, 6)
>>> [o for o in block_offsets("VMin", 3)]
[(0, 5, 8, 13), (1, 4, 9, 12), (2, 3, 10, 11)]
"""
from __future__ import annotations

from bisect import bisect_left
from itertools import accumulate
from typing import List, Optional, Sequence, Tuple

from .zb_auto_model import Order

__all__ = ["BLOCKS", "PERIOD", "block_offsets", "block_rows", "block_order", "direct_order"]

PERIOD = 6  # unit slots per microbatch on a rank: F, I, W of two chunks
BLOCKS = ("VMin", "VHalf")

# lanes of a rank's row: 0 F chunk 0, 1 F chunk 1, 2 I chunk 1, 3 I chunk 0, 4 W chunk 1, 5 W chunk 0
# (with one W lane, lane 4 holds both chunks' W's in slot order)
_F0, _F1, _I1, _I0, _W = 0, 1, 2, 3, 4
Rows = List[List[List[int]]]  # rows[rank][lane] = slots, one per microbatch, increasing


def block_offsets(name: str, p: int) -> List[Tuple[int, int, int, int]]:
    """Per rank, the slots of (F chunk 0, F chunk 1, I chunk 1, I chunk 0) in one building block."""
    if name == "VMin":
        g = 2 if p % 3 == 0 else 0
        return [(r, 2 * p - 1 - r, 2 * p + g + r, 4 * p + g - 1 - r) for r in range(p)]
    if name == "VHalf":
        g = 3 if p % 2 == 0 else 0
        return [(2 * r, 3 * p - 2 - r, 3 * p + g - 1 + 2 * r, 6 * p + g - 2 - r) for r in range(p)]
    raise ValueError(f"no building block named {name!r}; known: {', '.join(BLOCKS)}")


def _fill_w(rows: Rows, split: bool) -> Rows:
    """Add the W lane(s): each free slot, in order, takes a pending W (chunk 1's first when
    ``split``); the W's left after the last action follow it one per slot."""
    out = []
    for lanes in rows:
        taken = set()
        for lane in lanes[:4]:
            taken.update(lane)
        bound = max(lane[-1] for lane in lanes[:4])
        free = [t for t in range(bound + 1) if t not in taken]
        i1, i0 = lanes[_I1], lanes[_I0]
        w1: List[int] = []
        w0: List[int] = []
        a = b = 0  # I's of chunk 1 / chunk 0 seen before the current slot
        m = len(i1)
        for t in free:
            while a < m and i1[a] < t:
                a += 1
            while b < m and i0[b] < t:
                b += 1
            if split:
                if a > len(w1):
                    w1.append(t)
                elif b > len(w0):
                    w0.append(t)
            elif a + b > len(w1):
                w1.append(t)
        t = bound
        for lane in ((w1, w0) if split else (w1,)):
            while len(lane) < (m if split else 2 * m):
                t += 1
                lane.append(t)
        out.append(lanes[:4] + ([w1, w0] if split else [w1]))
    return out


def _deps(rows: Rows, p: int, r: int, lane: int, j: int) -> int:
    """The latest slot among the inputs of action (rank ``r``, ``lane``, microbatch ``j``), -1 if none."""
    own = rows[r]
    d = own[lane][j - 1] if j else -1
    if lane < _W:
        if lane in (_F0, _I1):
            if r:
                d = max(d, rows[r - 1][lane][j])
        elif r < p - 1:
            d = max(d, rows[r + 1][lane][j])
        if lane:
            d = max(d, own[lane - 1][j])
    else:  # the j-th W follows the j-th I of either chunk
        d = max(d, _kth(own[_I1], own[_I0], j))
    return d


def _kth(a: Sequence[int], b: Sequence[int], k: int) -> int:
    """The ``k``-th smallest (0-based) of two increasing lists with distinct values."""
    lo, hi = max(0, k + 1 - len(b)), min(k + 1, len(a))
    while lo < hi:  # lo..hi: how many of the k + 1 smallest come from a
        i = (lo + hi) // 2
        if a[i] < b[k - i]:
            lo = i + 1
        else:
            hi = i
    i = lo
    return max(a[i - 1] if i else -1, b[k - i] if k - i >= 0 else -1)


def _walk_implicit_w(lanes_at: Sequence[int], start: int, cur: int, pending: int, stop: int):
    """Memory along a row whose W's run in free slots: from slot ``start`` with ``cur`` live and
    ``pending`` W's, through slot ``stop``; yields (slot, cur, pending) after each slot."""
    for t in range(start, stop + 1):
        lane = lanes_at[t] if t < len(lanes_at) else -1
        if lane < 0:
            if pending:
                cur -= 1
                pending -= 1
        elif lane <= _F1:
            cur += 1
        else:
            pending += 1
        yield t, cur, pending


def _squeeze(rows: Rows, p: int, with_w: bool) -> Rows:
    """One squeeze pass (module doc): move warm-up (only ``with_w``) and cool-down actions to
    the earliest free slot after their inputs that keeps every rank within the current peak."""
    m = len(rows[0][_F0])
    k1 = (rows[0][_I0][0], 0, _I0, 0)  # the steady part starts at rank 0's first I of chunk 0 ...
    # ... and ends at the first last-microbatch F of chunk 0 after it (if any)
    k2 = min([key for key in ((lanes[_F0][m - 1], r, _F0, m - 1) for r, lanes in enumerate(rows)) if key > k1],
             default=None)
    size = max(lane[-1] for lanes in rows for lane in lanes) + 2
    lanes_at = []
    for lanes in rows:
        at = [-1] * size
        for lane, slots in enumerate(lanes):
            for t in slots:
                at[t] = lane
        lanes_at.append(at)
    if with_w:  # live activations after each slot: F adds one, W frees one
        delta = {_F0: 1, _F1: 1, _W: -1}
        live = [list(accumulate(delta.get(lane, 0) for lane in at)) for at in lanes_at]
        cap = max(max(x) for x in live)
    else:  # live and pending W's after each slot, the W's running in free slots
        live, pend = [], []
        for at in lanes_at:
            walk = list(_walk_implicit_w(at, 0, 0, 0, size - 1))
            live.append([c for _, c, _ in walk])
            pend.append([w for _, _, w in walk])
        cap = max(max(x) for x in live)
    moving = []  # (slot, rank, lane, microbatch) of the warm-up and cool-down actions, in slot order
    for r, lanes in enumerate(rows):
        for lane, slots in enumerate(lanes):
            if with_w:
                moving.extend((slots[j], r, lane, j) for j in range(bisect_left(slots, k1[0])))
            if k2 is not None:
                moving.extend(key for key in ((slots[j], r, lane, j) for j in range(bisect_left(slots, k2[0]),
                                                                                     len(slots))) if key > k2)
    moving.sort()
    for t1, r, lane, j in moving:
        lo = _deps(rows, p, r, lane, j) + 1
        at = lanes_at[r]
        t0 = t1
        if with_w:
            x = live[r]
            floor = lo
            if lane <= _F1:  # an F moved earlier holds one more activation until t1: no slot at the cap
                seg = x[lo:t1]
                if cap in seg:
                    floor = t1 - seg[::-1].index(cap)
            t0 = _first_free(at, floor, t1)
            if t0 < t1 and lane != _I1 and lane != _I0:
                step = 1 if lane <= _F1 else -1
                x[t0:t1] = [v + step for v in x[t0:t1]]
        else:
            x, w = live[r], pend[r]
            t = _first_free(at, lo, t1)
            while t < t1:
                at[t], at[t1] = lane, -1
                ok, new = _try_window(at, x, w, t, t1, cap)
                at[t], at[t1] = -1, lane
                if ok:
                    t0 = t
                    for s, c, q in new:
                        x[s], w[s] = c, q
                    break
                t = _first_free(at, t + 1, t1)
        if t0 < t1:
            at[t0], at[t1] = lane, -1
            rows[r][lane][j] = t0
    return rows


def _first_free(at: List[int], lo: int, hi: int) -> int:
    """The first free slot in ``[lo, hi)``, else ``hi``."""
    try:
        return at.index(-1, lo, hi)
    except ValueError:
        return hi


def _try_window(at, live, pend, t0, t1, cap):
    """With the row already changed (an action moved from ``t1`` to ``t0``), walk from ``t0``
    until the memory state meets the old one after ``t1``; ok if the peak stays ``<= cap``."""
    cur, q = (live[t0 - 1], pend[t0 - 1]) if t0 else (0, 0)
    new = []
    for t, c, w in _walk_implicit_w(at, t0, cur, q, len(live) - 1):
        if c > cap:
            return False, ()
        if t >= t1 and c == live[t] and w == pend[t]:
            break
        new.append((t, c, w))
    return True, new


def _asap(rows: Rows, p: int) -> Rows:
    """Start times, unit costs, of every action run in its rank's slot order as early as its
    inputs allow (the W's: after the previous action only)."""
    events = []
    for r, lanes in enumerate(rows):
        for lane, slots in enumerate(lanes):
            events.extend((t, r, lane, j) for j, t in enumerate(slots))
    events.sort()
    out = [[[0] * len(slots) for slots in lanes] for lanes in rows]
    free = [0] * p
    for _, r, lane, j in events:
        own = out[r]
        start = free[r]
        if j:
            start = max(start, own[lane][j - 1] + 1)
        if lane < _W:
            if lane in (_F0, _I1):
                if r:
                    start = max(start, out[r - 1][lane][j] + 1)
            elif r < p - 1:
                start = max(start, out[r + 1][lane][j] + 1)
            if lane:
                start = max(start, own[lane - 1][j] + 1)
        own[lane][j] = start
        free[r] = start + 1
    return out


def block_rows(name: str, p: int, m: int) -> Rows:
    """The squeezed rows (module doc): ``rows[rank][lane]`` = slot of each microbatch's action,
    lanes F chunk 0, F chunk 1, I chunk 1, I chunk 0, W chunk 1, W chunk 0."""
    rows: Rows = [[list(range(o, o + PERIOD * m, PERIOD)) for o in offs] for offs in block_offsets(name, p)]
    rows = _asap(_squeeze(_fill_w(rows, split=False), p, with_w=True), p)
    rows = [lanes[:4] for lanes in rows]
    rows = _squeeze(rows, p, with_w=False)
    rows = [lanes[:4] for lanes in _asap(_fill_w(rows, split=False), p)]
    return _fill_w(rows, split=True)


def _cut(p: int) -> Tuple[int, int]:
    """``(c, M)``: past ``M`` microbatches, the rows of ``M`` cut before microbatch ``c``'s first
    forward on each rank and repeated there give the rows of any larger ``m`` (the warm-up is over
    by microbatch about ``1.1 p`` on every rank, the cool-down starts about ``p / 3`` before the
    end; checked against the full construction in tests/unit/test_v_blocks.py)."""
    c = p + p // 4 + 4
    return c, c + p // 2 + 4


def _rank_order(lanes: List[List[int]], r: int, p: int) -> List[Tuple[int, str, int, int]]:
    up = 2 * p - 1 - r
    what = (("F", r), ("F", up), ("I", up), ("I", r), ("W", up), ("W", r))
    return [(t, what[lane][0], what[lane][1], j)
            for t, lane, j in sorted((t, lane, j) for lane, slots in enumerate(lanes) for j, t in enumerate(slots))]


def _splice(rows: Rows, p: int, m: int, c: int) -> Optional[Order]:
    """The order for ``m`` microbatches from the rows of fewer: on each rank the period (6
    slots) before microbatch ``c``'s first forward is repeated ``m - M`` times, microbatch
    numbers counting on; None if the rows are not periodic there."""
    extra = m - len(rows[0][_F0])
    order: Order = []
    for r, lanes in enumerate(rows):
        acts = _rank_order(lanes, r, p)
        cut = lanes[_F0][c]
        first = bisect_left(acts, (cut,))
        start, stop = bisect_left(acts, (cut - PERIOD,)), bisect_left(acts, (cut + PERIOD,))
        window = [(k, s, j) for _, k, s, j in acts[start:first]]
        if [(t - PERIOD, k, s, j - 1) for t, k, s, j in acts[first:stop]] != acts[start:first]:
            return None
        seq = [(k, s, j) for _, k, s, j in acts[:first]]
        seq.extend([(k, s, j + n) for n in range(1, extra + 1) for k, s, j in window])
        seq.extend([(k, s, j + extra) for _, k, s, j in acts[first:]])
        order.append(seq)
    return order


def block_order(name: str, p: int, m: int) -> Order:
    """The ``name`` ("VMin" or "VHalf") building-block order on ``p`` ranks, ``m`` microbatches:
    one list per rank of ``(kind, stage, microbatch)``, kind in ``"FIW"`` (module doc). Beyond a
    size where the steady part repeats (:func:`_cut`), the rows of the smaller size are spliced
    (the same order, computed in time independent of ``m``)."""
    c, few = _cut(p)
    if m > few:
        order = _splice(block_rows(name, p, few), p, m, c)
        if order is not None:
            return order
    return direct_order(name, p, m)


def direct_order(name: str, p: int, m: int) -> Order:
    """:func:`block_order` without splicing (for tests: the two must agree)."""
    return [[(k, s, j) for _, k, s, j in _rank_order(lanes, r, p)] for r, lanes in enumerate(block_rows(name, p, m))]
