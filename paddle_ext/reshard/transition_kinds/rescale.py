"""P(sum) <-> P(avg) on one mesh dim of size ``n``: every rank scales its part locally.

A ``P(avg)`` value is the mean of the ranks' parts, a ``P(sum)`` value their sum, so sum -> avg
multiplies each part by ``n`` and avg -> sum divides it by ``n``.
Exact only when ``n`` is a power of two (a scale by ``n`` and back is then exact in floating
point), so on other sizes the planner goes through Replicate. No rank receives anything. On an
integer tensor the step is dropped when another mesh dim is ``P(max|min)``: scaling that
reduction's neutral element by ``n`` would wrap around.

>>> from paddle_ext.placements import Partial
>>> from paddle_ext.reshard.transitions import for_move
>>> for_move(Partial("sum"), Partial("avg")).name, RESCALE.communicates
('rescale', False)
>>> legal((Partial("sum"),), (Partial("avg"),), 0, 4), legal((Partial("sum"),), (Partial("avg"),), 0, 3)
(True, False)
"""
from __future__ import annotations

from ..backend import ReshardBackend
from ..layout import coord_in, is_pow2
from ..transitions import Transition, no_elements, other_partial_ops, reducible, register_transition


def legal(pl, new, m, n) -> bool:
    """Mesh dim ``m`` goes between sum and avg, may be reduced first, and ``n`` is a power of two."""
    return reducible(pl, m) and {pl[m].op, new[m].op} == {"sum", "avg"} and is_pow2(n)


def wraps_integers(new, m, p, q) -> bool:
    """Scaling a P(max|min) neutral element on another mesh dim by ``n`` wraps integers."""
    return bool(other_partial_ops(new, m) & {"max", "min"})


def run_rescale(be: ReshardBackend, geo, step, local):
    """This rank's part times ``n`` (sum -> avg) or divided by ``n`` (avg -> sum); None off the mesh."""
    if coord_in(geo.ranks(step.mesh), geo.mesh(step.mesh), be.rank) is None:
        return None
    m = step.mesh_dim
    n = geo.mesh(step.mesh)[m]
    return be.scale(local, n) if step.dst[m].op == "avg" else be.divide(local, n)


RESCALE = register_transition(Transition("rescale", (("P", "P"),), legal, no_elements, run_rescale,
                                         communicates=False, wraps_integers=wraps_integers))

__all__ = ["RESCALE", "legal", "run_rescale", "wraps_integers"]
