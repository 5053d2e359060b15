"""The rule registry: ``@register_spmd_rule("op")`` and ``get_spmd_rule("op")``.

A rule is a small pure function whose parameters are the op's tensors (annotated ``DistSpec``,
``list[DistSpec]`` for a tensor list, ``DistSpec | None`` for an optional one) followed by its
attributes (annotated ``bool``, ``int``, ``float``, ``str``, ``list[int]``), in the PHI kernel's
order. It returns a *plan*: a notation string (the einsum engine), a :class:`View` (a DimTrans
map), :class:`Rows` (one-mesh-dim rows) or a finished :class:`RuleResult`. The first line of
the docstring states the rule in notation.

>>> from paddle_ext.placements import DistSpec
>>> reg = Registry()
>>> @reg.register("my_scale")
... def my_scale(x: DistSpec, factor: float = 1.0):
...     '''... -> ...'''
...     return "... -> ..."
>>> str(reg.get("my_scale").infer([DistSpec((4, 6), (2,), "[S(1)]")], {"factor": 2.0}))
'my_scale: [S(1)] = [S(1)]'

``get`` falls back to Paddle's C++ rule when paddle-ext has none, so callers use one registry;
a miss lists the close names. Registries are plain dicts (``reg.rules``) tests can inspect.

Paddle comes in through one port, :class:`PaddleRules` (Paddle's C++ rules and its calling
convention), which :mod:`paddle_ext.compat.ports.spmd_bridge` connects when ``paddle_ext`` is imported:
this module imports neither Paddle nor compat.
"""
from __future__ import annotations

import difflib
import functools
import operator
import inspect
import typing
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, Sequence


from ..errors import ShardingRuleError
from ..placements import DistSpec
from .dimtrans import infer_dimtrans, infer_dimtrans_reverse
from .einsum import infer_einsum, infer_einsum_grad, infer_einsum_reverse
from .notation import Notation, parse_notation
from .onedim import infer_onedim, infer_onedim_reverse
from .opcases import OpCase, add_case
from .result import RuleResult, make_result


@dataclass(frozen=True)
class View:
    """Plan for a reshape-like op: ``dim_map`` applied to tensor input ``index``."""

    dim_map: tuple
    out_shape: tuple | None = None
    index: int = 0


@dataclass(frozen=True)
class Rows:
    """Plan for a one-mesh-dim rule: rows of (output placements, input placements)."""

    rows: tuple
    out_shapes: tuple | None = None


# -- parameters -------------------------------------------------------------------------------
_ATTR_TYPES = {"bool": bool, "int": int, "float": float, "str": str}


@dataclass(frozen=True)
class Param:
    name: str
    kind: str            # "tensor" | "tensors" | "optional" | "attr"
    type: str            # for attrs: bool/int/float/str/list[int]/list[float]/any
    default: Any = inspect.Parameter.empty

    def check(self, op: str, value, notation: str):
        """Validate (and normalise) an attribute value; tuples replace lists (hashable)."""
        if self.kind != "attr" or self.type == "any":
            return value
        where = f"{op} (rule {notation!r}): attribute {self.name!r}"
        if self.type.startswith("list["):
            inner = _ATTR_TYPES[self.type[5:-1]]
            if isinstance(value, (list, tuple)) and all(_is(v, inner) for v in value):
                return tuple(inner(v) for v in value)
            raise ShardingRuleError(f"{where} must be a list of {inner.__name__}, got {value!r}; "
                                    f"pass e.g. [0, 1]")
        want = _ATTR_TYPES[self.type]
        if not _is(value, want):
            raise ShardingRuleError(f"{where} must be {want.__name__}, got {type(value).__name__} {value!r}; "
                                    f"pass a {want.__name__} (PHI kernel order: "
                                    f"tensors first, then attributes)")
        return want(value)


def _is(value, want) -> bool:
    if want is bool:
        return isinstance(value, bool)
    if want is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if want is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, want)


