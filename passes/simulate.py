"""Simulate a pipeline schedule: timing, bubbles, activation memory, deadlocks.

Model (all pure Python, no devices):

* Every rank runs its actions in list order, each as soon as the rank is free and its inputs are
  there (``None`` slots are ignored). Compute costs come from :class:`Costs` (defaults ``F = I = W
  = 1`` and full ``B = I + W = 2``), the same for every stage unless ``stage_costs`` gives some
  stages their own (measured stages differ: the first has no input gradient to compute, the last
  runs the loss).
* A compute-only schedule: an input made on another rank arrives ``comm_latency`` after the
  producing action ends.
* A lowered schedule (with ``SEND_*``/``RECV_*``): inputs from other ranks only come through the
  rank's own ``RECV``. With ``blocking_sends=True`` (default, like gloo) a send and its receive
  are a rendezvous: both wait until the other is posted; the sender is released at the meeting
  time, the receiver ``comm_latency`` later. With ``blocking_sends=False`` a send never waits.
* Three runtime models for a receive (``recv``): ``"blocking"`` (default, and what torch's step
  simulator does) runs it where it sits, the rank waiting until the data is there; ``"early"``
  posts it where it sits without waiting (as torch's runtime posts an ``irecv``) and the compute
  that needs the data waits for it. With blocking sends an early-posted receive still meets its
  send: the sender is released when both are posted, the data lands ``comm_latency`` later.
  ``"rendezvous"`` is a blocking receive over a transport whose data leaves the sender only once
  the receive is posted (gloo's TCP pairs: a send that finds no posted receive only announces
  itself, and the data follows the receiver's ready note): with ``blocking_sends=False`` the
  sender still never waits, but the data lands ``comm_latency`` after the *later* of the send and
  the receive, so a receive posted long after its send still pays the latency. (With blocking
  sends every receive already meets its send that way.)
* Overlapped F&B pairs (an ``OVERLAP_F_B`` mark before two actions, as in DualPipe; see
  :mod:`~paddle_ext.passes.schedule_ir`) with ``overlap="max"`` (default) or ``"sum"`` start
  together once both inputs are there and both end one slot later, the slot lasting ``max(F, B)``
  or ``F + B``; ``"off"`` runs them one after the other. ``busy`` counts the slot, so ``idle``
  is DualPipe's bubble. No-ops (``UNSHARD``, ``RESHARD``, ``REDUCE_GRAD``) take no time.
* Activation memory: an ``F`` adds one activation of its stage on its rank; it stays live until
  the ``W`` (split backward) or the ``B`` (full backward) of that stage and microbatch frees it.
  ``I`` frees nothing in this model (it is conservative: the input-gradient part is not credited).

Figures in :class:`SimulationResult` (``ideal`` = the busiest rank's compute time):

* ``bubble_ratio`` = idle fraction = ``1 - sum(busy) / (n_ranks * makespan)``;
* ``bubble_vs_ideal`` = ``(makespan - ideal) / ideal``: the published "(p-1)/m" bubble of a
  flushed iteration (1F1B: ``(p-1)/m``; interleaved: ``(p-1)/(v m)``; ZB-H1: ``(p-1)/(3m)``);
* ``steady_bubble_vs_ideal`` = ``(max span - ideal) / ideal`` where a rank's span runs from its
  first to its last compute: the bubble when consecutive iterations overlap, as in the
  zero-bubble paper (ZB-H2 and ZB-V reach 0 there).

A deadlock raises :class:`~paddle_ext.errors.ScheduleError` with the rank-by-step grid around
the stuck actions, each marked ``<-- here`` with what it waits for.

>>> from paddle_ext.passes.schedule_ir import parse_schedule
>>> r = simulate_schedule(parse_schedule("rank 0: 0F0 0F1 0B0 0B1\\nrank 1: 1F0 1B0 1F1 1B1"))
>>> r.makespan, r.busy, round(r.bubble_vs_ideal, 3), r.peak_activations
(9.0, (6.0, 6.0), 0.5, (2, 1))
>>> simulate_schedule(parse_schedule("rank 0: 0F0 0B0 0F1 0B1\\nrank 1: 1F1 1B1 1F0 1B0"))
Traceback (most recent call last):
...
paddle_ext.errors.ScheduleError: deadlock: no rank can make progress (2 stuck); reorder the actions marked '<-- here' so that what each waits for comes first
step    0     1     2   3
rank 0  0F0   >0B0< 0F1 0B1   <-- here: 0B0 needs 1B0 or 1I0 (rank 1), which has not run
rank 1  >1F1< 1B1   1F0 1B0   <-- here: 1F1 needs 0F1 (rank 0), which has not run
"""
from __future__ import annotations

