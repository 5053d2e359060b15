"""``@spmd_op("name")``: make a function written for local tensors DistTensor-aware.

The function's parameters are matched to the rule's by name: the rule's tensor parameters
(``DistSpec``, ``list[DistSpec]``, ``DistSpec | None``) are the tensors, its attribute
parameters are read from the call (or the rule's defaults). Dense calls go straight to the
function. A shard-aware function may take a keyword ``spmd_ctx`` (a
:class:`~paddle_ext.dispatch.core.LocalCtx`: this rank's block offsets and coordinate);
it is ``None`` on dense calls.

>>> import paddle
>>> import paddle_ext.dispatch as pd
>>> @pd.spmd_op("my_scale")
... def my_scale(x, factor=2.0):
...     return x * factor
>>> my_scale(paddle.to_tensor([1.0, 2.0])).tolist()   # a dense call runs the function itself
[2.0, 4.0]
"""
from __future__ import annotations

import functools
import inspect
from typing import Callable

from ..compat.ports.dispatch import ignore_in_dy2static
from ..errors import ShardingRuleError
from ..spmd.registry import REGISTRY
from .core import DispatchError, dispatch, get_rule, has_dist
from .entry import make_entry


class SpmdOp:
    """A dispatched op: ``__call__`` runs dense calls directly and DistTensor calls by rule."""

    def __init__(self, op: str, fn: Callable, rule: str | None = None):
        self.op = op
        self.rule_name = rule or op
        self.fn = fn
        self.sig = inspect.signature(fn)
        self.wants_ctx = "spmd_ctx" in self.sig.parameters
        self._rule_entry = None   # (rule, the entry generated for it) while that rule is registered
        functools.update_wrapper(self, fn)

    def __repr__(self) -> str:
        return f"SpmdOp({self.op!r}, rule={self.rule_name!r})"

    def _bind(self, args, kwargs):
        try:
            bound = self.sig.bind(*args, **kwargs)
        except TypeError as exc:
            raise DispatchError(f"{self.op}: {exc}") from None
        bound.apply_defaults()
        return bound

    def __call__(self, *args, **kwargs):
        entry = self._entry()
        if entry is None:
            return self._call_bound(args, kwargs)
        try:
            return entry(*args, **kwargs)
        except TypeError as exc:
            if exc.__traceback__ is not None and exc.__traceback__.tb_next is None:
                # raised by the call itself, before the entry ran: it does not fit the signature
                return self._call_bound(args, kwargs)   # Signature.bind names the problem
            raise

    def _entry(self):
        """The generated entry for the registered rule (:mod:`.entry`), or None: no rule, a rule
        tensor the function does not take, a signature that is not plain (the general path then
        raises or serves). Made once per registered rule object (a rule registered again gets a
        new one)."""
        rule = REGISTRY.rules.get(self.rule_name)
        cached = self._rule_entry
        if cached is not None and rule is not None and cached[0] is rule:
            return cached[1]
        try:
            rule = get_rule(self.rule_name)
        except DispatchError:
            return None
        tensor_names = [p.name for p in rule.params if p.kind != "attr"]
        attr_names = [p.name for p in rule.params if p.kind == "attr" and p.name in self.sig.parameters]
        entry = make_entry(self.fn, self.sig, self.rule_name, tensor_names, attr_names, dispatch, has_dist)
        self._rule_entry = (rule, entry)
        return entry

    def _call_bound(self, args, kwargs):
        """The general call: ``inspect.Signature.bind`` and its errors, the rule looked up."""
        bound = self._bind(args, kwargs)
        rule = None
        tensor_names = []
        try:
            rule = get_rule(self.rule_name)
        except DispatchError:
            rule = None
        if rule is not None:
            tensor_names = [p.name for p in rule.params if p.kind != "attr"]
        slots = [bound.arguments.get(n) for n in tensor_names]
        if rule is None:
            candidates = [v for v in bound.arguments.values()]
            if not has_dist(candidates):
                return self._dense(bound)
            get_rule(self.rule_name)  # raises the clear error
        if not has_dist(slots):
            return self._dense(bound)
        missing = [n for n in tensor_names if n not in self.sig.parameters]
        if missing and not all(p.kind == "optional" for p in rule.params if p.name in missing):
            raise DispatchError(f"{self.op}: the rule {self.rule_name!r} has tensor parameters {missing} that the "
                                f"function {self.fn.__qualname__} does not take; name the function's parameters "
                                f"like the rule's ({', '.join(p.name for p in rule.params)})")
        attrs = {p.name: _attr(bound.arguments[p.name]) for p in rule.params
                 if p.kind == "attr" and p.name in bound.arguments}

        def run_local(local_slots, ctx):
            b = self.sig.bind_partial()
            b.arguments.update(bound.arguments)
            for n, v in zip(tensor_names, local_slots):
                if n in b.arguments:
                    b.arguments[n] = v
            if self.wants_ctx:
                b.arguments["spmd_ctx"] = ctx
            return self.fn(*b.args, **b.kwargs)

        return dispatch(self.rule_name, slots, attrs, run_local)

    def _dense(self, bound):
        if self.wants_ctx and "spmd_ctx" not in bound.arguments:
            bound.arguments["spmd_ctx"] = None
        return self.fn(*bound.args, **bound.kwargs)


def _attr(v):
    return tuple(v) if isinstance(v, list) else v


def _as_function(sop: SpmdOp) -> Callable:
    """A plain function around ``sop``: dy2static skips paddle_ext's functions (an object with
    ``__call__`` would be transcribed instead), so the dispatcher runs as Python in to_static."""
    def op(*args, **kwargs):
        return sop(*args, **kwargs)

    functools.update_wrapper(op, sop.fn)
    op.spmd = sop
    try:
        ignore_in_dy2static()
    except Exception:  # no Paddle yet: enable()/dispatch register it later
        pass
    return op


def spmd_op(op: str | Callable | None = None, *, rule: str | None = None):
    """Decorator: ``@spmd_op("op")`` (or bare ``@spmd_op``, which uses the function's name).

    ``rule`` names the registered SPMD rule when it differs from ``op``. The result is a plain
    function; its ``.spmd`` attribute is the :class:`SpmdOp`.
    """
    if callable(op):
        return _as_function(SpmdOp(op.__name__, op, rule))
    if op is not None and not isinstance(op, str):
        raise ShardingRuleError(f"spmd_op takes an op name string, got {op!r}")

    def deco(fn):
        return _as_function(SpmdOp(op or fn.__name__, fn, rule))
    return deco


__all__ = ["SpmdOp", "spmd_op"]
