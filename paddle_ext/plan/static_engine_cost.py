"""What a pipeline plan costs in Paddle's static Engine (``dist.to_static``), not in the dygraph
runtime (pure: no Paddle).

``paddle-ext plan --engine static`` predicts each plan as ``install(static_engine=True)`` runs it:

* **compute** as in dygraph (:mod:`.stage_cost`), less what only dygraph pays: the semi-automatic
  dispatch per op call (``dispatch.dist_op_s``: the static program is compiled once), the dygraph
  pipeline runtime's cost per action (``pipeline``) and the dygraph decoder layer's measured extra
  (``blocks``) -- :func:`static_view` drops them from the profile;
* **the pipeline** simulated as the Engine runs it
  (:func:`paddle_ext.passes.static.job_model.simulate_static`): each rank's actions as jobs
  (merged where paddle-ext's passes merge them; Paddle's own FThenB/1F1B/VPP passes as their
  jobs order their messages), each job paying the executor's fixed ``job_s``, each send
  ``message_s``, and every message arriving ``latency_s`` plus its bytes at the p2p line's rate
  after its send (receives posted ahead, ``recv`` ``"ahead"``) or after the later of its send and
  its receive (``"rendezvous"``, gloo's hand-off when a receive is posted by its op). They come
  from the profile's ``static_engine`` section, measured by ``paddle-ext profile --static``
  (:mod:`.profile_static`).

A plan's ``schedule`` is the ``strategy.pipeline.schedule_mode`` that runs it: Paddle's own pass
for FThenB, 1F1B and VPP, paddle-ext's pass for every other schedule.

>>> from .profile_data import Profile
>>> p = Profile.from_json({"source": "t", "static_engine": {"job_s": 1e-4, "message_s": 2e-5, "latency_s": 3e-4}})
>>> static_runtime(p)
StaticRuntime(job_s=0.0001, message_s=2e-05, latency_s=0.0003, recv='rendezvous', receive_s=0.0)
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Mapping, Tuple

from ..errors import PaddleExtError
from ..passes.sim_model import Costs
from ..passes.static.job_model import PADDLE_PASSES, RECV_MODELS, StaticCosts, simulate_static
from .errors import ProfileError
from .profile_data import Profile

ENGINES = ("dygraph", "static")
STATIC_HINT = ("measure it with `paddle-ext profile --static --model <model> --nproc <N> --out FILE.json` "
               "(a 2-rank launch of the static Engine), or add static_engine = {job_s, message_s, latency_s}")
#: sections of a profile that only the dygraph runtime pays for
DYGRAPH_ONLY = ("pipeline", "blocks")


@dataclass(frozen=True)
class StaticRuntime:
    """The static Engine's runtime per job, per message and per hand-off, in seconds, and how it
    posts receives (``recv``: ``"ahead"`` or ``"rendezvous"``, as measured; a profile without it
    was measured before receives were posted ahead), with a landed receive's own cost
    (``receive_s``, posted ahead only)."""

    job_s: float
    message_s: float
    latency_s: float
    recv: str = "rendezvous"
    receive_s: float = 0.0


def static_runtime(profile: Profile) -> StaticRuntime:
    """The profile's ``static_engine`` section, or :class:`~.errors.ProfileError` saying how to
    measure it."""
    entry = profile.data.get("static_engine")
    if not isinstance(entry, Mapping):
        raise ProfileError(f"profile {profile.path} has no static_engine section (the static Engine's cost per "
                           f"job, per message and per hand-off) for --engine static; {STATIC_HINT}")
    values = []
    for key in ("job_s", "message_s", "latency_s"):
        value = entry.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ProfileError(f"profile {profile.path}: static_engine.{key} = {value!r} must be seconds >= 0; "
                               f"{STATIC_HINT}")
        values.append(float(value))
    recv = entry.get("recv", "rendezvous")
    if recv not in RECV_MODELS:
        raise ProfileError(f"profile {profile.path}: static_engine.recv = {recv!r} must be one of "
                           f"{sorted(RECV_MODELS)}; {STATIC_HINT}")
    receive = entry.get("receive_s", 0.0)
    if isinstance(receive, bool) or not isinstance(receive, (int, float)) or receive < 0:
        raise ProfileError(f"profile {profile.path}: static_engine.receive_s = {receive!r} must be seconds >= 0; "
                           f"{STATIC_HINT}")
    return StaticRuntime(*values, recv=recv, receive_s=float(receive))


def static_view(profile: Profile) -> Profile:
    """``profile`` as the static Engine pays it: no dispatch per op call, none of the dygraph
    pipeline runtime's or decoder layer's measured extras (:data:`DYGRAPH_ONLY`)."""
    data = {k: v for k, v in profile.data.items() if k not in DYGRAPH_ONLY}
    data["dispatch"] = {"dist_op_s": 0.0}
    return Profile.from_json(data, profile.path)


def check_engine(engine: str) -> None:
    if engine not in ENGINES:
        raise PaddleExtError(f"--engine {engine!r}: say dygraph (paddle-ext's pipeline runtime, the default) or "
                             f"static (dist.to_static with install(static_engine=True))")


@lru_cache(maxsize=8192)
def static_simulate(schedule: str, pp: int, m: int, chunks: int, stage_times: Tuple[Tuple[float, ...], ...],
                    runtime: StaticRuntime, latency_s: float):
    """``(makespan, busy per rank)`` in seconds of the static Engine's simulated pipeline of ``schedule`` on ``pp``
    ranks, ``m`` microbatches, ``chunks`` per rank; ``stage_times[s]`` = ``(F, I, W, B)`` seconds
    of stage ``s``; ``latency_s`` from the later of a message's send and receive to its data on the
    receiving rank (the runtime's hand-off and the bytes on the wire); ``runtime`` gives the cost
    per job and message."""
    costs = StaticCosts(1.0, 1.0, 1.0, job=runtime.job_s, message=runtime.message_s, latency=latency_s,
                        recv=runtime.recv, receive=runtime.receive_s)
    per_stage = {s: Costs(f, i, w, b) for s, (f, i, w, b) in enumerate(stage_times)}
    r = simulate_static(schedule, pp, m, chunks, costs=costs, paddle_pass=schedule in PADDLE_PASSES,
                        stage_costs=per_stage)
    return r.makespan, tuple(r.busy)


__all__ = ["ENGINES", "PADDLE_PASSES", "StaticRuntime", "check_engine", "static_runtime", "static_simulate",
           "static_view"]
