"""A dispatch plan: everything a call needs that depends only on the op, its attributes and
its inputs' layouts -- computed once by :func:`make_plan`, then kept by :mod:`.plan_cache`.

:func:`make_plan` reads each input's :class:`DistSpec` (a dense tensor next to DistTensors is
taken as replicated, Paddle's own convention), checks that the inputs share one mesh and that
paddle-ext can serve them (else :class:`~.rule_lookup.HandBack` or :class:`~.rule_lookup.DispatchError`),
asks the op's rule, and records the input reshards the rule requires, each output's expected
local shape and Paddle placements, and the gradient plans (:mod:`.grad`) -- including whether
Paddle's native autograd gives them exactly (:attr:`Plan.native_hints`).
"""
from __future__ import annotations

import functools
import itertools
import logging
from dataclasses import dataclass, field
from typing import Any, Callable

from ..compat.ports import dispatch as cd
from ..compat.ports.convert import to_paddle_placements
from ..errors import ShardingRuleError
from ..placements import DistSpec, Partial, Replicate, Shard
from .grad import GradPlan, grad_plan
from .rule_lookup import DispatchError, HandBack, get_rule, infer, paddle_agrees
from .slots import is_flat, restructure

log = logging.getLogger("paddle_ext.dispatch")


@dataclass(frozen=True)
class LocalCtx:
    """What a shard-aware local function may ask: this rank's offsets and shapes.

    ``offset(i, d)`` is where input ``i``'s local block starts along dim ``d`` (flat input order,
    as the rule sees them); ``coord`` is this rank's mesh coordinate.
    """

    specs: tuple
    outputs: tuple
    coord: tuple

    def offset(self, tensor: int, dim: int) -> int:
        return self.specs[tensor].local_slices(self.coord)[dim][0]

    def out_shape(self, k: int) -> tuple:
        return self.outputs[k].local_shape(self.coord)


@dataclass(eq=False)
class Plan:
    """Everything a call needs that depends only on the op, attrs and input layouts (cached)."""

    op: str
    mesh: Any                     # paddle.distributed.ProcessMesh of the inputs
    specs: tuple                  # given input specs (flat)
    result: Any                   # RuleResult (Partial outputs removed in to_static)
    coord: tuple
    ctx: LocalCtx
    reshards: tuple               # (flat index, paddle-ext placements)
    out_local: tuple              # expected local shape per output, as lists
    out_paddle: tuple             # Paddle placements per output (lists, as dtensor_from_local takes)
    out_fast: tuple               # per output: dtensor_from_local infers the right global shape
    notes: tuple = ()
    cmesh: Any = None             # dygraph: the mesh as an owned C++ ProcessMesh (see plan_cache)
    direct: bool = False          # every slot is one DistTensor: the slots are the flat inputs
    attrs: tuple = ()             # the rule's attributes, as (name, value) pairs
    by_paddle: Any = field(default=None, init=False)   # differentiable calls run Paddle's own op (core.dispatch)
    single: bool = field(init=False)   # one evenly split output: wrapped without the general loop
    ready: bool = field(init=False)    # direct and no reshard: the slots are the inputs as given
    _grads: dict = field(default_factory=dict, init=False, repr=False)   # differentiable mask -> GradPlan

    def __post_init__(self):
        self.single = len(self.out_fast) == 1 and self.out_fast[0]
        self.ready = self.direct and not self.reshards

    def grad_plan(self, diff: tuple) -> GradPlan:
        """The :class:`GradPlan` for this mask of differentiable outputs (computed once)."""
        g = self._grads.get(diff)
        if g is None:
            g = self._grads[diff] = grad_plan(self.result.inputs, self.result.outputs, diff, self.op)
        return g

    @functools.cached_property
    def native_hints(self):
        """Per input, the placements to give ``dtensor_to_local`` so Paddle's native autograd
        yields the :class:`GradPlan`'s gradients -- or None when it cannot:

        * an output is ``Partial``: the backward of ``dtensor_from_local`` reshards ``dy`` to
          ``Partial`` before taking the local value (measured: wrong gradients), while the local
          VJP needs the whole ``dy``;
        * the plan needs a replicated output gradient kept on one coordinate (``partialize``) or
          scaled (``P(avg)``);
        * the input gradients would depend on which outputs are differentiable;
        * a shard is uneven: Paddle's ``dtensor_from_local`` infers ``local * mesh size``.

        Those calls keep the PyLayer. Decided once per plan.
        """
        res = self.result
        outs = tuple(res.outputs)
        if (not outs or len(outs) > 4 or not all(self.out_fast)
                or any(isinstance(p, Partial) for o in outs for p in o.placements)
                or not all(fits_from_local(s, self.coord) for s in res.inputs)):
            return None
        base = None
        for mask in itertools.product((False, True), repeat=len(outs)):
            if not any(mask):
                continue
            try:
                gp = grad_plan(res.inputs, outs, mask, self.op)
            except ShardingRuleError:
                return None
            if gp.partialize or any(sc != 1.0 for sc in gp.output_scale):
                return None
            pls = tuple(tuple(s.placements) for s in gp.input_grads)
            if base is None:
                base = pls
            elif pls != base:
                return None
        return tuple(list(to_paddle_placements(p)) for p in base)

    @functools.cached_property
    def paddle_serves(self) -> bool:
        """True when Paddle's own op, called on the DistTensors, does what this plan does, so a
        differentiable call can run it and keep Paddle's one grad node: the inputs are used as
        given (no reshard), every shard is even, no output is ``Partial``, the gradient plan is
        one Paddle's autograd builds (:attr:`native_hints`), and Paddle's C++ rule for the op
        answers paddle-ext's input and output placements (:func:`~.rule_lookup.paddle_agrees`).
        Decided once per plan; the first call also checks the outputs (:func:`~.core.dispatch`).
        """
        if not self.ready or self.native_hints is None:
            return False
        return paddle_agrees(self.op, self.specs, dict(self.attrs), self.result)


