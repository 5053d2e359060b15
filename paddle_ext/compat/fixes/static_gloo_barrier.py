"""``static-gloo-barrier``: the static Engine's eager ring-0 barrier on gloo.

The Engine's eager ring-0 ``barrier`` has a CPU kernel that cannot find its comm context
("NCCLCommContext is nullptr"); on a gloo job it goes through ``dist.barrier()``. ``needed`` is
:func:`~paddle_ext.compat.ports.backend.job_on_gloo`, asked again on every call: another backend,
another ring, or a static program gets Paddle's original.

Importing this module imports no Paddle.
"""
from __future__ import annotations

from ..ports.backend import job_on_gloo
from ..version import require_paddle


def apply():
    paddle = require_paddle("fix static-gloo-barrier")
    legacy = paddle._legacy_C_ops
    original = legacy.barrier

    def barrier(x, out, *attrs):
        ring_id = dict(zip(attrs[::2], attrs[1::2])).get("ring_id", 0)
        if ring_id == 0 and paddle.in_dynamic_mode() and job_on_gloo():
            paddle.distributed.barrier()
            return out
        return original(x, out, *attrs)

    legacy.barrier = barrier
    return [(legacy, "barrier", original)]


needed = job_on_gloo
