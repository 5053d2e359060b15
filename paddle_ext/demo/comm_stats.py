"""Count the bytes each collective kind is handed on this rank while a block of code runs.

Wraps the public ``paddle.distributed`` collectives (``all_reduce``, ``all_gather``,
``broadcast``, ``reduce_scatter``, ``alltoall``, ``send``/``recv`` and their async forms) for the
duration of a ``with`` block. The count is the payload each call is given (the tensor's bytes; for
``all_gather`` the local tensor), which is what paddle-ext's reshard executor and the demo's
explicit reshards move. Reshards that paddle-ext leaves to Paddle's exact native path are
counted by their plan (kind ``<collective> (Paddle)``, bytes each rank receives). Collectives Paddle
issues from C++ inside an op (implicit reshards of its SPMD rules) are not visible here.
"""
from __future__ import annotations

import contextlib
from collections import Counter

_KINDS = ("all_reduce", "all_gather", "broadcast", "reduce_scatter", "alltoall", "alltoall_single",
          "send", "recv", "isend", "irecv", "reduce", "scatter")


def _nbytes(t) -> int:
    try:
        return int(t.numel()) * t.element_size()
    except Exception:  # noqa: BLE001 - lists of tensors, None, etc.
        if isinstance(t, (list, tuple)):
            return sum(_nbytes(x) for x in t)
        return 0


@contextlib.contextmanager
def count_collectives():
    """``with count_collectives() as stats:`` -> ``stats`` maps kind -> [calls, bytes]."""
    import paddle.distributed as dist

    stats: dict = {}
    originals = {}

    def wrap(kind, fn):
        payload_arg = 1 if kind in ("all_gather", "reduce_scatter", "alltoall", "scatter") else 0

        def counted(*args, **kwargs):
            entry = stats.setdefault(kind, Counter())
            entry["calls"] += 1
            if len(args) > payload_arg:
                entry["bytes"] += _nbytes(args[payload_arg])
            return fn(*args, **kwargs)

        counted.__wrapped__ = fn
        return counted

    for kind in _KINDS:
        fn = getattr(dist, kind, None)
        if fn is not None:
            originals[kind] = fn
            setattr(dist, kind, wrap(kind, fn))

    from ..reshard.install import NATIVE_LISTENERS
    from ..reshard.planner import plan_reshard

    def native(src, dst, itemsize):
        for step in plan_reshard(src, dst, itemsize=itemsize):
            if step.bytes:
                entry = stats.setdefault(f"{step.collective} (Paddle)", Counter())
                entry["calls"] += 1
                entry["bytes"] += int(step.bytes)

    NATIVE_LISTENERS.append(native)
    try:
        yield stats
    finally:
        NATIVE_LISTENERS.remove(native)
        for kind, fn in originals.items():
            setattr(dist, kind, fn)
