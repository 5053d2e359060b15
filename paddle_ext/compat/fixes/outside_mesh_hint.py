"""Default fix ``outside-mesh-hint``: one line on each rank before a rank outside a mesh can crash.

Pipeline parallelism by annotation has every rank run the whole forward, each stage's ops on the
mesh of that stage's ranks. On the Paddle 3.3.1 CPU wheel the first op a rank runs on a
DistTensor whose mesh excludes it dies with SIGSEGV and no message (:mod:`.outside_mesh` explains
why, and its opt-in ``install(pipeline_by_annotation=True)`` makes those ranks run).

The opt-in is not applied by default: every way to let such a rank run an op registers a device
type (the empty local outputs need a place), and that changes what a program that already runs
can see (``get_all_custom_device_type()``, ``ParallelEnv().device_type``). What plain
``install()`` does instead has no effect on values or devices: the first time this rank holds a
DistTensor whose mesh excludes it (made by ``dist.shard_tensor``, ``dtensor_from_local`` or a
``dist.reshard`` to such a mesh; a model's stage parameters are made this way before its first
op), it writes :data:`HINT` to stderr, flushed (a SIGSEGV may follow), and restores Paddle's
functions. It does nothing where the opt-in would not apply either (another Paddle, a GPU build,
one process), or once the opt-in is on.
"""
from __future__ import annotations

import sys

from .outside_mesh_support import opt_in_on, unsupported_reason
from ..version import require_paddle

HINT = ("paddle-ext: rank {rank} holds a DistTensor on mesh {mesh}, which excludes it (pipeline parallelism by "
        "annotation: every rank runs the whole forward). On Paddle {version} CPU the first op on it dies with "
        "SIGSEGV; call paddle_ext.install(pipeline_by_annotation=True) after dist.init_parallel_env() on every "
        "rank (docs/compatibility.md, \"Ranks outside a mesh\").")

_STATE = {"armed": False}   # armed by apply(); the first hint (or the opt-in seen on) disarms it


def needed() -> bool:
    """Where the opt-in would apply (Paddle 3.3.1 CPU wheel, a multi-rank job) and is not on."""
    return unsupported_reason() is None and not opt_in_on()


def watch_mesh(mesh) -> None:
    """Say :data:`HINT` once if this rank is not in ``mesh`` (cheap when not armed)."""
    if not _STATE["armed"] or mesh is None:
        return
    paddle = require_paddle("outside-mesh-hint")
    rank = paddle.distributed.get_rank()
    if rank in mesh.process_ids:
        return
    _STATE["armed"] = False
    if opt_in_on():
        return
    sys.stderr.write(HINT.format(rank=rank, mesh=list(mesh.process_ids), version=paddle.__version__) + "\n")
    sys.stderr.flush()
    for owner, name, original in _WRAPPED:
        if getattr(getattr(owner, name), "__wrapped__", None) is original:   # still our wrapper
            setattr(owner, name, original)


def _watched(original):
    def call(*args, **kwargs):
        out = original(*args, **kwargs)
        if _STATE["armed"] and getattr(out, "is_dist", _no)():
            watch_mesh(out.process_mesh)
        return out

    call.__doc__ = original.__doc__
    call.__wrapped__ = original
    return call


def _no() -> bool:
    return False


_WRAPPED: list = []


def apply() -> list:
    """Wrap ``shard_tensor`` and ``dtensor_from_local`` (both names Paddle's code calls them by);
    ``dist.reshard`` reports its target mesh from paddle-ext's first call for that request."""
    paddle = require_paddle("outside-mesh-hint")
    dist, api = paddle.distributed, paddle.distributed.auto_parallel.api
    patched = []
    for name in ("shard_tensor", "dtensor_from_local"):
        original = getattr(api, name)
        wrapper = _watched(original)
        for owner in (api, dist):
            if getattr(owner, name, None) is original:
                setattr(owner, name, wrapper)
                patched.append((owner, name, original))
    _WRAPPED[:] = patched
    _STATE["armed"] = True
    return patched


def disarm() -> None:
    """What ``revert()`` undoes besides the wrapped names."""
    _STATE["armed"] = False
