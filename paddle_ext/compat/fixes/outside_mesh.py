"""Opt-in fixes ``ranks-outside-mesh`` and ``local-layer-dense-gradient``: a rank outside a
DistTensor's mesh can run ops on it (pipeline parallelism by annotation).

Pipeline parallelism by annotation has every rank run the whole forward: stage 0's ops on a mesh
of stage 0's ranks, stage 1's on another. On the Paddle 3.3.1 CPU wheel a rank outside an op's
mesh dies with SIGSEGV: each dist API makes its outputs' empty locals at
``phi::distributed::GetDefaultPlace()``, which reads the first registered custom device type of
an empty list. The fix has two parts:

* C++ (``paddle_ext/csrc/outside_mesh.cc``, built by :mod:`.cpp_build`): registers in this
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
* Python (its own fix, ``local-layer-dense-gradient``): ``LocalLayer`` (PaddleNLP's MoE gate, ``LocalGatePart1``) converts only DistTensor
  inputs to locals and ignores its ``grad_dist_attrs`` for a dense one. A trainable dense
  tensor (the gate weight, a plain parameter: only ops between DistTensors make a dense input
  dist, and this one meets only locals) then gets each rank's partial gradient, never summed
  over the ranks that split the tokens: every rank steps its own copy. The patch first makes
  such an input a DistTensor replicated on the mesh of its ``grad_dist_attrs`` entry
  (``dtensor_from_local``, differentiable), so Paddle's own conversion applies the declared
  gradient placement and the parameter's gradient is the reduced one, the same on every rank.
  A declared ``Partial(avg)`` on a mesh dim where the layer's inputs split the tokens is applied
  as ``Partial(sum)``: each rank's share already carries 1/N of the batch, and an average gave
  the gate half its dense gradient at dp 2 (:func:`_summed_if_split`, logged once per parameter).

It changes what the process reports: ``paddle.base.core.get_all_custom_device_type()`` returns
``['no_device']`` and ``paddle.distributed.ParallelEnv().device_type`` reads ``'no_device'``.
So it is applied only on request (``paddle_ext.install(pipeline_by_annotation=True)``, also
spelled ``ranks_outside_mesh=True``; plain ``install()`` prints a one-line hint naming it, see
:mod:`.outside_mesh_hint`), on the build
it was measured on (Paddle 3.3.1, CPU, no custom device registered), in a rank process (never the
launcher, which would then take the device for a real one). ``revert()`` restores
what it patched; the registered device type stays for the life of the process (Paddle has no
way to unregister one type). docs/compatibility.md, "Ranks outside a mesh".
"""
from __future__ import annotations

import numpy as np
import paddle
import paddle.distributed as dist
from paddle.distributed.auto_parallel.local_layer import LocalLayer

from ...errors import CompatError, ValueMismatchError
from ..native import cpp_build  # imports Paddle (builds nothing until the opt-in is applied)
from ..ports.backend import note_once
from ..fix import Fix, apply_fixes, revert_fixes
from .outside_mesh_support import DEVICE_TYPE, SWITCH, VERIFIED_VERSIONS, unsupported_reason  # noqa: F401

_MODULE: list = [None]   # the loaded C++ piece, once


def _needed() -> bool:
    """Apply where verified; elsewhere leave Paddle as it is, with one log line naming why (the
    program then runs as on Paddle alone)."""
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
    return _load().default_place()


def _patch(owner, name: str, make, patched: list) -> None:
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


def _local_layer_call(original):
    def call(self, *inputs, **kwargs):
        # (a count that does not match is left to Paddle's own check)
        if len(inputs) != len(self.grad_dist_attrs) or not any(isinstance(x, paddle.Tensor) and x.is_dist()
                                                                for x in inputs):
            return original(self, *inputs, **kwargs)
        declared = self.grad_dist_attrs
        attrs = [_summed_if_split(x, attr, inputs, self) for x, attr in zip(inputs, declared)]
        inputs = tuple(_as_replicated(x, attr) for x, attr in zip(inputs, attrs))
        self.grad_dist_attrs = attrs   # what Paddle's own conversion reads, for this call only
        try:
            return original(self, *inputs, **kwargs)
        finally:
            self.grad_dist_attrs = declared

    return call


