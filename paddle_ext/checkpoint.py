"""Checkpoints that load under another parallel plan.

Paddle's ``optimizer.state_dict()`` names each state after the parameter's internal name
(``linear_3.w_0_moment1_0``), and ``dist.shard_layer`` renames the parameters it converts
(``linear_3.w_0.dist``), so the same model under a data/tensor-parallel plan and under a
pipeline plan (whose stage parameters stay dense) writes different keys for the same state.
:func:`optimizer_state` re-keys the optimizer state by the model's own structured names
(``blocks.0.attn.q.weight/moment1_0``); save and load that dict with ``dist.save_state_dict`` /
``dist.load_state_dict`` under any plan. The tensors are the optimizer's own, so a load fills
them in place.

>>> class P:                      # stands in for a Paddle parameter
...     def __init__(self, name): self.name = name
>>> w = P("linear_0.w_0.dist")
>>> sorted(optimizer_state({"fc.weight": w}, {"linear_0.w_0.dist_moment1_0": 1, "LR_Scheduler": 2}))
['LR_Scheduler', 'fc.weight/moment1_0']
"""
from __future__ import annotations

from typing import Mapping


def optimizer_state(model_state: Mapping, optimizer_state_dict: Mapping) -> dict:
    """The optimizer's state keyed by ``<model state name>/<state kind>``.

    ``model_state`` maps structured names to the parameters this rank holds (``model.state_dict()``
    or a pipeline rank's part of it). A state that belongs to none of them (a learning-rate
    scheduler's) keeps its key.
    """
    # longest internal names first: "linear_1.w_0" must not claim "linear_1.w_0.dist_moment1_0"
    by_internal = sorted(((p.name, k) for k, p in model_state.items() if getattr(p, "name", None)),
                         key=lambda t: -len(t[0]))
    out = {}
    for key, value in optimizer_state_dict.items():
        for internal, structured in by_internal:
            if key.startswith(internal + "_"):
                out[f"{structured}/{key[len(internal) + 1:]}"] = value
                break
        else:
            out[key] = value
    return out