def _param_of(op: str, p: inspect.Parameter, ann) -> Param:
    raw = p.annotation if isinstance(p.annotation, str) else ann
    text = raw if isinstance(raw, str) else (raw.__name__ if isinstance(raw, type) else str(raw))
    text = text.replace("typing.", "").replace(" ", "").replace("paddle_ext.placements.", "")
    if text == "DistSpec":
        return Param(p.name, "tensor", "DistSpec", p.default)
    if text in ("list[DistSpec]", "Sequence[DistSpec]", "tuple[DistSpec,...]"):
        return Param(p.name, "tensors", "DistSpec", p.default)
    if text in ("DistSpec|None", "Optional[DistSpec]", "Union[DistSpec,None]"):
        return Param(p.name, "optional", "DistSpec", None if p.default is inspect.Parameter.empty else p.default)
    for key in ("bool", "int", "float", "str"):
        if text == key:
            return Param(p.name, "attr", key, p.default)
        if text in (f"list[{key}]", f"Sequence[{key}]", f"tuple[{key},...]"):
            return Param(p.name, "attr", f"list[{key}]", p.default)
    if text in ("Any", "object"):
        return Param(p.name, "attr", "any", p.default)
    raise ShardingRuleError(
        f"rule {op!r}: parameter {p.name!r} has annotation {text!r}; annotate tensors as DistSpec, "
        f"list[DistSpec] or DistSpec | None and attributes as bool, int, float, str or list[int]")


def signature_of(op: str, fn: Callable) -> tuple[Param, ...]:
    """The rule's parameters, checked: every one annotated, tensors before attributes."""
    sig = inspect.signature(fn)
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # unresolvable forward references: fall back to the raw strings
        hints = {}
    params = []
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise ShardingRuleError(f"rule {op!r}: *{p.name} is not allowed; name every tensor and attribute")
        ann = hints.get(p.name, p.annotation)
        if ann is inspect.Parameter.empty:
            raise ShardingRuleError(f"rule {op!r}: parameter {p.name!r} has no annotation; annotate it "
                                    f"(DistSpec for a tensor, bool/int/float/list[int] for an attribute)")
        params.append(_param_of(op, p, ann))
    kinds = [p.kind != "attr" for p in params]
    if kinds != sorted(kinds, reverse=True):
        raise ShardingRuleError(f"rule {op!r}: tensor parameters must come before attributes, as in "
                                f"the PHI kernel; got {[p.name for p in params]}")
    if not any(kinds):
        raise ShardingRuleError(f"rule {op!r}: the rule has no tensor parameter")
    return tuple(params)


# -- the port to Paddle -------------------------------------------------------------------------
class PaddleRules(Protocol):
    """What the registry needs from Paddle (served by :mod:`paddle_ext.compat.ports.spmd_bridge`)."""

    def has_rule(self, op: str) -> bool:
        """True when Paddle's C++ registry has a rule ``op`` (False without Paddle)."""

    def rule(self, op: str):
        """Paddle's C++ rule ``op`` as an object with ``infer_forward``/``infer_backward``/``infer_positional``."""

    def forward(self, rule: "SpmdRule", args: Sequence):
        """``rule``'s forward inference in Paddle's calling convention (DistTensorSpec in, TensorDistAttr out)."""

    def backward(self, rule: "SpmdRule", args: Sequence):
        """``rule``'s reverse inference in Paddle's calling convention."""

    def backward_round_trip(self, rule: "SpmdRule", specs: Sequence, outs: Sequence[DistSpec], attrs: dict,
                            outs_as_list: bool = False) -> RuleResult:
        """``rule``'s reverse inference from :class:`DistSpec` through Paddle's convention and back."""


def connect_paddle_rules(paddle: PaddleRules) -> None:
    """Give every registry Paddle's C++ rules as the fallback, and :class:`SpmdRule` Paddle's calling convention."""
    Registry.paddle = paddle


def paddle_rules() -> PaddleRules:
    """The connected :class:`PaddleRules` (``import paddle_ext`` connects it)."""
    if Registry.paddle is None:
        raise ShardingRuleError("Paddle's SPMD rules are not connected to paddle-ext's registry; import paddle_ext "
                                "(it connects paddle_ext.compat.ports.spmd_bridge)")
    return Registry.paddle


