"""The SPMD bridge: Paddle's calling convention for paddle-ext rules, Paddle's C++ rules as paddle-ext rules.

* :func:`paddle_forward` / :func:`paddle_backward` let a paddle-ext :class:`SpmdRule` be called
  like ``core.get_phi_spmd_rule(op)``: tensors as ``DistTensorSpec`` (or :class:`DistSpec`),
  tensor lists as lists, attributes positionally in the PHI kernel's order; the answer is
  ``(input TensorDistAttrs, output TensorDistAttrs)`` (a tensor-list input gives a list).
* :class:`PaddleRule` wraps a C++ rule so the same callers (validator, differential tests,
  ``paddle-ext rules explain --source paddle``) get a :class:`RuleResult` from it.

* :data:`PADDLE_RULES` is what the pure registry asks for both (its ``PaddleRules`` port):
  :func:`connect` plugs it into :mod:`paddle_ext.spmd.registry`, and ``import paddle_ext`` calls
  :func:`connect`, so the pure engine never imports Paddle or compat.

What a ``DistTensorSpec`` must hold, as Paddle 3.3's C++ rules read it (measured with
``core.get_phi_spmd_rule``; docs/spmd_rules.md, "The bridge"):

* ``infer_forward`` reads each input's dims_mapping. Paddle refuses one whose length is not the
  tensor's rank (``ValueError``, "rank [3] and dims_mapping size [2] are not matched"), and so
  does the bridge (:class:`PlacementError`, saying what to pass). A mesh dim the mesh lacks or a
  mesh dim on two tensor dims is refused here too (Paddle raises, crashes or answers a mapping
  its mesh cannot hold).
* ``infer_backward`` reads the requested outputs' dims_mapping (the same checks) but never the
  inputs' dims_mapping: only their shape and process mesh. So the bridge reads a backward input
  as its shape on its mesh, whatever its dims_mapping holds (shorter, longer, empty, an absent
  mesh dim), as Paddle does. The op runs on the inputs' mesh; a requested output's
  dims_mapping is read on that mesh (elementwise reverse rules read only its mesh-dim numbers),
  and a reshape's target is the requested output's shape (:data:`OUTPUT_SHAPE_ATTRIBUTE`).

Everything Paddle-internal goes through :mod:`paddle_ext.compat.ports.spmd`.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Sequence

from ...errors import ShardingRuleError
from ...placements import DistSpec
from ...spmd.notation import UNKNOWN_SIZE
from ...spmd.registry import connect_paddle_rules
from ...spmd.result import RuleResult
from . import spmd as cspmd


def paddle_has_rule(op: str) -> bool:
    try:
        return cspmd.has_phi_rule(op)
    except Exception:  # no Paddle: there is no fallback, the lookup miss reports the name
        return False


def _is_tensor(v) -> bool:
    return isinstance(v, DistSpec) or cspmd.is_dist_tensor_spec(v)


def _is_tensor_list(v) -> bool:
    return isinstance(v, (list, tuple)) and len(v) > 0 and all(_is_tensor(x) for x in v)


def _is_absent(v) -> bool:
    """None, or Paddle's absent optional input ``DistTensorSpec([0], TensorDistAttr())``."""
    return v is None or (cspmd.is_dist_tensor_spec(v) and cspmd.is_absent_dist_tensor_spec(v))


@dataclass(frozen=True)
class _SpecReading:
    """What the bridge reads of a ``DistTensorSpec``: its shape, the mesh to read it on, and the
    dims_mapping to use (checked by :func:`cspmd.spec_from_dist_tensor_spec` like a spec)."""

    shape: tuple
    process_mesh: object
    dims_mapping: tuple


def _read(v, name: str):
    """``v.name`` of a DistTensorSpec (a method in Paddle 3.3's binding, an attribute elsewhere)."""
    value = getattr(v, name)
    return value() if callable(value) else value


def _shape_of(v) -> list[int]:
    return [int(s) for s in _read(v, "shape")]


