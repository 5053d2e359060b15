"""``gloo-batch-p2p-order``: ``dist.batch_isend_irecv`` that cannot deadlock on gloo.

On NCCL a batch of ``isend``/``irecv`` ops runs concurrently, so its order does not matter. On
gloo (Paddle 3.3.1 CPU) each ``isend`` finishes before the next op of the batch starts, and a
send completes only once the peer has posted the matching receive. A batch that exchanges in
both directions then deadlocks when both peers send first: Paddle's ``Schedule1F1B`` fuses
stage 0's forward send with its backward receive while stage 1 fuses its backward send with its
forward receive, and both ranks wait in their send until gloo's 30 s timeout.

The fix reorders every batch on a gloo group: its ops go peer by peer in ascending rank; with
each peer, the lower rank of the two sends first and the higher rank receives first. Every rank
then meets its peers in one global order of rank pairs, so when every rank exchanges through
``batch_isend_irecv`` no cycle of waits can form. The order of the sends to one peer, and of the
receives from one peer, is kept (gloo pairs messages by order), so a batch with one peer in one
direction runs as given. Every batch on another backend goes to Paddle unchanged.

Importing this module imports no Paddle.
"""
from __future__ import annotations

import importlib

from ..ports.backend import GLOO, backend_of
from ..version import require_paddle


def deadlock_free_order(ops: list, me: int, is_send) -> list:
    """``ops`` (objects with ``.peer``) in the order described above, for the rank ``me``;
    ``is_send(op)`` tells a send from a receive. Within a peer and direction the order is kept."""
    ordered = []
    for peer in sorted({op.peer for op in ops}):
        sends = [op for op in ops if op.peer == peer and is_send(op)]
        recvs = [op for op in ops if op.peer == peer and not is_send(op)]
        ordered += sends + recvs if me < peer else recvs + sends
    return ordered


def apply():
    paddle = require_paddle("fix gloo-batch-p2p-order")
    # stays here: `import paddle_ext` loads this module and imports no Paddle
    # the module, not the function of the same name that paddle.distributed.communication exports
    module = importlib.import_module("paddle.distributed.communication.batch_isend_irecv")

    dist = paddle.distributed
    original = module.batch_isend_irecv

    def batch_isend_irecv(p2p_op_list):
        if p2p_op_list and backend_of(p2p_op_list[0].group) == GLOO:
            p2p_op_list = deadlock_free_order(p2p_op_list, dist.get_rank(), _is_send)
        return original(p2p_op_list)

    batch_isend_irecv.__doc__ = original.__doc__
    batch_isend_irecv.__wrapped__ = original
    module.batch_isend_irecv = batch_isend_irecv
    dist.batch_isend_irecv = batch_isend_irecv
    return [(module, "batch_isend_irecv", original), (dist, "batch_isend_irecv", original)]


def _is_send(op) -> bool:
    """A P2POp's ``op`` is ``paddle.distributed.isend`` or ``irecv`` (P2POp refuses others)."""
    return getattr(op.op, "__name__", "") == "isend"


def needed() -> bool:
    paddle = require_paddle("fix gloo-batch-p2p-order")
    return hasattr(paddle.distributed, "batch_isend_irecv")


__all__ = ["deadlock_free_order"]
