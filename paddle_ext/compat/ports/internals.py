"""Small handles on Paddle internals that adapters need, bound here so that only compat names them.

* :func:`compiled_with` -- which device backends the wheel was built with (``cuda``, ``xpu``);
* :func:`expected_place` -- the place Paddle puts a new tensor on in this process;
* :func:`dtensor_local_api` -- ``(dtensor_to_local, dtensor_from_local)``, the C++ functions the
  dispatcher's fast path calls (their Python wrappers cost a microsecond more per call);
* :func:`pir_ops` -- the op builders a PIR pass inserts with (``matmul``, ``reshape``,
  ``set_persistable_value``), and where they insert: :func:`set_insertion_point`,
  :func:`set_insertion_point_after`;
* :func:`local_value` -- a DistTensor's local tensor on this rank (``x._local_value()``);
* :func:`placements_text` -- a DistTensor's placements as Paddle's cached string (a cheap key);
* :func:`is_initialized` -- whether a tensor holds memory yet (a lazily initialised parameter
  does not);
* :func:`auto_parallel_api` -- the module ``paddle.distributed.auto_parallel.api``, where
  ``ShardingStage2/3`` look ``reshard`` up at call time (an adapter that routes ``dist.reshard``
  patches it there too).
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


def set_insertion_point(op) -> None:
    """New PIR ops go before ``op``."""
    require_paddle("paddle_ext.compat.ports.internals").pir.set_insertion_point(op)


def set_insertion_point_after(op) -> None:
    """New PIR ops go after ``op``."""
    require_paddle("paddle_ext.compat.ports.internals").pir.set_insertion_point_after(op)


def local_value(x):
    """The local ``paddle.Tensor`` this rank holds of DistTensor ``x`` (shares its memory)."""
    return x._local_value()


def placements_text(x) -> str:
    """DistTensor ``x``'s placements as the string Paddle caches on it: equal strings, equal
    placements; cheaper to read than ``x.placements``, which builds Python objects."""
    return x._placements_str


def is_initialized(x) -> bool:
    """True when tensor ``x`` holds memory (a parameter made under ``LazyGuard`` does not yet)."""
    return x._is_initialized()


def auto_parallel_api():
    """Paddle's ``paddle.distributed.auto_parallel.api`` module (loaded by ``import paddle``)."""
    return require_paddle("paddle_ext.compat.ports.internals").distributed.auto_parallel.api


__all__ = ["auto_parallel_api", "compiled_with", "dtensor_local_api", "expected_place", "is_initialized",
           "local_value", "pir_ops", "placements_text", "set_insertion_point", "set_insertion_point_after"]