# -- the rule object ----------------------------------------------------------------------------
class SpmdRule:
    """A registered paddle-ext rule: pure API (:meth:`infer`, :meth:`infer_reverse`,
    :meth:`infer_grad`) and Paddle's calling convention (:meth:`infer_forward`,
    :meth:`infer_backward`, through the :class:`PaddleRules` port)."""

    source = "ext"

    def __init__(self, op: str, fn: Callable, case: OpCase | None = None):
        self.op = op
        self.fn = fn
        self.case = case   # the validator's ground truth for the op, written next to the rule
        self.params = signature_of(op, fn)
        doc = inspect.getdoc(fn) or ""
        self.doc_notation = doc.splitlines()[0] if doc else ""
        self._cached = functools.lru_cache(maxsize=8192)(self._infer_uncached)
        self._front: dict = {}  # (specs, attrs as given) -> result; filled only after validation
        self._by_id: dict = {}  # (spec ids, attrs) -> (specs, result): skips hashing the specs

    def __repr__(self) -> str:
        return f"SpmdRule({self.op!r}, {self.doc_notation!r})"

    # -- binding -------------------------------------------------------------------------------
    def bind(self, specs: Sequence, attrs: Mapping | None = None) -> tuple[tuple, tuple]:
        """(tensor args per parameter, attribute values) from flat-ish specs and an attr dict.

        ``specs`` lists the tensor parameters in order (a tensor list is one nested list).
        """
        attrs = dict(attrs or {})
        tensors = [p for p in self.params if p.kind != "attr"]
        specs = list(specs)
        if len(tensors) == 1 and tensors[0].kind == "tensors" and specs and isinstance(specs[0], DistSpec):
            specs = [specs]
        if len(specs) > len(tensors) or len(specs) < sum(p.kind == "tensor" for p in tensors):
            raise ShardingRuleError(
                f"{self.op} (rule {self.doc_notation!r}): got {len(specs)} tensor specs, expected "
                f"{len(tensors)} ({', '.join(p.name for p in tensors)})")
        targs = []
        for k, p in enumerate(tensors):
            v = specs[k] if k < len(specs) else None
            if p.kind == "tensors":
                if not isinstance(v, (list, tuple)) or not all(isinstance(x, DistSpec) for x in v):
                    raise ShardingRuleError(f"{self.op}: tensor list {p.name!r} must be a list of DistSpec, got {v!r}")
                v = tuple(v)
            elif p.kind == "tensor" and not isinstance(v, DistSpec):
                raise ShardingRuleError(f"{self.op}: tensor {p.name!r} must be a DistSpec, got {type(v).__name__}; "
                                        f"build it with DistSpec(shape, mesh_shape, placements)")
            targs.append(v)
        avals = []
        for p in self.params:
            if p.kind != "attr":
                continue
            if p.name in attrs:
                avals.append(p.check(self.op, attrs.pop(p.name), self.doc_notation))
            elif p.default is not inspect.Parameter.empty:
                avals.append(p.default if not isinstance(p.default, list) else tuple(p.default))
            else:
                raise ShardingRuleError(f"{self.op} (rule {self.doc_notation!r}): attribute {p.name!r} is "
                                        f"required; pass it in attrs")
        if attrs:
            names = [p.name for p in self.params if p.kind == "attr"]
            close = difflib.get_close_matches(next(iter(attrs)), names)
            known = (f" The attributes of {self.op} are {names}" if names
                     else f" {self.op} takes no attributes; drop them")
            raise ShardingRuleError(f"{self.op}: unknown attribute(s) {sorted(attrs)}"
                                    + (f"; did you mean {close[0]!r}?" if close else ";") + known)
        return tuple(targs), tuple(avals)

    def plan(self, targs: tuple, avals: tuple):
        return self.fn(*targs, *avals)

    # -- pure API ------------------------------------------------------------------------------
    def infer(self, specs: Sequence, attrs: Mapping | None = None) -> RuleResult:
        """Forward inference on :class:`DistSpec` values (cached on specs + attributes).

        Two caches, both keyed on frozen values only: a front dict on the arguments exactly as
        given (attribute types included, so a wrongly typed value never hits an entry made by
        a valid one), and the bound cache on the normalised tensor and attribute values.
        """
        key = ikey = None
        try:
            items = tuple([(k, v.__class__, tuple(v) if v.__class__ is list else v)
                           for k, v in attrs.items()]) if attrs else ()
            # identity first: a frozen spec object seen before (we hold it, so its id is not reused)
            ikey = (tuple(map(id, specs)), items)
            hit = self._by_id.get(ikey)
            if hit is not None and all(map(operator.is_, hit[0], specs)):
                return hit[1]
            key = (tuple(specs), items)
            res = self._front.get(key)
            if res is not None:
                if len(self._by_id) < 8192:
                    self._by_id[ikey] = (tuple(specs), res)
                return res
        except TypeError:  # unhashable argument (a tensor list, nested lists): bind first
            key = ikey = None
        targs, avals = self.bind(specs, attrs)
        try:
            res = self._cached(targs, avals)
        except TypeError:
            if is_hashable((targs, avals)):
                raise
            res = self._infer_uncached(targs, avals)   # an attribute such as a nested list: no cache
        if key is not None and len(self._front) < 8192:
            self._front[key] = res
            self._by_id[ikey] = (tuple(specs), res)
        return res

    def _flat(self, targs) -> list[DistSpec]:
        flat = []
        for v in targs:
            if isinstance(v, tuple):
                flat.extend(v)
            elif v is not None:
                flat.append(v)
        return flat

    def _infer_uncached(self, targs: tuple, avals: tuple) -> RuleResult:
        plan = self.plan(targs, avals)
        flat = self._flat(targs)
        if isinstance(plan, RuleResult):
            self._check_result(plan, len(flat))
            return plan
        if isinstance(plan, (str, Notation)):
            return infer_einsum(plan, flat, self.op)
        if isinstance(plan, View):
            return infer_dimtrans(flat[plan.index], plan.dim_map, self.op, plan.out_shape)
        if isinstance(plan, (Rows, list)):
            rows = plan.rows if isinstance(plan, Rows) else plan
            shapes = plan.out_shapes if isinstance(plan, Rows) else None
            return infer_onedim(rows, flat, self.op, shapes)
        raise ShardingRuleError(f"rule {self.op!r} returned {type(plan).__name__}; return a notation string, "
                                f"View, Rows or RuleResult")

    def _check_result(self, res: RuleResult, n_inputs: int) -> None:
        if len(res.inputs) != n_inputs:
            raise ShardingRuleError(f"rule {self.op!r} returned {len(res.inputs)} input specs for {n_inputs} "
                                    f"tensor inputs; return one required spec per input tensor")

    def infer_reverse(self, specs: Sequence, out_specs: Sequence[DistSpec],
                      attrs: Mapping | None = None) -> RuleResult:
        """Backward (reverse) inference, as Paddle's ``infer_backward``: the input layouts the
        requested output layouts ask for, and the outputs the op *will produce* from them.

        The requested outputs are a wish: a sharded softmax axis, or layer_norm's out/mean/var
        sharding different batch dims, cannot all be produced. The answer runs forward inference
        on the inputs the outputs ask for, so inputs and outputs are consistent (no reshard left).
        """
        targs, avals = self.bind(specs, attrs)
        plan = self.plan(targs, avals)
        flat = self._flat(targs)
        if isinstance(plan, (str, Notation)):
            rev = infer_einsum_reverse(plan, flat, out_specs, self.op)
        elif isinstance(plan, View):
            if len(out_specs) != 1:
                raise ShardingRuleError(f"{self.op}: the op has 1 output but {len(out_specs)} output specs "
                                        f"were given; pass one")
            one = infer_dimtrans_reverse(flat[plan.index], out_specs[0], plan.dim_map, self.op)
            rev = RuleResult(self.op, tuple(flat[:plan.index]) + one.inputs + tuple(flat[plan.index + 1:]), ())
        elif isinstance(plan, (Rows, list)):
            rows = plan.rows if isinstance(plan, Rows) else plan
            rev = infer_onedim_reverse(rows, flat, out_specs, self.op)
        else:
            raise ShardingRuleError(f"rule {self.op!r} is hand-written (returns RuleResult); it has no reverse "
                                    f"inference -- write it as a notation, View or Rows")
        asked = iter(rev.inputs)
        structured = [v if v is None else (tuple(next(asked) for _ in v) if isinstance(v, tuple) else next(asked))
                      for v in targs]
        fwd = self._cached(tuple(structured), avals)
        return make_result(self.op, flat, fwd.inputs, fwd.outputs, fwd.rule)

    def infer_grad(self, specs: Sequence, out_grads: Sequence[DistSpec],
                   attrs: Mapping | None = None) -> RuleResult:
        """Gradient inference from the same notation (einsum plans only)."""
        targs, avals = self.bind(specs, attrs)
        plan = self.plan(targs, avals)
        if not isinstance(plan, (str, Notation)):
            raise ShardingRuleError(f"rule {self.op!r}: gradient inference needs a notation plan")
        return infer_einsum_grad(plan, self._flat(targs), out_grads, self.op)

    def notation(self, specs: Sequence, attrs: Mapping | None = None) -> str:
        """The notation (or dim map text) the rule uses for these specs."""
        targs, avals = self.bind(specs, attrs)
        plan = self.plan(targs, avals)
        if isinstance(plan, (str, Notation)):
            return str(parse_notation(plan) if isinstance(plan, str) else plan)
        return self._infer_uncached(targs, avals).rule

    def cache_clear(self) -> None:
        self._cached.cache_clear()
        self._front.clear()
        self._by_id.clear()

    # -- Paddle's calling convention -------------------------------------------------------------
    def infer_forward(self, *args):
        return paddle_rules().forward(self, args)

    def infer_backward(self, *args):
        return paddle_rules().backward(self, args)


