"""Where the opt-in ``install(pipeline_by_annotation=True)`` applies (:mod:`.outside_mesh`), asked
by that fix and by the default hint (:mod:`.outside_mesh_hint`). Importing it imports no Paddle."""
from __future__ import annotations

from ..version import require_paddle

DEVICE_TYPE = "no_device"          # the zero-device type the opt-in registers
VERIFIED_VERSIONS = ("3.3.1",)
SWITCH = "install(pipeline_by_annotation=True)"


def unsupported_reason() -> str | None:
    """Why the fix does not apply in this process (None: it does)."""
    paddle = require_paddle("ranks-outside-mesh")
    if paddle.__version__ not in VERIFIED_VERSIONS:
        return (f"{SWITCH} was verified on Paddle {', '.join(VERIFIED_VERSIONS)} only (it registers a device "
                f"type in Paddle's C++ device manager); found Paddle {paddle.__version__}")
    if paddle.is_compiled_with_cuda() or paddle.is_compiled_with_xpu() or paddle.is_compiled_with_rocm():
        return (f"{SWITCH} is for the CPU wheel of Paddle; on this GPU/XPU build ranks outside a mesh take "
                "Paddle's own path")
    types = list(paddle.base.core.get_all_custom_device_type())
    if types and types != [DEVICE_TYPE]:
        return (f"{SWITCH}: a real custom device is registered ({', '.join(types)}); Paddle puts the empty "
                "locals of ranks outside a mesh there already")
    if paddle.distributed.get_world_size() < 2:
        return (f"{SWITCH} is for each rank of a multi-rank job (after dist.init_parallel_env()); this process "
                "is one (world size 1), where every rank is in every mesh")
    return None


def opt_in_on() -> bool:
    """The opt-in's device type is registered in this process (it stays for the process's life)."""
    paddle = require_paddle("ranks-outside-mesh")
    return DEVICE_TYPE in list(paddle.base.core.get_all_custom_device_type())
