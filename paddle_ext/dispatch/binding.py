"""Binding a call to a function's parameters without ``inspect.Signature.bind``.

``Signature.bind`` and ``BoundArguments.args`` cost tens of microseconds a call next to a small
Paddle op; a dispatched function (``@spmd_op``) or a patched Paddle function (``enable()``) binds
every call. :class:`Binder` reads a plain signature once and binds a call with a dict; anything
it cannot bind plainly gets None, and the caller runs ``Signature.bind``, which names the problem.

>>> import inspect
>>> b = Binder.of(inspect.signature(lambda x, axis=-1, *, name=None: None))
>>> b.bind((1,), {"name": "n"})
{'x': 1, 'name': 'n', 'axis': -1}
>>> b.bind((1, 2, 3), {}) is None
True
"""
from __future__ import annotations

import inspect
from typing import Callable


class Binder:
    """A function's parameters, read once, to bind a call without ``inspect.Signature.bind``
    (which costs tens of microseconds a call). Only for functions whose parameters are all
    positional-or-keyword or keyword-only; any call it cannot bind plainly (too many positionals,
    an unknown or repeated name, a missing argument) gets None, and ``Signature.bind`` then runs
    and names the problem."""

    def __init__(self, sig: inspect.Signature):
        params = list(sig.parameters.values())
        self.positional = tuple(p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD)
        self.keyword = tuple(p.name for p in params if p.kind is p.KEYWORD_ONLY)
        self.names = frozenset(self.positional + self.keyword)
        self.defaults = tuple((p.name, p.default) for p in params if p.default is not p.empty)

    @staticmethod
    def of(sig: inspect.Signature) -> "Binder | None":
        plain = all(p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) for p in sig.parameters.values())
        return Binder(sig) if plain else None

    def bind(self, args: tuple, kwargs: dict) -> dict | None:
        """Every parameter's value (defaults applied), or None."""
        if len(args) > len(self.positional):
            return None
        values = dict(zip(self.positional, args))
        for name, value in kwargs.items():   # (empty in most calls)
            if name in values or name not in self.names:
                return None
            values[name] = value
        for name, default in self.defaults:
            if name not in values:
                values[name] = default
        return values if len(values) == len(self.names) else None

    def call(self, fn: Callable, values: dict):
        """``fn`` with ``values`` (every parameter's), positionals by position (no comprehension:
        each makes a frame of its own on this Python)."""
        args = map(values.__getitem__, self.positional)
        if not self.keyword:
            return fn(*args)
        return fn(*args, **{n: values[n] for n in self.keyword})


__all__ = ["Binder"]
