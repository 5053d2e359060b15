"""The named errors of planning a user's own model (``paddle-ext plan --model pkg.module:factory``).

Each says which part of the factory protocol (:mod:`.user_model`) failed and what would work.
All derive from :class:`~.errors.PlanSearchError` (a ``ValueError``), so the CLI reports them as
bad input (exit 2) before any search or launch.
"""
from __future__ import annotations

from .errors import PlanSearchError


class FactoryError(PlanSearchError):
    """Base: the factory named by ``pkg.module:factory`` does not follow the protocol."""


class FactoryImportError(FactoryError):
    """``pkg.module:factory`` is not of that form, its module cannot be imported, or it has no
    callable of that name."""


class FactoryReturnError(FactoryError):
    """The factory returned something other than ``(paddle.nn.Layer, batch, loss)``."""


class TraceError(FactoryError):
    """One dense step of the model (forward, loss, backward, or its trace by ``paddle.jit.to_static``)
    fails."""


class EmitError(PlanSearchError):
    """A plan cannot be written as, or built from, a ``dist.parallelize`` configuration."""


__all__ = ["FactoryError", "FactoryImportError", "FactoryReturnError", "TraceError", "EmitError"]
