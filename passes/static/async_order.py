"""Reorder a lowered schedule's messages for sends that never wait (pure: no Paddle import).

:func:`~paddle_ext.passes.lowering.add_send_recv` places sends and receives so that blocking
sends (a rendezvous) cannot deadlock: a receive can sit well before the compute that needs it
(on 1F1B's last rank, the receive of micro-batch k + 1 before the backward of k), so the rank
waits for a message while it has work. paddle-ext's static gloo send queues its message and
returns; a rank waits only in receives. :func:`late_receives` therefore moves each receive as
late as it can -- right before the compute that uses it -- and each send as early as it can --
right after the compute that makes it -- keeping, per peer, the order of the sends and the order
of the receives, so each FIFO channel still pairs the same messages (the lowering made both
orders agree). Compute is never reordered. A receive moved later never makes a rank wait for
anything it did not wait for before, so the result cannot deadlock where the input could not.

>>> from paddle_ext.passes import add_send_recv, generate_schedule, format_schedule
>>> print(format_schedule(late_receives(add_send_recv(generate_schedule("1F1B", 2, 3)), 2, 1, "loop")))
rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0F2 0SEND_F2 0RECV_B1 0B1 0RECV_B2 0B2
rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1 1RECV_F2 1F2 1B2 1SEND_B2
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from paddle_ext.passes.schedule_ir import Action, Kind
from paddle_ext.passes.stage_placement import stage_to_rank_map

__all__ = ["late_receives"]

SENDS, RECVS = (Kind.SEND_F, Kind.SEND_B), (Kind.RECV_F, Kind.RECV_B)


def _peer(a: Action, rank_of: Dict[int, int]) -> int:
    forward = a.kind in (Kind.SEND_F, Kind.RECV_F)
    other = a.stage + (1 if forward else -1) if a.kind in SENDS else a.stage + (-1 if forward else 1)
    return rank_of[other]


def _slot(compute: Sequence[Action], a: Action) -> int:
    """Position in ``compute`` right after the producer (a send) or at the consumer (a receive)."""
    s, mb = a.stage, a.microbatch
    if a.kind is Kind.SEND_F:
        return 1 + next(i for i, c in enumerate(compute) if c.kind is Kind.F and (c.stage, c.microbatch) == (s, mb))
    if a.kind is Kind.SEND_B:
        return 1 + next(i for i, c in enumerate(compute)
                        if c.kind in (Kind.B, Kind.I) and (c.stage, c.microbatch) == (s, mb))
    wanted = (Kind.F,) if a.kind is Kind.RECV_F else (Kind.B, Kind.I)
    return next(i for i, c in enumerate(compute) if c.kind in wanted and (c.stage, c.microbatch) == (s, mb))


def _rank(actions: Sequence[Optional[Action]], rank_of: Dict[int, int]) -> List[Action]:
    acts = [a for a in actions if a is not None]
    compute = [a for a in acts if a.kind not in SENDS + RECVS]
    # each message's slot (insert before compute[slot]); per peer and direction, keep the order
    slots: List[Tuple[int, int, int, Action]] = []  # (slot, receive?, original position, action)
    by_peer: Dict[Tuple[bool, int], List[Tuple[int, Action]]] = {}
    for pos, a in enumerate(acts):
        if a.kind in SENDS + RECVS:
            by_peer.setdefault((a.kind in SENDS, _peer(a, rank_of)), []).append((pos, a))
    for (is_send, _), items in by_peer.items():
        want = [_slot(compute, a) for _, a in items]
        if is_send:  # as early as possible, never before an earlier send to that peer
            for i in range(1, len(want)):
                want[i] = max(want[i], want[i - 1])
        else:  # as late as possible, never after a later receive from that peer
            for i in range(len(want) - 2, -1, -1):
                want[i] = min(want[i], want[i + 1])
        slots += [(w, 0 if is_send else 1, pos, a) for w, (pos, a) in zip(want, items)]
    slots.sort(key=lambda x: x[:3])  # at one slot: the sends first, then the receives that may wait
    out: List[Action] = []
    k = 0
    for i, c in enumerate(compute + [None]):
        while k < len(slots) and slots[k][0] == i:
            out.append(slots[k][3])
            k += 1
        if c is not None:
            out.append(c)
    return out


def late_receives(lowered, n_ranks: int, n_chunks: int, placement: str):
    """``lowered`` (from ``add_send_recv``) with receives late and sends early (module doc)."""
    rank_of = stage_to_rank_map(n_ranks, n_chunks, placement)
    return {rank: _rank(actions, rank_of) for rank, actions in lowered.items()}
