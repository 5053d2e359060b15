"""A local mesh reshape: a DistTensor moved to a mesh of the same ranks in another shape, when every
rank keeps exactly the slice it holds (no data moves).

Paddle 3.3 has such a function (``auto_parallel.moe_utils._dist_reshape``), reached by
``dist.reshard`` only under the environment flag ``FLAGS_enable_moe_utils=true`` (without it,
2x1 -> 1x2 raises "Can not reshard"), and its backward fails on a co-sharded source (it deep-copies
the placements, which turns them into bare ``Placement`` objects that ``paddle.Tensor`` refuses).
This one is a PyLayer of its own on public calls: forward copies each rank's local value into a
DistTensor on the new mesh, backward moves the gradient back the same way (after resharding it to
the forward's target placements if it arrives in others, e.g. ``Partial``). paddle-ext's routing
(:func:`paddle_ext.reshard.route.pure_mesh_reshape`) proves the move needs no data first; no
process group is needed, so it runs in every process state.
"""
from __future__ import annotations

from .convert import to_paddle_placements
from .internals import expected_place
from ..version import require_paddle

_LAYER: list = []


def local_mesh_reshape(x, mesh, placements, source_placements):
    """``x`` on ``mesh`` with ``placements`` (Paddle placements, one per mesh dim), every rank's
    local value copied as it is. The caller has proved each rank holds the same slice before and
    after, with no Partial. ``source_placements`` are ``x``'s, rebuilt by the caller (Paddle 3.3
    reads a co-sharded tensor's back as bare ``Placement`` objects it cannot take again)."""
    if not _LAYER:
        _LAYER.append(_build(require_paddle("paddle_ext.compat.ports.mesh_reshape")))
    return _LAYER[0].apply(x, mesh, list(placements), list(source_placements))


def reshape_placements(src, dst) -> tuple:
    """``(placements, source_placements)`` of :func:`local_mesh_reshape` for a move from the
    DistSpec ``src`` to ``dst``, as Paddle placements."""
    return to_paddle_placements(dst.placements), to_paddle_placements(src.placements)


def _build(paddle):
    PyLayer = paddle.autograd.PyLayer

    def move(t, dims, mesh, placements):
        local = t._local_value()
        local = local.clone() if local._is_initialized() else local
        return paddle.Tensor(local, dims=list(dims), process_mesh=mesh, placements=list(placements),
                             place=expected_place())

    class LocalMeshReshape(PyLayer):
        @staticmethod
        def forward(ctx, x, mesh, placements, source_placements):
            ctx.source = (list(x.shape), x.process_mesh, source_placements)
            ctx.target = (mesh, placements)
            out = move(x, x.shape, mesh, placements)
            out.stop_gradient = x.stop_gradient
            return out

        @staticmethod
        def backward(ctx, grad):
            mesh, placements = ctx.target
            if list(grad.placements) != placements or grad.process_mesh != mesh:
                grad = paddle.distributed.reshard(grad, mesh, placements)
            return move(grad, *ctx.source)

    return LocalMeshReshape


__all__ = ["local_mesh_reshape", "reshape_placements"]
