"""Route Paddle's ``dist.reshard`` through paddle-ext in dygraph (opt-in, reversible).

``install_reshard()`` rebinds the two names Paddle's own code calls:

* ``paddle.distributed.reshard`` -- user code and ``ShardingStage1`` (``dist.reshard`` in
  ``_fused_comm_before_apply_optimize`` and the P->S grad conversion);
* ``paddle.distributed.auto_parallel.api.reshard`` -- the module global that ``ShardingStage2/3``'s
  gradient hooks call (``reshard(grad, grad.process_mesh, new_placements)``).

With both bound, P->S (reduce_scatter, no CPU kernel in Paddle 3.3.1) runs as point-to-point, so
``shard_optimizer`` with ShardingStage1/2/3 trains on CPU and stage 2/3 keep only their shard of
the gradients. Static graphs (``dist.to_static``/PIR) and tensors paddle-ext cannot express (e.g.
split_factor shards, which fail conversion before any data moves) still go to Paddle's original,
and so do the transitions Paddle does exactly and as cheaply (:func:`.route.native_is_exact`:
R<->S, P(sum)->R, R->P(sum) on even shapes of one mesh), which also keeps sub-mesh reshards inside
the sub-mesh's own process group. ``uninstall_reshard()`` restores the originals.

The call itself is :func:`.fast.installed`: one cache lookup for a repeated request (its key read
in C++ once :mod:`paddle_ext.compat.native.fast_key` is built: ``install_reshard()`` starts it), else the
routing decision of :func:`.route.route`, made once and cached. Paddle's own function stays
reachable as :func:`original_reshard`; :data:`NATIVE_LISTENERS` hear of every call left to it.
"""
from __future__ import annotations

import paddle

from ..compat.native import fast_key
from ..compat.ports.internals import auto_parallel_api
from ..compat.version import require_paddle
from . import fast
from .route import NATIVE_LISTENERS, original_reshard  # noqa: F401 - the installer's public names
from .route import SAVED as _SAVED


def _make(original, check: bool):
    installed = fast.installed

    def reshard(dist_tensor, mesh, placements):
        # a repeated request is one cache lookup (fast.py); delegates where Paddle is exact
        return installed(original, check, dist_tensor, mesh, placements)

    reshard.__doc__ = (original.__doc__ or "") + "\n(paddle-ext: dygraph reshards use paddle_ext.reshard)"
    reshard.__wrapped__ = original
    reshard._paddle_ext = True
    return reshard


def install_reshard(check: bool = False) -> bool:
    """Make ``dist.reshard`` (and ShardingStage1/2/3's calls) use paddle-ext in dygraph.

    ``check`` turns on the cross-rank metadata check for every call (a small point-to-point
    exchange); it is off by default here because Paddle's own callers are consistent by
    construction. Returns True if this call installed it, False if it already was.
    """
    paddle = require_paddle("paddle_ext.install_reshard")

    if _SAVED:
        return False
    _SAVED["dist"] = paddle.distributed.reshard
    _SAVED["api"] = auto_parallel_api().reshard
    ours = _make(_SAVED["dist"], check)
    fast.clear()
    fast_key.start()   # the fast path's compiled request key: loaded if built, else built in the background
    paddle.distributed.reshard = ours
    auto_parallel_api().reshard = ours
    return True


def uninstall_reshard() -> None:
    """Restore Paddle's ``dist.reshard`` and ``auto_parallel.api.reshard``."""
    if not _SAVED:
        return

    paddle.distributed.reshard = _SAVED.pop("dist")
    auto_parallel_api().reshard = _SAVED.pop("api")
    fast.clear()


__all__ = ["NATIVE_LISTENERS", "install_reshard", "original_reshard", "uninstall_reshard"]
