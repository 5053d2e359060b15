"""Exchanges that cannot be paired: groups of odd size, and plan steps that move 0 bytes.

Paddle's gloo process group numbers every call it makes (send, recv and each collective) with
one per-group counter, and a message only matches when the sender's and receiver's numbers are
equal (``ProcessGroupGloo::next_tag``; ``gloo::Slot`` built from it). Point-to-point lockstep
(:func:`~.exchange.exchange`) pairs every rank in every round, each pair making one send and one
receive, so every counter advances alike. A group of odd size cannot be paired that way: in
every round one rank has no partner and would fall behind, and no gloo call advances the counter
without communicating (a barrier does not count, every other call talks to a peer).

:func:`exchange_by_scatter` therefore runs an odd group's exchange as collectives, which every
member counts alike: one small all-gather of the piece sizes, then one scatter per sender, in
group order, each chunk padded to that sender's largest piece (a sender with nothing to send is
skipped by every rank). A rank receives its pieces plus the padding of that sender's chunk
(nothing more on the even splits the planner produces; at most a sender's largest piece each).

:class:`Quiet` is the backend for a step whose plan moves 0 bytes: nothing is exchanged at all.

A backend offers ``gather_sizes(list_of_int) -> [list per member]`` and
``scatter(buf_or_None, numel, like, root, payload) -> flat array`` over its whole group; it
counts ``payload`` elements as received bytes (what the plan moves) and the rest of the chunk as
padding (``stats["padding_bytes"]`` on Paddle ranks, ``simulate_reshard(padding=...)``).
"""
from __future__ import annotations

import math

from ..errors import ReshardPlanError
from .backend import ReshardBackend


def exchange_by_scatter(be: ReshardBackend, group: tuple, outgoing: dict, incoming: dict,
                        targets: dict | None = None) -> dict:
    """:func:`~.exchange.exchange` on a group of odd size (same arguments and result)."""
    me, like = be.rank, be.like
    outs = {p: [x for x in outgoing.get(p, []) if be.numel(x)] for p in group if p != me}
    mine = [sum(be.numel(x) for x in outs.get(p, [])) for p in group]
    sizes = be.gather_sizes(mine)
    k = group.index(me)
    got: dict = {}
    for i, root in enumerate(group):
        width = max(sizes[i])
        if root == me:
            if width:
                ref = next(x for p in group for x in outs.get(p, []))  # the pieces' dtype
                chunks = []
                for j, peer in enumerate(group):
                    parts = outs.get(peer, [])
                    if parts:
                        chunks.append(be.flat(be.concat_flat(parts, ref)))
                    if width - sizes[i][j]:
                        chunks.append(be.full((width - sizes[i][j],), 0, ref))
                be.scatter(be.concat_flat(chunks, ref), width, ref, root, 0)
            continue
        ins = incoming.get(root, [])
        want = [math.prod(shape) for shape, _ in ins]
        if sum(want) != sizes[i][k]:
            raise ReshardPlanError(
                f"rank {me} expects {sum(want)} elements from rank {root}, which sends {sizes[i][k]}: the "
                f"ranks of this reshard disagree about its layout (call it with the same tensor and target "
                f"on every rank)")
        if not width:
            if ins:
                got[root] = [be.empty(shape, lk) for shape, lk in ins]
            continue
        flat = be.scatter(None, width, ins[0][1] if ins else like, root, sum(want))
        if not ins:
            continue
        parts = be.split_flat(flat, want + [width - sum(want)])[:len(want)]
        arrays = [be.reshape(p, shape) for p, (shape, _) in zip(parts, ins)]
        target = (targets or {}).get(root)
        if target is not None and len(arrays) == 1:
            be.put(target, tuple((0, s) for s in be.shape(target)), be.reshape(arrays[0], tuple(be.shape(target))))
            arrays = [target]
        got[root] = arrays
    return got


class Quiet:
    """The backend for a step that moves 0 bytes (the plan's count, the same on every rank): no
    rank communicates, so no dummy lockstep messages either, and a 1-rank group needs no group."""

    lockstep = False

    def __init__(self, be):
        self._be = be

    def __getattr__(self, name):
        attr = getattr(self._be, name)  # AttributeError when the backend lacks it, as without Quiet
        if name in ("send", "recv", "recv_into", "scatter", "gather_sizes"):
            return self._no_comm
        if name == "all_reduce":  # a group of one needs no communication; else None (no collective)
            return lambda x, op, members: attr(x, op, members) if len(set(members)) == 1 else None
        if name == "all_gather_into":
            return lambda out, x, members: len(set(members)) == 1 and attr(out, x, members)
        return attr

    @staticmethod
    def _no_comm(*args, **kwargs):
        raise ReshardPlanError("internal error: a plan step of 0 bytes tried to communicate; "
                               "please report it with the plan (paddle_ext.reshard.plan_reshard)")


__all__ = ["Quiet", "exchange_by_scatter"]
