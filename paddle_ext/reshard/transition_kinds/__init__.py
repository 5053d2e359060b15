"""Reshard transitions written one per module: each module registers its :class:`~..transitions.Transition`
(legality, elements received, executor) with :func:`~..transitions.register_transition`.

Importing this package imports every module here in sorted name order (the planner and the
per-rank executor import it), so a new transition is one module in this package and its test;
nothing else names it. The registry, :mod:`..transitions`, imports none of them.
"""
from __future__ import annotations

import importlib
import pkgutil


def _load() -> None:
    """Import every module of this package (sorted by name): each registers itself."""
    for module in sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")):
        importlib.import_module(f"{__name__}.{module}")


_load()
