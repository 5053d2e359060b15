"""Point-to-point exchange inside a group of ranks, paired round by round so it never deadlocks.

Every executor that moves blocks between ranks (:mod:`.step_executors`) sends and receives through
:func:`exchange`: ranks meet in the rounds of :func:`~.layout.exchange_rounds`, inside a pair the
lower rank sends first, and several pieces for one peer travel as one flat buffer. Groups of odd
size on a lockstep backend go through :func:`~.odd_exchange.exchange_by_scatter` instead.
"""
from __future__ import annotations

import math
from typing import Sequence

from .backend import ReshardBackend
from .layout import partner_order
from .odd_exchange import exchange_by_scatter


def exchange(be: ReshardBackend, members: Sequence[int], outgoing: dict, incoming: dict,
             targets: dict | None = None) -> dict:
    """Send ``outgoing[peer]`` (lists of arrays) and receive ``incoming[peer]`` (lists of
    ``(shape, like)``) with every peer, pairwise; returns ``{peer: [arrays]}``.

    ``targets[peer]``, when given for a peer that sends one piece, is a contiguous array of that
    piece's size (a view into the caller's output) that the backend's ``recv_into`` fills in
    place, so the piece needs no copy after it arrives.

    Within a pair the lower rank sends first; several pieces for one peer travel as one flat
    buffer. Zero-sized pieces are never sent (both sides know the shapes).

    With ``be.lockstep`` (Paddle's gloo backend), every rank of the world takes part in every
    round and each pair always exchanges one message each way (a one-element dummy when there
    is nothing to send). Paddle tags gloo point-to-point messages with a per-group sequence
    number, so a message only matches when sender and receiver have made the same number of
    calls; lockstep keeps every rank's count equal. A group of odd size cannot be paired in every
    round (a rank sitting out would fall behind), so there every sender scatters its pieces in
    turn (:func:`~.odd_exchange.exchange_by_scatter`), a collective every rank counts alike.
    """
    got: dict = {}
    me = be.rank
    lockstep = be.lockstep
    group = tuple(be.world) if lockstep else tuple(sorted(set(members)))
    if me not in group:
        return got
    if lockstep and len(group) % 2 and len(group) > 1:
        # an odd group cannot pair every rank in every round: one collective per sender instead
        return exchange_by_scatter(be, group, outgoing, incoming, targets)
    for peer in partner_order(group, me):
        outs = [x for x in outgoing.get(peer, []) if be.numel(x)]
        ins = incoming.get(peer, [])
        sizes = [math.prod(shape) for shape, _ in ins]

        def do_send():
            if outs:
                be.send(outs[0] if len(outs) == 1 else be.concat_flat(outs, outs[0]), peer)
            elif lockstep:
                be.send(be.full((1,), 0, be.like), peer)

        def do_recv():
            total = sum(sizes)
            if not total:
                if lockstep:
                    be.recv(1, be.like, peer, count=False)
                if ins:
                    got[peer] = [be.empty(shape, like) for shape, like in ins]
                return
            target = (targets or {}).get(peer)
            if target is not None and len(ins) == 1:
                be.recv_into(target, peer)  # straight into the caller's (output) memory
                got[peer] = [target]
                return
            buf = be.recv(total, ins[0][1], peer)
            parts = be.split_flat(buf, sizes) if len(ins) > 1 else [buf]
            got[peer] = [be.reshape(p, shape) for p, (shape, _) in zip(parts, ins)]

        if me < peer:
            do_send()
            do_recv()
        else:
            do_recv()
            do_send()
    return got


def idle(be: ReshardBackend, phases: int = 1) -> None:
    """A rank outside this step's mesh still walks the exchange rounds (lockstep backends)."""
    for _ in range(phases):
        exchange(be, (), {}, {})


__all__ = ["exchange", "idle"]