def _summed_if_split(x, attr, inputs, layer):
    """The gradient placement to apply to a trainable dense input ``x`` of a ``LocalLayer``.

    The layer's outputs are global DistTensors, so each rank's local gradient of ``x`` is its own
    tokens' share of the global gradient: on a mesh dim over which another input is sharded (the
    tokens are split there) the shares already carry their 1/N of the batch, and the reduction
    that gives the global gradient is a sum. A declared ``Partial(avg)`` on such a dim (PaddleNLP's
    MoE gate, ``LocalGatePart1``) would halve the gradient at dp 2: it becomes ``Partial(sum)``,
    logged once with the parameter's name. An ``avg`` on a dim where nothing is split is kept
    (and logged: paddle-ext cannot prove it wrong there)."""
    if attr is None or not isinstance(x, paddle.Tensor) or x.is_dist() or x.stop_gradient:
        return attr
    mesh, placements = attr
    split = {d for y in inputs if isinstance(y, paddle.Tensor) and y.is_dist() and y.process_mesh == mesh
             for d, p in enumerate(y.placements) if p.is_shard()}
    fixed = list(placements)
    for d, p in enumerate(placements):
        if p.is_partial() and p.reduce_type() == dist.ReduceType.kRedAvg:
            if d in split:
                fixed[d] = dist.Partial(dist.ReduceType.kRedSum)
                note_once(f"local-layer-avg-sum:{x.name}", f"{type(layer).__name__} declares Partial(avg) for the "
                          f"gradient of {x.name} on mesh dim {d}, where its inputs split the tokens: each rank's "
                          "share already carries 1/N of the batch, so it is reduced as a sum (an average would "
                          "scale it by 1/N)")
            else:
                note_once(f"local-layer-avg-kept:{x.name}", f"{type(layer).__name__} declares Partial(avg) for the "
                          f"gradient of {x.name} on mesh dim {d}, where no input is split: kept as declared")
    return (mesh, fixed)


def _as_replicated(x, attr):
    """A trainable dense ``x`` declared with a gradient placement: replicated on that mesh."""
    if attr is None or not isinstance(x, paddle.Tensor) or x.is_dist() or x.stop_gradient:
        return x
    mesh = attr[0]
    if dist.get_rank() not in mesh.process_ids:
        return x
    # a copy: given the parameter itself, Paddle makes it the op's output (no longer a leaf), and
    # the next step's backward fails ("TensorWrappers of DtensorFromLocalGradNode do not exist")
    return dist.auto_parallel.api.dtensor_from_local(x.clone(), mesh, [dist.Replicate()] * len(mesh.shape))


def _apply():
    _load()
    patched: list = []
    _patch(paddle.Tensor, "backward", _backward, patched)
    _patch(paddle.Tensor, "set_value", _set_value, patched)
    for name in COMPARISONS:
        _patch(paddle.Tensor, name, _comparison, patched)
    return patched


def _apply_local_layer():
    patched: list = []
    _patch(LocalLayer, "__call__", _local_layer_call, patched)
    return patched


# Both change what a program that already runs sees (a registered device type; LocalLayer
# gradients on the ranks inside the mesh too), so both are opt-in under SWITCH; plain install()
# only prints the hint of :mod:`.outside_mesh_hint`.
FIXES: dict[str, Fix] = {
    f.name: f for f in (
        Fix("ranks-outside-mesh",
            "a rank outside a DistTensor's mesh runs its ops (registers a zero-device type 'no_device', visible "
            "in get_all_custom_device_type(), served by a CPU context; backward seed; set_value; comparisons "
            "with a number)", _needed, _apply),
        Fix("local-layer-dense-gradient",
            "a trainable dense input of a LocalLayer (an MoE gate weight) gets its declared gradient placement, "
            "reduced over the ranks that split the tokens (Partial(avg) there applied as a sum), on every rank",
            _needed, _apply_local_layer),
    )
}


def install() -> list[str]:
    """Apply the fix where it was verified (idempotent); elsewhere log why and change nothing."""
    return apply_fixes(FIXES)


def uninstall() -> None:
    """Restore ``Tensor.backward``, ``set_value``, the comparisons and ``LocalLayer.__call__`` (the device type
    stays registered)."""
    revert_fixes(FIXES)
