"""Run a reshard plan on one rank, over any array-and-communication backend.

The same per-rank code serves the simulated executor (numpy arrays, ranks as threads, gloo-like
blocking sends) and the dygraph executor (Paddle tensors, gloo point-to-point and collectives),
so the property tests on simulated ranks exercise the code that runs on real ranks.

Each step runs through the executor its transition names (:data:`.transitions.TRANSITIONS`,
keyed by the step's ``collective``; the executors are in :mod:`.step_executors`). Point-to-point
traffic goes through :func:`.exchange.exchange`, which pairs ranks round by round
(``layout.exchange_rounds``) so blocking sends never deadlock, and sends one buffer per pair.

A backend provides: ``rank`` and ``world`` (sorted global ranks); array ops ``empty(shape, like)``,
``full(shape, value, like)``, ``take(x, rel_box)`` (a contiguous copy), ``put(out, rel_box, x)``,
``reduce(a, b, op)``, ``scale(x, factor)``, ``divide(x, n)``, ``flat(x)``, ``reshape(x, shape)``,
``concat_flat(xs, like)``, ``split_flat(x, sizes)``, ``numel(x)``, ``dtype_kind(x)``,
``dtype_info(x)``, ``shape(x)``; communication ``send(x, peer)``, ``recv(numel, like, peer)``, and optional
``all_reduce(x, op, members)`` that returns None when it cannot serve that group; and
``count(nbytes)`` for the received-bytes counter.

Optional, for copy-free assembly (the Paddle backend has them, the simulated one does not):
``view(x, rel_box, contiguous=False)`` (a view, or None when ``contiguous`` and it is strided),
``recv_into(view, peer)`` (receive straight into an output's memory), ``reduce_into(acc, x, op)``
(in place on a buffer of ours) and ``all_gather_into(out, x, members)`` (one collective writing
rank-major slabs into ``out``; False when it cannot serve the group). With them the executors
allocate the output once and receive each piece into its place, instead of concatenating.
"""
from __future__ import annotations

from typing import Sequence

from ..errors import ReshardPlanError
from .layout import Geometry
from .odd_exchange import Quiet
from .planner import ReshardStep
from .transitions import TRANSITIONS


def execute(be, geo: Geometry, plan: Sequence[ReshardStep], local):
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