def _to_spec(v, name: str = "tensor", mesh=None, mapping_ignored: bool = False) -> DistSpec:
    """A :class:`DistSpec`; a ``-1`` (unknown) size becomes :data:`UNKNOWN_SIZE`.

    ``mesh`` reads the spec on the op's mesh instead of its own (a requested output in backward);
    ``mapping_ignored`` reads it replicated, its dims_mapping unread (an input in backward).
    """
    if isinstance(v, DistSpec):
        return v
    if mesh is None and not mapping_ignored:
        return cspmd.spec_from_dist_tensor_spec(v, UNKNOWN_SIZE, name)
    shape = _shape_of(v)
    own = cspmd.mesh_of_dist_tensor_spec(v)
    mapping = [-1] * len(shape) if mapping_ignored else [int(m) for m in _read(v, "dims_mapping")]
    view = _SpecReading(tuple(shape), own if mesh is None else mesh, tuple(mapping))
    return cspmd.spec_from_dist_tensor_spec(view, UNKNOWN_SIZE, name)


def _rank(v) -> int:
    """Rank of a tensor argument (1 for None: Paddle's absent placeholder is ``[0]``)."""
    if v is None or isinstance(v, (list, tuple)):
        return 1
    return len(_shape_of(v))


def _has_mesh(x) -> bool:
    pm = cspmd.mesh_of_dist_tensor_spec(x)
    return pm is not None and len(pm.shape) > 0


def _mesh_of(op: str, args):
    """The one ``ProcessMesh`` of the DistTensorSpec arguments (absent inputs, and in backward
    inputs without a mesh, have none)."""
    found = None
    for v in args:
        for x in (v if isinstance(v, (list, tuple)) else [v]):
            if cspmd.is_dist_tensor_spec(x) and not _is_absent(x) and _has_mesh(x):
                pm = cspmd.mesh_of_dist_tensor_spec(x)
                key = (list(pm.shape), list(pm.process_ids))
                if found is None:
                    found = (key, pm)
                elif key != found[0]:
                    raise ShardingRuleError(
                        f"{op}: the tensors are on different process meshes (shape {found[0][0]} ranks "
                        f"{found[0][1]} and shape {key[0]} ranks {key[1]}); every tensor of one op must be "
                        f"on the same ProcessMesh: reshard across meshes first")
    return None if found is None else found[1]


def _split_args(rule, args: Sequence, with_outputs: bool):
    """``(input specs, output specs, attributes, mesh, input ranks)`` of a Paddle-convention call.

    Backward (``with_outputs``) reads the inputs as Paddle's reverse rules do: shape and mesh,
    not dims_mapping; the requested outputs are read on the inputs' mesh (module docstring).
    """
    tensors = [p for p in rule.params if p.kind != "attr"]
    attrs = [p for p in rule.params if p.kind == "attr"]
    args = list(args)
    if len(args) < len(tensors):
        raise ShardingRuleError(f"{rule.op}: expected {len(tensors)} tensor arguments "
                                f"({', '.join(p.name for p in tensors)}) first, got {len(args)} arguments")
    mesh = _mesh_of(rule.op, args[:len(tensors)] if with_outputs else args)
    if mesh is None and with_outputs:  # no input has a mesh: the outputs' mesh is the op's
        mesh = _mesh_of(rule.op, args[len(tensors):])
    read = functools.partial(_to_spec, mesh=mesh, mapping_ignored=True) if with_outputs else _to_spec
    specs, ranks = [], []
    for p, v in zip(tensors, args):
        ranks.append(_rank(v))
        if p.kind == "tensors":
            if not _is_tensor_list(v):
                raise ShardingRuleError(f"{rule.op}: argument {p.name!r} must be a list of DistTensorSpec")
            specs.append([read(x, f"{p.name}[{k}]") for k, x in enumerate(v)])
        elif _is_absent(v):
            if p.kind != "optional":
                raise ShardingRuleError(
                    f"{rule.op}: input {p.name!r} is required but was passed as absent ({v!r}); pass a "
                    f"DistTensorSpec with its shape and dims_mapping (only optional inputs may be absent)")
            specs.append(None)
        elif _is_tensor(v):
            specs.append(read(v, p.name))
        else:
            raise ShardingRuleError(f"{rule.op}: argument {p.name!r} must be a DistTensorSpec, got "
                                    f"{type(v).__name__} {v!r}; pass tensors first, in the PHI kernel's order")
    rest = args[len(tensors):]
    outs: list[DistSpec] = []
    if with_outputs:
        while rest and (_is_tensor(rest[0]) or _is_tensor_list(rest[0])):
            v = rest.pop(0)
            for x in (v if isinstance(v, (list, tuple)) else [v]):
                if _is_absent(x):
                    raise ShardingRuleError(f"{rule.op}: output {len(outs)} was passed as absent; backward "
                                            f"inference needs every output's DistTensorSpec")
                outs.append(_to_spec(x, f"output {len(outs)}", mesh=mesh))
    if len(rest) > len(attrs):
        raise ShardingRuleError(f"{rule.op}: {len(rest)} attribute arguments for {len(attrs)} attributes "
                                f"({', '.join(p.name for p in attrs)})")
    values = {p.name: v for p, v in zip(attrs, rest)}
    return specs, outs, values, mesh, ranks


