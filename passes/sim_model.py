"""What the simulator works with and returns: :class:`Costs` in, :class:`SimulationResult` out.

The simulation itself is :mod:`paddle_ext.passes.simulate`; this module holds the cost model, the
result and its figures (bubble, idle per rank, peak activations), so that the timing loop stays
one idea.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence, Tuple

from paddle_ext.errors import ScheduleError
from .schedule_ir import COMPUTE_KINDS, Kind

__all__ = ["Costs", "SimulationResult", "build_result", "coerce_costs", "check_latency", "RECV_MODELS",
           "OVERLAP_MODELS"]

KF, KB, KI, KW = Kind.F, Kind.B, Kind.I, Kind.W
#: how a receive behaves: it blocks where it sits, or it is posted early and waited at first use, or it
#: blocks and its data leaves the sender only once it is posted (simulate_schedule's docstring)
RECV_MODELS = ("blocking", "early", "rendezvous")
#: how a marked F&B pair is timed: one slot of max(F, B), one slot of F + B, or two actions
OVERLAP_MODELS = ("max", "sum", "off")


@dataclass(frozen=True)
class Costs:
    """Time of one action of each compute kind (any unit); ``full_backward`` defaults to I + W."""

    forward: float = 1.0
    backward_input: float = 1.0
    backward_weight: float = 1.0
    full_backward: Optional[float] = None

    def __post_init__(self):
        for name in ("forward", "backward_input", "backward_weight", "full_backward"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and value >= 0):
                raise ScheduleError(f"cost {name}={value!r} must be a number >= 0")

    @property
    def backward(self) -> float:
        return self.backward_input + self.backward_weight if self.full_backward is None else self.full_backward

    def of(self, kind: Kind) -> float:
        return {KF: self.forward, KB: self.backward, KI: self.backward_input, KW: self.backward_weight}.get(kind, 0.0)

    @classmethod
    def parse(cls, text: str) -> "Costs":
        """``"F,B,W"`` as on the command line, B being the input-backward (I) cost; full B = B + W.

        >>> Costs.parse("1,2,1").backward
        3.0
        """
        try:
            values = [float(x) for x in text.split(",")]
        except ValueError:
            values = []
        if len(values) != 3:
            raise ScheduleError(f"costs {text!r} should be three numbers F,B,W (B = backward for inputs), e.g. 1,1,1")
        return cls(*values)


@dataclass(frozen=True)
class SimulationResult:
    """Timing and memory of a simulated schedule. ``actions[i]``/``starts[i]``/``ends[i]`` are
    aligned per rank ``ranks[i]`` (idle slots dropped); times include communication waits."""

    ranks: Tuple[int, ...]
    actions: Tuple[Tuple[Action, ...], ...]
    starts: Tuple[Tuple[float, ...], ...]
    ends: Tuple[Tuple[float, ...], ...]
    makespan: float
    busy: Tuple[float, ...]
    spans: Tuple[float, ...]
    peak_activations: Tuple[int, ...]
    peak_activation_bytes: Tuple[float, ...]
    recv: str = "blocking"  # the runtime model it was timed with (see simulate_schedule)
    overlap: str = "max"
    overlapped_pairs: Tuple[int, ...] = ()  # marked F&B pairs timed as one slot, per rank

    @property
    def idle(self) -> Tuple[float, ...]:
        """Per rank, ``makespan - busy``: the bubble as DualPipe counts it (an overlapped pair
        is busy for its slot, not for F + B)."""
        return tuple(self.makespan - b for b in self.busy)

    @property
    def ideal(self) -> float:
        return max(self.busy) if self.busy else 0.0

    @property
    def bubble_ratio(self) -> float:
        total = len(self.ranks) * self.makespan
        return 1.0 - sum(self.busy) / total if total else 0.0

    @property
    def bubble_vs_ideal(self) -> float:
        return (self.makespan - self.ideal) / self.ideal if self.ideal else 0.0

    @property
    def steady_bubble_vs_ideal(self) -> float:
        return (max(self.spans) - self.ideal) / self.ideal if self.ideal else 0.0

    def timed(self, index: int):
        """``(action, start, end)`` of the rank at ``index`` (of ``ranks``), in order."""
        return zip(self.actions[index], self.starts[index], self.ends[index])

    def summary(self) -> dict:
        """The figures as plain JSON-ready values."""
        return {"makespan": self.makespan, "ideal": self.ideal, "recv": self.recv, "overlap": self.overlap, "bubble_ratio": self.bubble_ratio,
                "bubble_vs_ideal": self.bubble_vs_ideal, "steady_bubble_vs_ideal": self.steady_bubble_vs_ideal,
                "busy": list(self.busy), "peak_activations": list(self.peak_activations),
                "peak_activation_bytes": list(self.peak_activation_bytes)}


def coerce_costs(costs) -> Costs:
    """``costs`` as :class:`Costs` (None: the defaults; a dict of F/I/W/B)."""
    if costs is None:
        return Costs()
    if isinstance(costs, Costs):
        return costs
    if isinstance(costs, Mapping):
        unknown = set(costs) - {"F", "B", "I", "W"}
        if unknown:
            raise ScheduleError(f"unknown cost keys {sorted(unknown)}; use F, I, W and optionally B")
        return Costs(costs.get("F", 1.0), costs.get("I", 1.0), costs.get("W", 1.0), costs.get("B"))
    raise ScheduleError(f"costs must be a Costs or a dict of F/I/W/B, got {costs!r}")


def check_latency(comm_latency) -> float:
    """``comm_latency`` as a float >= 0, or :class:`ScheduleError` naming it."""
    try:
        lat = float(comm_latency)
    except (TypeError, ValueError):
        lat = float("nan")
    if isinstance(comm_latency, bool) or not lat >= 0 or lat == float("inf"):
        raise ScheduleError(f"comm_latency={comm_latency!r} must be a number >= 0 (the time a message takes "
                            f"from one rank to the next; 0 for free communication)")
    return lat



def build_result(ranks, lists, starts, ends, of_stage: Sequence[Costs], shape, activation_bytes, *, saved=None,
                 pairs=None, recv: str = "blocking", overlap: str = "max") -> SimulationResult:
    """The figures of a finished simulation; ``saved[i]`` is the compute time rank ``i`` saved by
    overlapped pairs (F + B minus their slot), ``pairs[i]`` how many pairs it overlapped."""
    if isinstance(activation_bytes, Mapping):
        size_of = [float(activation_bytes.get(s, 0.0)) for s in range(shape.n_stages)]
    else:
        size_of = [float(activation_bytes)] * shape.n_stages
    busy, spans, peaks, peak_bytes = [], [], [], []
    saved = saved or [0.0] * len(lists)
    for acts, st, en, gain in zip(lists, starts, ends, saved):
        counts = Counter([(a[0], a[1]) for a in acts])
        busy.append(sum(of_stage[s].of(kind) * count for (s, kind), count in counts.items()) - gain)
        first = next((i for i, a in enumerate(acts) if a[1] in COMPUTE_KINDS), None)
        last = next((i for i in range(len(acts) - 1, -1, -1) if acts[i][1] in COMPUTE_KINDS), None)
        spans.append(en[last] - st[first] if first is not None else 0.0)
        live = peak = 0
        live_b = peak_b = 0.0
        kf, kb, kw = KF, KB, KW
        for s, k, _ in acts:  # an activation lives from its F to its W (split) or B (full)
            if k is kf:
                live += 1
                live_b += size_of[s]
                if live > peak:
                    peak = live
                if live_b > peak_b:
                    peak_b = live_b
            elif k is kw or k is kb:
                live -= 1
                live_b -= size_of[s]
        peaks.append(peak)
        peak_bytes.append(peak_b)
    makespan = max((max(en) for en in ends if en), default=0.0)
    return SimulationResult(ranks=ranks, actions=tuple(tuple(a) for a in lists),
                            starts=tuple(tuple(x) for x in starts), ends=tuple(tuple(x) for x in ends),
                            makespan=makespan, busy=tuple(busy), spans=tuple(spans),
                            peak_activations=tuple(peaks), peak_activation_bytes=tuple(peak_bytes), recv=recv,
                            overlap=overlap, overlapped_pairs=tuple(pairs or [0] * len(lists)))
