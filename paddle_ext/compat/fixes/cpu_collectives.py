"""``cpu-collectives``: Paddle's C++ P -> S, S -> S and cross-mesh reshards on a gloo job.

Paddle's C++ reshards, reached from C++ where no Python sees them (the gradient of a sharded
parameter's all-gather, ``dist.parallelize``'s sequence parallel and sharding levels,
``dist.reshard`` without ``init_parallel_env``), call CPU reduce_scatter and all_to_all kernels
that only throw. In a multi-process job on gloo those calls run on gloo: the PLT hooks of
:mod:`paddle_ext.compat.native.cpu_collectives` (C++ piece ``cpu_collectives``, built once per
machine in about 25 s and cached). A build the hooks do not know keeps Paddle's kernels, with
one log line, and ``install()`` goes on.

Importing this module imports no Paddle.
"""
from __future__ import annotations

from ...errors import CompatError
from ..native import cpu_collectives as hooks
from ..ports.backend import job_on_gloo, note_once
from ..version import require_paddle


def needed() -> bool:
    """A multi-process job on gloo (a one-process run has no reduce_scatter to serve)."""
    paddle = require_paddle("fix cpu-collectives")
    return job_on_gloo() and paddle.distributed.get_world_size() > 1


def apply():
    try:
        hooks.hook()
    except CompatError as exc:  # a build the hook does not know: Paddle's kernel stays, install() goes on
        note_once("cpu-collectives", f"{exc}; Paddle's C++ P->S and S->S keep Paddle's CPU kernels")
        return []
    hooks.HOOKED = True
    return [(hooks, "HOOKED", False)]


revert = hooks.unhook
