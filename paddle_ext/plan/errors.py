"""The named errors of ``paddle-ext plan``: each is raised before any search or launch.

All derive from :class:`paddle_ext.errors.PaddleExtError` (a ``ValueError``) through
:class:`PlanSearchError`, and every message says what was wrong and how to fix it.
"""
from __future__ import annotations

from ..errors import PaddleExtError


class PlanSearchError(PaddleExtError):
    """Base of the plan search's errors."""


class UnknownModelError(PlanSearchError):
    """``--model`` names no model the planner can describe."""


class ProfileError(PlanSearchError):
    """A cost profile is unreadable, or lacks an op or a collective a candidate plan needs."""


class MeshFactorError(PlanSearchError):
    """No factorisation of the rank count into pp x dp x tp fits the model."""


class MemoryUnitError(PlanSearchError):
    """A memory amount such as ``--memory-limit`` is not a number with a known unit."""


class NoFeasiblePlanError(PlanSearchError):
    """Every candidate plan needs more memory per rank than the limit."""


__all__ = ["PlanSearchError", "UnknownModelError", "ProfileError", "MeshFactorError", "MemoryUnitError",
           "NoFeasiblePlanError"]
