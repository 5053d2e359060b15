"""A decorated function's entry, generated from its signature: Python binds the call itself.

For ``@spmd_op("softmax") def my_softmax(x, axis=-1)`` with a rule of tensor ``x`` and attribute
``axis``, :func:`make_entry` builds (with ``exec``, as ``dataclasses`` builds ``__init__``)::

    def entry(x, axis=<default>):
        slots = [x]
        if not has_dist(slots):
            return fn(x, axis)                      # a dense call: the function itself
        def run_local(local, ctx):
            if local is slots:                      # Paddle's op on the DistTensors as given
                return fn(x, axis)
            return fn(local[0], axis)               # the local shards (and ``spmd_ctx=ctx``)
        return dispatch(op, slots, {"axis": axis}, run_local)   # a list attribute as a tuple

so a call costs what calling a Python function costs: no ``inspect.Signature.bind``, no dict of
arguments. Only for signatures of positional-or-keyword and keyword-only parameters whose names do
not start with ``__pe_`` (the entry's own names); a call that does not fit the signature raises
Python's ``TypeError`` at the call, which the decorator turns into its named error.
"""
from __future__ import annotations

import inspect
from typing import Callable, Sequence

_PREFIX = "__pe_"


def make_entry(fn: Callable, sig: inspect.Signature, op: str, tensor_names: Sequence[str],
               attr_names: Sequence[str], dispatch: Callable, has_dist: Callable) -> Callable | None:
    """The entry of ``fn`` for the rule's ``tensor_names`` and ``attr_names`` (every one a
    parameter of ``fn``), or None when the signature is not plain (see the module docstring)."""
    params = list(sig.parameters.values())
    if any(p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) or p.name.startswith(_PREFIX) for p in params):
        return None
    if any(n not in sig.parameters for n in (*tensor_names, *attr_names)):
        return None
    names = {"__pe_fn": fn, "__pe_dispatch": dispatch, "__pe_has_dist": has_dist, "__pe_op": op}
    head, starred = [], False
    for p in params:
        if p.kind is p.KEYWORD_ONLY and not starred:
            head.append("*")
            starred = True
        if p.default is p.empty:
            head.append(p.name)
        else:
            names[f"__pe_default_{p.name}"] = p.default
            head.append(f"{p.name}=__pe_default_{p.name}")
    slot_of = {n: i for i, n in enumerate(tensor_names)}
    wants_ctx = "spmd_ctx" in sig.parameters

    def call(value_of) -> str:
        given = [value_of(p.name) if p.kind is p.POSITIONAL_OR_KEYWORD else f"{p.name}={value_of(p.name)}"
                 for p in params]
        return f"__pe_fn({', '.join(given)})"

    def local(name: str) -> str:
        if name in slot_of:
            return f"__pe_local[{slot_of[name]}]"
        return "__pe_ctx" if name == "spmd_ctx" else name

    attrs = ", ".join(f"{n!r}: (tuple({n}) if isinstance({n}, list) else {n})" for n in attr_names)
    lines = [f"def __pe_entry({', '.join(head)}):",
             f"    __pe_slots = [{', '.join(tensor_names)}]",
             "    if not __pe_has_dist(__pe_slots):",
             f"        return {call(str)}",
             "    def __pe_run(__pe_local, __pe_ctx):"]
    if not wants_ctx:
        lines += ["        if __pe_local is __pe_slots:", f"            return {call(str)}"]
    lines += [f"        return {call(local)}",
              f"    return __pe_dispatch(__pe_op, __pe_slots, {{{attrs}}}, __pe_run)"]
    exec("\n".join(lines), names)   # noqa: S102 - generated from parameter names only (identifiers)
    return names["__pe_entry"]


__all__ = ["make_entry"]
