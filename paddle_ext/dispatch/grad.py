"""Gradient placements of a dispatched op: the transpose of its forward layout (pure).

The op ran locally on inputs laid out as the rule requires and produced outputs with the
placements the rule claims. Backward runs the local vector-Jacobian product, so each local
gradient means, per mesh dim ``m``:

* output ``S(d)`` / ``R``: the incoming gradient keeps that placement; output ``P(op)``: every
  partial contributed to the sum, so its gradient is the whole ``dy`` -- ``R`` (``P(avg)``
  additionally scales it by ``1/size(m)``; ``P(max|min)`` has no such gradient and is refused);
* input ``S(d)``: the local gradient is the gradient of this rank's block -- ``S(d)``;
* input ``R``: every rank computed from the whole input, so the local gradients are *partial*
  contributions -- ``P(sum)`` when any output is split (``S``/``P``) on ``m``, ``R`` when every
  output is replicated there (then each rank already holds the full gradient). This is the
  case ``dist.local_map`` gets wrong (it returns ``R``);
* input ``P(op)``: the logical input is the reduction of the partials, so its gradient is the
  whole ``dy`` routed back -- ``R``.

When an input is ``R`` on ``m`` with a ``P(sum)`` gradient while some output is ``R`` on ``m``,
that output's gradient is first made ``P(sum)`` (kept on mesh coordinate 0, zero elsewhere) so
it is not counted ``size(m)`` times.

>>> from paddle_ext.placements import DistSpec
>>> x = DistSpec((4, 6), (2,), "[R]"); w = DistSpec((6, 8), (2,), "[S(1)]")
>>> y = DistSpec((4, 8), (2,), "[S(1)]")
>>> plan = grad_plan([x, w], [y])
>>> [format_placements(s.placements) for s in plan.input_grads]
['[P(sum)]', '[S(1)]']
>>> str(plan)
'grad: dy [S(1)] -> dx [P(sum)],[S(1)]'
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..errors import ShardingRuleError
from ..placements import DistSpec, Partial, Replicate, Shard, format_placements


@dataclass(frozen=True)
class GradPlan:
    """Placements of the output gradients as the local backward needs them, of the input
    gradients it produces, the ``1/n`` scale per output (``P(avg)``), and the (output, mesh
    dim) pairs whose replicated gradient must be kept on coordinate 0 only."""

    output_grads: tuple[DistSpec, ...]
    input_grads: tuple[DistSpec, ...]
    output_scale: tuple[float, ...]
    partialize: tuple[tuple[int, int], ...] = ()

    def __str__(self) -> str:
        outs = ",".join(format_placements(s.placements) for s in self.output_grads)
        ins = ",".join(format_placements(s.placements) for s in self.input_grads)
        return f"grad: dy {outs} -> dx {ins}"


def grad_plan(inputs: Sequence[DistSpec], outputs: Sequence[DistSpec],
              differentiable: Sequence[bool] | None = None, op: str = "op") -> GradPlan:
    """The :class:`GradPlan` for an op run locally on ``inputs`` giving ``outputs``."""
    outputs = list(outputs)
    diff = list(differentiable) if differentiable is not None else [True] * len(outputs)
    mesh = inputs[0].mesh_shape if inputs else outputs[0].mesh_shape
    out_grads, scales = [], []
    for k, o in enumerate(outputs):
        pls, scale = [], 1.0
        for m, p in enumerate(o.placements):
            if isinstance(p, Partial):
                if diff[k] and p.op in ("max", "min"):
                    raise ShardingRuleError(
                        f"{op}: output {k} is {format_placements(o.placements)}; a P({p.op}) output has no "
                        f"local gradient -- reshard the input so the {p.op} is computed whole (Replicate the "
                        f"reduced dim), or detach the output")
                if p.op == "avg":
                    scale /= mesh[m]
                pls.append(Replicate())
            else:
                pls.append(p)
        out_grads.append(DistSpec(o.shape, o.mesh_shape, pls))
        scales.append(scale)
    split_on = [any(diff[k] and not isinstance(o.placements[m], Replicate) for k, o in enumerate(outputs))
                for m in range(len(mesh))]
    in_grads = []
    partial_dims = set()
    for x in inputs:
        pls = []
        for m, p in enumerate(x.placements):
            if isinstance(p, Shard):
                pls.append(p)
            elif isinstance(p, Partial):
                pls.append(Replicate())
            elif split_on[m]:
                pls.append(Partial("sum"))
                partial_dims.add(m)
            else:
                pls.append(Replicate())
        in_grads.append(DistSpec(x.shape, x.mesh_shape, pls))
    partialize = []
    for m in sorted(partial_dims):
        if any(isinstance(x.placements[m], Shard) for x in inputs):
            continue  # a sharded input on m needs the full dy of replicated outputs
        for k, o in enumerate(outputs):
            if diff[k] and isinstance(o.placements[m], Replicate):
                partialize.append((k, m))
    return GradPlan(tuple(out_grads), tuple(in_grads), tuple(scales), tuple(partialize))


def local_map_grad(inputs: Sequence[DistSpec]) -> tuple[DistSpec, ...]:
    """What ``dist.local_map`` (and autograd through ``dtensor_to_local(x, mesh, x.placements)``)
    gives: every input gradient keeps its input's placements -- wrong for replicated inputs
    consumed by a split computation (the local values are only partial sums)."""
    return tuple(inputs)


__all__ = ["GradPlan", "grad_plan", "local_map_grad"]
