"""Paddle's own ``dist.reshard``, kept while paddle-ext's is installed, and who hears of its use.

:mod:`.install` fills :data:`SAVED` when it rebinds Paddle's names; the executor (:mod:`.dygraph`)
hands a call to :func:`original_reshard` where Paddle is exact, and tells :data:`NATIVE_LISTENERS`
(the demo's byte counter, tests). A module of its own so that the executor and the installer
do not import each other.
"""
from __future__ import annotations

from ..compat.version import require_paddle

SAVED: dict = {}   # "dist" / "api": Paddle's functions, while paddle-ext's are installed
NATIVE_LISTENERS: list = []  # callables (src_spec, dst_spec, itemsize) told of reshards left to Paddle


def original_reshard():
    """Paddle's own ``dist.reshard`` (even while paddle-ext's is installed)."""
    paddle = require_paddle("paddle_ext.reshard")
    return SAVED.get("dist") or paddle.distributed.reshard


__all__ = ["NATIVE_LISTENERS", "SAVED", "original_reshard"]