# (rule, op, slots, attrs, specs, result) -> (result, notes): how to_static adjusts the rule's answer
Adjust = Callable[..., tuple]


def make_plan(op: str, slots: list, attrs: dict, flat: list, mesh, cmesh=None, adjust: Adjust | None = None) -> Plan:
    """The :class:`Plan` for ``op`` on these inputs (``flat``: the tensors of ``slots``; ``mesh``:
    the first DistTensor's). Raises :class:`DispatchError` for mixed meshes or a rule that cannot
    serve them, :class:`HandBack` for what Paddle's own op serves."""
    dist_ts = [t for t in flat if cd.is_dist(t)]
    for t in dist_ts[1:]:
        other = cd.mesh_of(t)
        if not cd.same_mesh(cd.python_mesh(mesh), other):
            specs = ", ".join(describe(x) for x in dist_ts)
            raise DispatchError(
                f"{op}: inputs are on different meshes ({cd.describe_mesh(mesh)} and {cd.describe_mesh(other)}; "
                f"inputs {specs}); every input of one op must be on the same mesh -- reshard across meshes first "
                f"(paddle_ext.reshard(x, mesh, placements))")
    mshape = tuple(int(s) for s in mesh.shape)
    if any(len(t.shape) == 0 for t in dist_ts):
        # a 0-D operand has no dims for a rule's notation (``loss.mean()`` of a scalar loss)
        raise HandBack(f"{op}: a 0-D operand has no dimension to shard; Paddle's own op serves it")
    dynamic = [t for t in dist_ts if any(int(d) < 0 for d in t.shape)]
    if dynamic:
        raise HandBack(f"{op}: {describe(dynamic[0])} has a dynamic (-1) dimension, which paddle-ext's rules do "
                       f"not size; Paddle's own op serves it")
    coord = cd.mesh_coord(mesh)
    if coord is None:
        raise HandBack(f"{op}: this rank ({cd.current_rank()}) is not in {cd.describe_mesh(mesh)}; Paddle's own "
                       f"op serves a rank outside the tensors' mesh")
    specs = tuple(cd.spec_and_mesh(t)[0] if cd.is_dist(t) else
                  DistSpec(tuple(int(s) for s in t.shape), mshape, [Replicate()] * len(mshape)) for t in flat)
    rule = get_rule(op)
    result = infer(rule, op, restructure(slots, list(specs)), attrs, specs)
    notes = ()
    if adjust is not None:
        result, notes = adjust(rule, op, slots, attrs, specs, result)
    if len(result.inputs) != len(flat):
        raise DispatchError(f"{op}: the rule returned {len(result.inputs)} input specs for {len(flat)} tensors; "
                            f"fix the rule so it returns one spec per tensor input")
    if log.isEnabledFor(logging.DEBUG):
        log.debug("%s", result)
    # keep the Python ProcessMesh: the C++ mesh object a tensor hands out does not own its data,
    # and a plan outlives the tensor it came from (measured: a cached one crashed dtensor_from_local)
    return Plan(op, cd.python_mesh(mesh), specs, result, coord, LocalCtx(result.inputs, result.outputs, coord),
                reshards=tuple((r.index, r.dst.placements) for r in result.reshards),
                out_local=tuple([int(v) for v in o.local_shape(coord)] for o in result.outputs),
                out_paddle=tuple(list(to_paddle_placements(o.placements)) for o in result.outputs),
                out_fast=tuple(fits_from_local(o, coord) for o in result.outputs),
                notes=notes, cmesh=cmesh, direct=is_flat(slots) and len(dist_ts) == len(flat),
                attrs=tuple(attrs.items()) if attrs else ())


def fits_from_local(spec: DistSpec, coord) -> bool:
    """True when Paddle's ``dtensor_from_local`` (local * mesh size on sharded dims) gives the
    true global shape on this rank, i.e. every sharded dim splits evenly."""
    local = list(spec.local_shape(coord))
    for m, p in enumerate(spec.placements):
        if isinstance(p, Shard):
            local[p.dim] *= spec.mesh_shape[m]
    return len(spec.shape) > 0 and tuple(local) == tuple(spec.shape)


def describe(t) -> str:
    """A tensor's :class:`DistSpec` as text, for error messages (its shape if it has none)."""
    try:
        return str(cd.spec_and_mesh(t)[0])
    except Exception:
        return f"tensor {list(getattr(t, 'shape', []))}"


__all__ = ["LocalCtx", "Plan", "describe", "fits_from_local", "make_plan"]
