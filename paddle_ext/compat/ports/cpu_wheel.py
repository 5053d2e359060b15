"""What Paddle's CPU wheel cannot survive, asked before paddle-ext hands it a call.

* :func:`cross_mesh_reshard_crashes` -- Paddle 3.3.1's dygraph reshard between two meshes runs
  ``SameStatusReshardFunction``, which asks ``phi::distributed::GetDefaultPlace()``; on the CPU
  wheel (built with custom-device support) that reads the first registered custom device type
  without checking there is one, so with none registered the process dies with SIGSEGV (every
  cross-mesh scenario of tests/multirank/test_paddle_scenarios.py). ``install(pipeline_by_annotation=
  True)`` registers a zero-device type, after which the question no longer applies.

Importing this module imports no Paddle.
"""
from __future__ import annotations

from ..version import require_paddle

#: the Paddle versions whose CPU wheel is known to crash so (checked by the scenario tests)
CROSS_MESH_CRASHES = ("3.3.1",)


def cross_mesh_reshard_crashes() -> bool:
    """True when Paddle's own dygraph reshard between two meshes would kill this process."""
    paddle = require_paddle("paddle_ext.compat.ports.cpu_wheel")
    return (paddle.__version__ in CROSS_MESH_CRASHES and not paddle.is_compiled_with_cuda()
            and not list(paddle.base.core.get_all_custom_device_type()))


__all__ = ["CROSS_MESH_CRASHES", "cross_mesh_reshard_crashes"]
