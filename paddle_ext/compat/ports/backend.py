"""Which communication backend a call runs on, read through Paddle's public API.

paddle-ext's dygraph executor and its compat fixes are written for gloo (CPU). On any other
backend Paddle's own code is the right one for most calls, so every routing decision asks
:func:`backend_of` for the group the call runs on. The answer comes from
``paddle.distributed.get_backend(group)`` (looked up at call time, so a test can stand in for
it), never from how the wheel was built: a CUDA wheel can run a gloo group, and a CPU wheel
can be handed a custom device plugin.

* ``"GLOO"``  -- paddle-ext's executor and fixes apply (:data:`GLOO`).
* ``"NCCL"``  -- Paddle's native path for what Paddle does exactly there; paddle-ext keeps only
  the cases Paddle gets wrong or cannot do (docs/backends.md).
* anything else (XCCL, BKCL, FLAGCX, a custom device) -- unknown to paddle-ext: every call goes
  to Paddle, with one log line per process.
* ``None`` -- no parallel environment (``dist.init_parallel_env()`` was not called, or the job
  has one process): there is no group to run on.

Importing this module imports no Paddle.
"""
from __future__ import annotations

import logging

from ..version import require_paddle

logger = logging.getLogger("paddle_ext.reshard")

GLOO = "GLOO"
NCCL = "NCCL"
KNOWN = (GLOO, NCCL)

_NOTED: set = set()


def note_once(key: str, message: str) -> None:
    """Log ``message`` once per process for ``key`` (a routing reason, not an error)."""
    if key not in _NOTED:
        _NOTED.add(key)
        logger.warning("paddle-ext: %s", message)


def parallel_env_ready() -> bool:
    """True if ``dist.init_parallel_env()`` built the world group (Paddle's ``is_initialized``)."""
    paddle = require_paddle("paddle_ext.compat.ports.backend")
    return bool(paddle.distributed.is_initialized())


def backend_of(group=None) -> str | None:
    """The backend of ``group`` (None: the world group) as Paddle names it, upper-cased;
    None when there is no parallel environment or this rank is not in ``group``."""
    paddle = require_paddle("paddle_ext.compat.ports.backend")
    dist = paddle.distributed
    if not parallel_env_ready():
        return None
    if group is not None and hasattr(group, "is_member") and not group.is_member():
        return None  # asking Paddle would warn "Current global rank ... is not in group" on every call
    try:
        name = dist.get_backend(group)
    except (RuntimeError, AttributeError):  # not a member / a group without a process group
        return None
    return str(name).upper() if name else None


def is_gloo(group=None) -> bool:
    return backend_of(group) == GLOO


def route_unknown(backend: str | None, what: str) -> bool:
    """True (and one log line) when ``backend`` is one paddle-ext does not know."""
    if backend is None or backend in KNOWN:
        return False
    note_once(f"unknown-backend:{backend}:{what}",
              f"backend {backend} is not one paddle-ext knows (GLOO, NCCL); {what} go to Paddle's own code")
    return True


def job_on_gloo() -> bool:
    """True when the job's collectives run on gloo: the world group's backend, read through
    ``paddle.distributed.get_backend``, is GLOO; before ``init_parallel_env`` (no group to ask),
    when this process runs on the CPU. The gloo fixes ask it when they are applied and again in
    every patched function when it is called, which hands any other backend to Paddle's original."""
    paddle = require_paddle("static Engine on CPU")
    backend = backend_of(None)
    if backend is not None:
        return backend == GLOO
    return str(paddle.device.get_device()).startswith("cpu")


__all__ = ["GLOO", "NCCL", "backend_of", "is_gloo", "job_on_gloo", "note_once", "parallel_env_ready",
           "route_unknown"]
