"""Opt-in fix ``local-layer-dense-gradient``: a ``LocalLayer``'s trainable dense input gets its
declared gradient placement (applied with ``ranks-outside-mesh``, :mod:`.outside_mesh`, under
``install(pipeline_by_annotation=True)``, where it was verified).

``LocalLayer`` (PaddleNLP's MoE gate, ``LocalGatePart1``) converts only DistTensor inputs to locals
and ignores its ``grad_dist_attrs`` for a dense one. A trainable dense tensor (the gate weight, a
plain parameter: only ops between DistTensors make a dense input dist, and this one meets only
locals) then gets each rank's partial gradient, never summed over the ranks that split the tokens:
every rank steps its own copy. The patch first makes such an input a DistTensor replicated on the
mesh of its ``grad_dist_attrs`` entry (``dtensor_from_local``, differentiable), so Paddle's own
conversion applies the declared gradient placement and the parameter's gradient is the reduced one,
the same on every rank. A declared ``Partial(avg)`` on a mesh dim where the layer's inputs split the
tokens is applied as ``Partial(sum)``: each rank's share already carries 1/N of the batch, and an
average gave the gate half its dense gradient at dp 2 (:func:`_summed_if_split`, logged once per
parameter).

It changes the gradients of the ranks inside the mesh too, so it is opt-in. Importing this
module imports no Paddle.
"""
from __future__ import annotations

from ..ports.backend import note_once
from ..version import require_paddle
from . import outside_mesh
from .outside_mesh_support import SWITCH

paddle = dist = None     # Paddle and paddle.distributed, bound by apply()


def _call(original):
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


def apply():
    global paddle, dist
    paddle = require_paddle(SWITCH)
    dist = paddle.distributed
    patched: list = []
    outside_mesh.patch(dist.auto_parallel.local_layer.LocalLayer, "__call__", _call, patched)
    return patched


needed = outside_mesh.needed   # the same precondition as ranks-outside-mesh
