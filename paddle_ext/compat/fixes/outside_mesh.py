"""Opt-in fix ``ranks-outside-mesh``: a rank outside a DistTensor's mesh can run ops on it
(pipeline parallelism by annotation).

Pipeline parallelism by annotation has every rank run the whole forward: stage 0's ops on a mesh
of stage 0's ranks, stage 1's on another. On the Paddle 3.3.1 CPU wheel a rank outside an op's
mesh dies with SIGSEGV: each dist API makes its outputs' empty locals at
``phi::distributed::GetDefaultPlace()``, which reads the first registered custom device type of
an empty list. The fix has two parts:

* C++ (``paddle_ext/csrc/outside_mesh.cc``, built by :mod:`paddle_ext.compat.native.cpp_build`): registers in this
  process a custom device type ``no_device`` with zero devices, so that function returns
  ``Place(no_device:0)``, and serves that place with a CPU device context.
* Python: ``Tensor.backward`` on a loss whose mesh excludes this rank, called without a
  ``grad_tensor``, passes a ones seed sharded like the loss (Paddle's own seed is made at the
  loss's place, which has no memory: "Dst place Place(cpu) != Place(no_device:0)").
* Python: ``Tensor.set_value`` (and so ``Layer.set_state_dict``) into such a DistTensor checks
  the value's type, shape and dtype as Paddle does on the other ranks and writes nothing: the
  rank holds no local data (Paddle's copy fails: "memory's size is 0").
* Python: a comparison of such a DistTensor with a Python number (``label != ignore_index`` in
  ``cross_entropy``, on every rank that is not the last stage's) compares with
  ``paddle.full_like(x, number)``, a DistTensor on ``x``'s mesh, because Paddle makes the number a
  dense tensor at ``x.place``, which has no memory (the same "Dst place" error). The values are
  the same: the rank holds no local data of either side.
Its companion ``local-layer-dense-gradient`` (:mod:`.local_layer_dense_gradient`) is applied
under the same switch.

It changes what the process reports: ``paddle.base.core.get_all_custom_device_type()`` returns
``['no_device']`` and ``paddle.distributed.ParallelEnv().device_type`` reads ``'no_device'``.
So it is applied only on request (``paddle_ext.install(pipeline_by_annotation=True)``, also
spelled ``ranks_outside_mesh=True``; plain ``install()`` prints a one-line hint naming it, see
:mod:`.outside_mesh_hint`), on the build
it was measured on (Paddle 3.3.1, CPU, no custom device registered), in a rank process (never the
launcher, which would then take the device for a real one). ``revert()`` restores
what it patched; the registered device type stays for the life of the process (Paddle has no
way to unregister one type). docs/compatibility.md, "Ranks outside a mesh".

Importing this module imports no Paddle (it is bound when the fix is asked or applied).
"""
from __future__ import annotations

import numpy as np

from ...errors import CompatError, ValueMismatchError
from ..native import cpp_build
from ..ports.backend import note_once
from ..version import require_paddle
from .outside_mesh_support import DEVICE_TYPE, SWITCH, unsupported_reason

paddle = dist = None     # Paddle and paddle.distributed, bound by _bind() when the fix is asked or applied
_MODULE: list = [None]   # the loaded C++ piece, once


def _bind() -> None:
    """Bind Paddle in this module (the patched functions read ``paddle`` and ``dist``)."""
    global paddle, dist
    if paddle is None:
        paddle = require_paddle(SWITCH)
        dist = paddle.distributed


def needed() -> bool:
    """Apply where verified; elsewhere leave Paddle as it is, with one log line naming why (the
    program then runs as on Paddle alone)."""
    _bind()
    reason = unsupported_reason()
    if reason is not None:
        note_once("ranks-outside-mesh", f"{reason}: not applied, Paddle's behaviour is unchanged")
        return False
    return True


def _load():
    """Build (once, cached) and load the C++ piece; register the device and its CPU context."""
    if _MODULE[0] is None:
        module = cpp_build.build_and_load("outside_mesh")
        types = list(module.register_zero_device())
        place = module.serve_default_place_with_cpu()
        if DEVICE_TYPE not in types or place != "Place(cpu)":
            raise CompatError(f"ranks-outside-mesh: registering the zero-device type gave device types {types} "
                              f"and a context at {place}; expected {DEVICE_TYPE!r} served at Place(cpu)")
        _MODULE[0] = module
    return _MODULE[0]


def default_place() -> str:
    """What Paddle's ``GetDefaultPlace()`` returns once the fix is applied (``Place(no_device:0)``)."""
    _bind()
    return _load().default_place()


def patch(owner, name: str, make, patched: list) -> None:
    """Replace ``owner.name`` by ``make(original)`` (keeping its doc; ``__wrapped__`` names the
    original) and record ``(owner, name, original)`` in ``patched`` for the revert."""
    original = getattr(owner, name)
    wrapper = make(original)
    wrapper.__doc__ = original.__doc__
    wrapper.__wrapped__ = original
    setattr(owner, name, wrapper)
    patched.append((owner, name, original))


def _backward(original):
    def backward(self, grad_tensor=None, retain_graph=False, **kwargs):
        if grad_tensor is None and _outside(self):
            grad_tensor = dist.shard_tensor(paddle.ones(self.shape, self.dtype), self.process_mesh, self.placements)
        return original(self, grad_tensor, retain_graph, **kwargs)

    return backward


COMPARISONS = ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__")


def _outside(x) -> bool:
    """``x`` is a DistTensor whose mesh does not hold this rank."""
    return isinstance(x, paddle.Tensor) and x.is_dist() and dist.get_rank() not in x.process_mesh.process_ids


def _comparison(original):
    def compare(self, other):
        if isinstance(other, (bool, int, float)) and _outside(self):
            other = paddle.full_like(self, other)
        return original(self, other)

    return compare


def _check_fits(tensor, value) -> None:
    """Paddle's checks of ``set_value`` (type, global shape, dtype), for a rank outside the mesh."""
    where = (f"set_value of {tensor.name} (shape {tensor.shape}, {tensor.dtype}) on rank {dist.get_rank()}, "
             f"outside its mesh")
    if not isinstance(value, (np.ndarray, paddle.Tensor)):
        raise ValueMismatchError(f"{where}: the value must be a numpy array or a Tensor, got {type(value).__name__}")
    if list(value.shape) != list(tensor.shape):
        raise ValueMismatchError(f"{where}: the value has shape {list(value.shape)}; give the whole tensor's "
                                 f"shape {tensor.shape}, as on the ranks of the mesh")
    dtype = str(value.dtype) if isinstance(value, paddle.Tensor) else f"paddle.{np.dtype(value.dtype).name}"
    if dtype != str(tensor.dtype):
        raise ValueMismatchError(f"{where}: the value's dtype is {dtype}; cast it to {tensor.dtype}")


def _set_value(original):
    def set_value(self, value, *args, **kwargs):
        if _outside(self):
            _check_fits(self, value)
            return None   # the rank holds no local data of ``self``: nothing to write
        return original(self, value, *args, **kwargs)

    return set_value


def apply():
    _bind()
    _load()
    patched: list = []
    patch(paddle.Tensor, "backward", _backward, patched)
    patch(paddle.Tensor, "set_value", _set_value, patched)
    for name in COMPARISONS:
        patch(paddle.Tensor, name, _comparison, patched)
    return patched