class Registry:
    """Plain dict of op name -> :class:`SpmdRule`, with Paddle's C++ rules as the fallback."""

    paddle: PaddleRules | None = None   # Paddle's C++ rules, shared by every registry once connected

    def __init__(self):
        self.rules: dict[str, SpmdRule] = {}
        # told the op whose rule changed (None: all): dispatch's plan cache forgets its plans
        self.listeners: list[Callable[[str | None], object]] = []

    def _changed(self, op: str | None) -> None:
        for listener in self.listeners:
            listener(op)

    def register(self, op: str, override: bool = False, case: OpCase | None = None):
        if not isinstance(op, str) or not op:
            raise ShardingRuleError(f"register_spmd_rule needs an op name string, got {op!r}")
        if case is not None and (not isinstance(case, OpCase) or case.op != op):
            raise ShardingRuleError(f"register_spmd_rule({op!r}, case=...) needs the OpCase of {op!r}, got {case!r}")

        def deco(fn):
            if op in self.rules and not override:
                raise ShardingRuleError(
                    f"an SPMD rule for {op!r} is already registered ({self.rules[op].fn.__module__}."
                    f"{self.rules[op].fn.__qualname__}); pass override=True to replace it")
            self.rules[op] = SpmdRule(op, fn, case)
            if case is not None:
                add_case(case, replace=override)
            self._changed(op)
            return fn
        return deco

    def get(self, op: str, source: str = "auto"):
        """paddle-ext's rule for ``op``; else Paddle's C++ rule (``source="auto"``)."""
        if not isinstance(op, str):
            raise ShardingRuleError(f"an SPMD rule is looked up by its op name string (e.g. 'matmul'), "
                                    f"got {type(op).__name__} {op!r}")
        if source not in _SOURCES:
            raise ShardingRuleError(f"unknown source {source!r} for the SPMD rule {op!r}; use one of "
                                    f"{', '.join(_SOURCES)} ('auto': paddle-ext's rule, else Paddle's C++ rule)")
        if source in ("auto", "ext") and op in self.rules:
            return self.rules[op]
        if source in ("auto", "paddle") and self.paddle is not None and self.paddle.has_rule(op):
            return self.paddle.rule(op)
        names = list(self.rules)
        close = difflib.get_close_matches(op, names, n=5, cutoff=0.6)
        hint = f"; close names: {', '.join(close)}" if close else ""
        where = {"ext": "paddle-ext", "paddle": "Paddle's C++ registry"}.get(source, "paddle-ext or Paddle")
        raise ShardingRuleError(f"no SPMD rule named {op!r} in {where}{hint}; register one with "
                                f"@register_spmd_rule({op!r})")

    def reset(self, rules: Mapping[str, SpmdRule] | None = None) -> dict[str, SpmdRule]:
        """Replace the contents (tests); returns the previous dict."""
        old = dict(self.rules)
        self.rules.clear()
        self.rules.update(rules or {})
        self._changed(None)
        return old


_SOURCES = ("auto", "ext", "paddle")

REGISTRY = Registry()


def register_spmd_rule(op: str, override: bool = False, case: OpCase | None = None):
    """Decorator registering a rule function into paddle-ext's registry; ``case`` (an
    :class:`~.opcases.OpCase`) is the op's ground truth, which the validator then checks it against."""
    return REGISTRY.register(op, override, case)


def is_hashable(value) -> bool:
    """True when ``value`` can key a dict (the rule and dispatch caches)."""
    try:
        hash(value)
    except TypeError:
        return False
    return True


__all__ = ["Param", "PaddleRules", "REGISTRY", "Registry", "Rows", "SpmdRule", "View",
           "connect_paddle_rules", "paddle_rules", "register_spmd_rule"]