def _to_paddle(rule, res: RuleResult, specs, mesh, ranks):
    conv = lambda s: cspmd.dist_attr(s, mesh)  # noqa: E731
    ins, k = [], 0
    for p, v, rank in zip([p for p in rule.params if p.kind != "attr"], specs, ranks):
        if p.kind == "tensors":
            ins.append([conv(s) for s in res.inputs[k:k + len(v)]])
            k += len(v)
        elif v is None:
            ins.append(cspmd.absent_dist_attr(rank))  # as Paddle answers an absent optional input
        else:
            ins.append(conv(res.inputs[k]))
            k += 1
    return ins, [conv(s) for s in res.outputs]


def paddle_forward(rule, args: Sequence):
    """``(input TensorDistAttrs, output TensorDistAttrs)`` of ``rule`` in Paddle's convention."""
    specs, _, attrs, mesh, ranks = _split_args(rule, args, with_outputs=False)
    res = rule.infer(specs, attrs)
    return _to_paddle(rule, res, specs, mesh, ranks)


#: Ops whose attribute is their output's shape. Paddle's reverse rule for them reads the target
#: from the requested output's DistTensorSpec, not from the attribute (ReshapeInferSpmdReverse:
#: the output's sizes, the input's size where the attribute says 0, one -1 inferred).
OUTPUT_SHAPE_ATTRIBUTE = {"reshape": "shape"}


def target_from_output(attribute: Sequence[int], output: Sequence[int]) -> list[int]:
    """The shape Paddle's reverse reshape reads: the requested output's sizes, except where the
    attribute copies the input's dim (0) or the output's size is unknown (-1).

    >>> target_from_output([1, 72, 48, 4, 6], [3, 24, 6, 8, 24])   # the output spec decides
    [3, 24, 6, 8, 24]
    >>> target_from_output([0, 0, -1, 192], [0, 0, -1, 192])       # 0 and -1 keep their meaning
    [0, 0, -1, 192]
    >>> target_from_output([8, 1024, 16, 192], [-1, 1024, 16, 192])
    [8, 1024, 16, 192]
    """
    attribute = list(attribute)
    return [int(attribute[i]) if i < len(attribute) and (attribute[i] == 0 or size == -1) else int(size)
            for i, size in enumerate(output)]


def _attrs_for_reverse(rule, outs: Sequence[DistSpec], attrs: dict) -> dict:
    """``attrs`` with an output-shape attribute read from the requested output, as Paddle does."""
    name = OUTPUT_SHAPE_ATTRIBUTE.get(rule.op)
    if name is None or len(outs) != 1 or name not in attrs:
        return attrs
    output = [-1 if size == UNKNOWN_SIZE else size for size in outs[0].shape]
    return {**attrs, name: target_from_output(attrs[name], output)}


def paddle_backward(rule, args: Sequence):
    """Paddle's ``infer_backward``: inputs, then outputs, then attributes; returns the inputs the
    op needs and the outputs it will produce from them (not the requested outputs verbatim).

    Read as Paddle's reverse rules read it (module docstring): the inputs' shapes and mesh, the
    requested outputs' dims_mapping on that mesh, and a reshape's target from its output spec.
    """
    specs, outs, attrs, mesh, ranks = _split_args(rule, args, with_outputs=True)
    res = rule.infer_reverse(specs, outs, _attrs_for_reverse(rule, outs, attrs))
    return _to_paddle(rule, res, specs, mesh, ranks)


