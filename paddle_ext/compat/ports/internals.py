"""Small handles on Paddle internals that adapters need, bound here so that only compat names them.

* :func:`compiled_with` -- which device backends the wheel was built with (``cuda``, ``xpu``);
* :func:`expected_place` -- the place Paddle puts a new tensor on in this process;
* :func:`dtensor_local_api` -- ``(dtensor_to_local, dtensor_from_local)``, the C++ functions the
  dispatcher's fast path calls (their Python wrappers cost a microsecond more per call);
* :func:`pir_ops` -- the op builders a PIR pass inserts with (``matmul``, ``reshape``,
  ``set_persistable_value``).
"""
from __future__ import annotations

from ..version import require_paddle


def compiled_with() -> dict:
    """``{"cuda": bool, "xpu": bool}``: what the installed wheel was built for (not what runs)."""
    core = require_paddle("paddle_ext.compat.ports.internals").base.core
    return {"cuda": bool(core.is_compiled_with_cuda()), "xpu": bool(core.is_compiled_with_xpu())}


def expected_place():
    """The place Paddle puts a new tensor on in this process (``paddle.CPUPlace()`` here)."""
    framework = require_paddle("paddle_ext.compat.ports.internals").framework
    return framework._get_paddle_place(framework._current_expected_place())


def dtensor_local_api() -> tuple:
    core = require_paddle("paddle_ext.compat.ports.internals").base.core
    return core.dtensor_to_local, core.dtensor_from_local


def pir_ops():
    """Paddle's generated op builders (``_C_ops``): in a PIR program they insert ops."""
    return require_paddle("paddle_ext.compat.ports.internals")._C_ops


__all__ = ["compiled_with", "dtensor_local_api", "expected_place", "pir_ops"]