from typing import Mapping, Optional, Sequence, Union

from paddle_ext.errors import ScheduleError
from .schedule_ir import Action
from .sim_engine import Simulation
from .sim_model import (OVERLAP_MODELS, RECV_MODELS, Costs, SimulationResult, check_latency,
                        coerce_costs)
from .structure import ScheduleShape, check_structure

__all__ = ["Costs", "SimulationResult", "simulate_schedule", "RECV_MODELS", "OVERLAP_MODELS"]

# the old private names, used by the lowering
_coerce_costs, _check_latency = coerce_costs, check_latency

def simulate_schedule(schedule: Mapping[int, Sequence[Optional[Action]]], costs: Union[Costs, Mapping, None] = None,
                      comm_latency: float = 0.0, activation_bytes: Union[float, Mapping[int, float]] = 1.0, *,
                      blocking_sends: bool = True, n_stages: Optional[int] = None,
                      n_microbatches: Optional[int] = None,
                      stage_costs: Optional[Mapping[int, Union[Costs, Mapping]]] = None,
                      recv: str = "blocking", overlap: str = "max",
                      extra: Optional[Mapping[int, Sequence[float]]] = None) -> SimulationResult:
    """Simulate ``schedule`` (compute-only or lowered) and return its :class:`SimulationResult`.

    ``recv`` (``"blocking"``, ``"early"`` or ``"rendezvous"``) and ``overlap`` (``"max"``, ``"sum"`` or ``"off"``)
    choose the runtime model (module docstring); ``recv`` only matters for a lowered schedule.

    ``costs`` is a :class:`Costs` or a dict like ``{"F": 1, "I": 1, "W": 1, "B": 2}``;
    ``stage_costs`` optionally maps stage index -> costs of that stage (the others use ``costs``);
    ``activation_bytes`` is the size of one activation, for all stages or per stage.
    ``extra`` optionally maps a rank to the time each of its actions (idle slots not counted)
    spends before it starts, whatever it waits for: a runtime's fixed cost per job, or a
    message's cost on a send (:func:`paddle_ext.passes.static.job_model.simulate_static`
    fills it for the static Engine).
    The schedule is validated first (:func:`~paddle_ext.passes.validate.check_structure`).

    >>> from paddle_ext.passes.schedule_ir import parse_schedule
    >>> two = parse_schedule("rank 0: 0F0 0B0\\nrank 1: 1F0 1B0")
    >>> simulate_schedule(two, {"F": 1, "I": 1, "W": 1}, stage_costs={1: {"F": 2, "I": 1, "W": 1}}).makespan
    7.0
    """
    shape = check_structure(schedule, n_stages, n_microbatches)
    per_stage = None
    if stage_costs is not None:
        if not isinstance(stage_costs, Mapping):
            raise ScheduleError(f"stage_costs must map stage index -> costs, got {type(stage_costs).__name__}")
        bad = [s for s in stage_costs if not isinstance(s, int) or not 0 <= s < shape.n_stages]
        if bad:
            raise ScheduleError(f"stage_costs has stages {bad} that the schedule does not have "
                                f"(stages 0..{shape.n_stages - 1})")
        per_stage = {s: coerce_costs(c) for s, c in stage_costs.items()}
    return run_simulation(schedule, shape, coerce_costs(costs), comm_latency, activation_bytes, blocking_sends,
                          per_stage, recv=recv, overlap=overlap, extra=extra)


def run_simulation(schedule, shape: ScheduleShape, costs: Costs, comm_latency: float = 0.0,
                   activation_bytes: Union[float, Mapping[int, float]] = 1.0,
                   blocking_sends: bool = True, stage_costs: Optional[Mapping[int, Costs]] = None, *,
                   recv: str = "blocking", overlap: str = "max",
                   extra: Optional[Mapping[int, Sequence[float]]] = None) -> SimulationResult:
    """The simulator proper, for a schedule already checked by ``check_structure``.

    Ranks are advanced one at a time, each as far as its inputs allow; a rank that must wait is
    parked on what it waits for and woken when that happens, so every action is handled about
    once. An input is indexed ``stage * n_microbatches + microbatch``.
    """
    if recv not in RECV_MODELS:
        raise ScheduleError(f"recv={recv!r}: the receive model is one of {', '.join(RECV_MODELS)}")
    if overlap not in OVERLAP_MODELS:
        raise ScheduleError(f"overlap={overlap!r}: overlapped F&B pairs are timed as one of "
                            f"{', '.join(OVERLAP_MODELS)}")
    sim = Simulation(schedule, shape, costs, comm_latency, activation_bytes, blocking_sends, stage_costs,
                     recv=recv, overlap=overlap, extra=extra)
    return sim.run().result()