class PaddleRule:
    """Paddle's C++ rule ``op`` behind paddle-ext's interface (``source == "paddle"``)."""

    source = "paddle"

    def __init__(self, op: str):
        self.op = op
        self.doc_notation = f"Paddle C++ rule {op}"
        self._rule = cspmd.phi_rule(op)

    def __repr__(self) -> str:
        return f"PaddleRule({self.op!r})"

    def infer_forward(self, *args):
        return self._rule.infer_forward(*self._convert(args))

    def infer_backward(self, *args):
        return self._rule.infer_backward(*self._convert(args))

    @staticmethod
    def _convert(args):
        mesh = None
        out = []
        for v in args:
            if isinstance(v, DistSpec):
                out.append(cspmd.dist_tensor_spec(v, mesh))
            elif isinstance(v, (list, tuple)) and v and all(isinstance(x, DistSpec) for x in v):
                out.append([cspmd.dist_tensor_spec(x, mesh) for x in v])
            else:
                out.append(v)
        return out

    def infer_positional(self, args: Sequence, backward: bool = False) -> RuleResult:
        """Call the C++ rule with :class:`DistSpec` tensors (lists allowed) and positional
        attributes; returns a :class:`RuleResult` (given = the tensor args, flattened)."""
        given = []
        for v in args:
            if isinstance(v, DistSpec):
                given.append(v)
            elif isinstance(v, (list, tuple)) and v and all(isinstance(x, DistSpec) for x in v):
                given.extend(v)
        ins, outs = (self._rule.infer_backward if backward else self._rule.infer_forward)(*self._convert(args))
        flat_ins = []
        for a in ins:
            flat_ins.extend(a if isinstance(a, list) else [a])
        req = [cspmd.spec_from_dist_attr(a, g.shape) for a, g in zip(flat_ins, given)]
        return RuleResult(self.op, tuple(req), tuple(_raw_out(o) for o in outs), (), tuple(given), "paddle")


def _raw_out(attr):
    """Output attrs have no shape in Paddle's answer: keep mesh and placements with a
    placeholder shape of the right rank (callers attach the real shape)."""
    rank = len(attr.dims_mapping)
    return cspmd.spec_from_dist_attr(attr, (1,) * rank)


def backward_round_trip(rule, specs: Sequence, outs: Sequence[DistSpec], attrs: dict,
                        outs_as_list: bool = False) -> RuleResult:
    """``rule``'s reverse inference as a caller of ``infer_backward`` sees it: ``specs`` (one
    entry per tensor parameter, a list for a tensor list) and ``outs`` as ``DistTensorSpec``,
    the answer's ``TensorDistAttr`` read back as :class:`DistSpec` (what Paddle's binding
    cannot carry, e.g. ``P(max)``, raises as it would for that caller)."""
    flat = [x for s in specs for x in (s if isinstance(s, (list, tuple)) else [s])]
    mesh = cspmd.process_mesh(flat[0].mesh_shape)
    dts = lambda x: cspmd.dist_tensor_spec(x, mesh)  # noqa: E731
    args = [[dts(x) for x in s] if isinstance(s, (list, tuple)) else dts(s) for s in specs]
    out_dts = [dts(o) for o in outs]
    args += [out_dts] if outs_as_list else out_dts
    args += [attrs.get(p.name, p.default) for p in rule.params if p.kind == "attr"]
    ins, got = rule.infer_backward(*args)
    flat_ins = [a for x in ins for a in (x if isinstance(x, list) else [x])]
    req = tuple(cspmd.spec_from_dist_attr(a, g.shape) for a, g in zip(flat_ins, flat))
    return RuleResult(rule.op, req, tuple(cspmd.spec_from_dist_attr(a, o.shape) for a, o in zip(got, outs)))


class _PaddleRules:
    """The registry's ``PaddleRules`` port, served by this module (see :mod:`paddle_ext.spmd.registry`)."""

    has_rule = staticmethod(paddle_has_rule)
    rule = staticmethod(PaddleRule)
    forward = staticmethod(paddle_forward)
    backward = staticmethod(paddle_backward)
    backward_round_trip = staticmethod(backward_round_trip)


PADDLE_RULES = _PaddleRules()


def connect() -> None:
    """Plug Paddle's rules and calling convention into paddle-ext's registries (idempotent; imports no Paddle)."""
    connect_paddle_rules(PADDLE_RULES)


__all__ = ["OUTPUT_SHAPE_ATTRIBUTE", "PADDLE_RULES", "PaddleRule", "backward_round_trip", "connect",
           "paddle_backward", "paddle_forward", "paddle_has_rule", "target_from_output"]
