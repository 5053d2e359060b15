"""The zero-bubble paper's settings as data: Table 9's profiled costs and Table 5's bubble rates.

Qi, Wan, Huang and Lin, "Zero Bubble Pipeline Parallelism", ICLR 2024 (arXiv 2401.10241).
Table 9 ("Profiled time of T_F, T_B, T_W and T_comm", Appendix D) gives, for each model size,
pipeline depth ``p`` and microbatch count ``m`` of Table 5, the time of a forward (``F``), of a
backward for inputs (``B``, paddle-ext's ``I``), of a backward for weights (``W``) and of one
message between stages (paddle-ext's latency ``L``), in milliseconds. Table 5 ("Bubble rates of
1F1B, 1F1B-I, ZB-H1, ZB-H2, ZB-1p, ZB-2p") gives each schedule's bubble rate
``(cost - m(F+B+W)) / cost``, where the cost is the longest execution time of a stage (paddle-ext's
longest stage span), computed from these costs, not measured.

The numbers were read from a transcription of the paper (not from its PDF). paddle-ext's ZBH2
simulated with them reproduces Table 5's ZB-H2 column to all four digits in all twelve rows
(tests/unit/test_zb_auto_objectives.py), which checks both tables and the cost model.

The paper's ZB-2p is its automatic schedule at a memory limit of ``2p`` microbatches under its
own memory model, in which an ``I`` (its ``B``) frees part of a microbatch's activations and a
pending ``W`` holds only the rest; paddle-ext counts a whole microbatch until its ``W``, so ZB-2p's
rates are not reachable here: :mod:`.zb_auto_tune` states what is (a lower bound ZBAuto meets).

>>> row = TABLE9[4]
>>> row.model, row.p, row.m, row.costs, row.latency
('6.2B', 8, 32, (29.802, 29.428, 19.53), 0.577)
>>> TABLE5_BUBBLE_RATES[("6.2B", 32)]
{'ZBH2': 0.0559, 'ZB-2p': 0.0022}
"""
from __future__ import annotations

from typing import Dict, NamedTuple, Tuple

__all__ = ["Setting", "TABLE9", "TABLE5_BUBBLE_RATES"]


class Setting(NamedTuple):
    """One row of Table 9: model size, pipeline depth ``p``, microbatches ``m``, and the profiled
    ``F``, ``B`` (backward for inputs), ``W`` and message time, in milliseconds."""

    model: str
    p: int
    m: int
    forward: float
    backward_input: float
    backward_weight: float
    comm: float

    @property
    def costs(self) -> Tuple[float, float, float]:
        """``(F, B, W)`` as ZBAuto's ``costs`` take them."""
        return (self.forward, self.backward_input, self.backward_weight)

    @property
    def latency(self) -> float:
        """The message time, ZBAuto's ``latency``."""
        return self.comm


TABLE9 = (
    Setting("1.5B", 8, 24, 18.522, 18.086, 9.337, 0.601),
    Setting("1.5B", 8, 32, 18.513, 18.086, 9.331, 0.626),
    Setting("1.5B", 8, 64, 18.546, 18.097, 9.321, 0.762),
    Setting("6.2B", 8, 24, 29.718, 29.444, 19.927, 0.527),
    Setting("6.2B", 8, 32, 29.802, 29.428, 19.530, 0.577),
    Setting("6.2B", 8, 64, 29.935, 29.621, 19.388, 0.535),
    Setting("14.6B", 16, 48, 11.347, 11.248, 8.132, 0.377),
    Setting("14.6B", 16, 64, 11.307, 11.254, 8.101, 0.379),
    Setting("14.6B", 16, 128, 11.325, 11.308, 8.109, 0.378),
    Setting("28.3B", 32, 96, 10.419, 10.207, 7.715, 0.408),
    Setting("28.3B", 32, 128, 10.408, 10.204, 7.703, 0.408),
    Setting("28.3B", 32, 256, 10.402, 10.248, 7.698, 0.460),
)

# Table 5's ZB-H2 and ZB-2p columns, keyed by (model, m)
_H2 = (0.1083, 0.0837, 0.0444, 0.0698, 0.0559, 0.0294, 0.0672, 0.0516, 0.0266, 0.0641, 0.0490, 0.0257)
_ZB2P = (0.0433, 0.0039, 0.0026, 0.0029, 0.0022, 0.0010, 0.0066, 0.0054, 0.0028, 0.0038, 0.0029, 0.0018)
TABLE5_BUBBLE_RATES: Dict[Tuple[str, int], Dict[str, float]] = {
    (row.model, row.m): {"ZBH2": h2, "ZB-2p": zb2p} for row, h2, zb2p in zip(TABLE9, _H2, _ZB2P)}
