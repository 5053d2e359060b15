"""Run a reshard plan on one rank, over any array-and-communication backend.

The same per-rank code serves the simulated executor (numpy arrays, ranks as threads, gloo-like
blocking sends) and the dygraph executor (Paddle tensors, gloo point-to-point and collectives),
so the property tests on simulated ranks exercise the code that runs on real ranks.

The backend is a :class:`~.backend.ReshardBackend` (numpy on simulated ranks,
:class:`~.paddle_backend.PaddleBackend` on real ones). Each step runs through the executor its transition names (:data:`.transitions.TRANSITIONS`,
keyed by the step's ``collective``; the executors are in :mod:`.step_executors`). Point-to-point
traffic goes through :func:`.exchange.exchange`, which pairs ranks round by round
(``layout.exchange_rounds``) so blocking sends never deadlock, and sends one buffer per pair.

A backend with ``in_place`` (:class:`~.backend.InPlaceBackend`: the Paddle one) also hands out
views of an output and receives into them: the executors then allocate the output once and
receive each piece into its place, instead of concatenating.
"""
from __future__ import annotations

from typing import Sequence

from ..errors import ReshardPlanError
from .backend import ReshardBackend
from .layout import Geometry
from .odd_exchange import Quiet
from .planner import ReshardStep
from .transitions import TRANSITIONS


def execute(be: ReshardBackend, geo: Geometry, plan: Sequence[ReshardStep], local):
    """Run ``plan`` on this rank; ``local`` is None on a rank outside the source mesh.

    A step whose plan bytes are 0 runs with no communication at all (every rank knows the plan,
    so all skip alike and gloo's message numbering stays aligned)."""
    for step in plan:
        transition = TRANSITIONS.get(step.collective)
        if transition is None:
            raise ReshardPlanError(
                f"no executor for step kind {step.collective!r} ({step}); known kinds: "
                f"{', '.join(TRANSITIONS)}")
        quiet = not step.bytes and transition.communicates
        local = transition.executor(Quiet(be) if quiet else be, geo, step, local)
    return local


__all__ = ["execute"]
