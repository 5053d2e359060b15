"""The rescale transition (paddle_ext/reshard/transition_kinds/rescale.py): P(sum) <-> P(avg) in place.

Proved against the dense tensor on simulated ranks (bit-exact: the ranks' parts are exact small
integers and n a power of two), with the plan's own claims: one local step, 0 bytes received,
refused where it would not be exact (n = 3) and on integers under another mesh dim's P(max).
"""
from __future__ import annotations

import numpy as np
import pytest

from paddle_ext.placements import DistSpec, Partial, Shard
from paddle_ext.reshard.exact import dense_for, exact_locals
from paddle_ext.reshard.planner import format_plan, plan_reshard
from paddle_ext.reshard.simulated import simulate_reshard
from paddle_ext.reshard.transition_kinds.rescale import RESCALE
from paddle_ext.reshard.transitions import TRANSITIONS, Transition, register_transition
from paddle_ext.simulated_ranks import assemble


@pytest.mark.parametrize("mesh, src, dst", [
    ((2,), "[P(sum)]", "[P(avg)]"), ((4,), "[P(avg)]", "[P(sum)]"),
    ((2, 2), "[P(sum),S(0)]", "[P(avg),S(0)]"), ((2, 4), "[S(1),P(avg)]", "[S(1),P(sum)]")])
@pytest.mark.parametrize("shape", [(4, 8), (5, 7)], ids=["even", "uneven"])
def test_one_local_step_reproduces_the_dense_tensor(mesh, src, dst, shape):
    a, b = DistSpec(shape, mesh, src), DistSpec(shape, mesh, dst)
    plan = plan_reshard(a, b, itemsize=4)
    assert [(s.collective, s.bytes) for s in plan] == [("rescale", 0)], format_plan(plan)
    dense = dense_for(shape, np.float32, seed=1)
    stats = {}
    out = simulate_reshard(exact_locals(dense, a, seed=1), a, b, stats=stats)
    assert np.array_equal(assemble(out, b, rtol=0, atol=0), dense)
    assert max(stats.values(), default=0) == 0  # no rank received anything


def test_not_taken_where_it_would_not_be_exact():
    a, b = DistSpec((6, 6), (3,), "[P(sum)]"), DistSpec((6, 6), (3,), "[P(avg)]")
    assert "rescale" not in [s.collective for s in plan_reshard(a, b, itemsize=4)]
    a, b = DistSpec((4, 4), (2, 2), "[P(sum),P(max)]"), DistSpec((4, 4), (2, 2), "[P(avg),P(max)]")
    # scaling a P(max) neutral (iinfo.min) by n would wrap; with Replicate beside it nothing wraps
    assert RESCALE.wraps_integers((Partial("avg"), Partial("max")), 0, Partial("sum"), Partial("avg"))
    assert not RESCALE.wraps_integers((Partial("avg"), Shard(0)), 0, Partial("sum"), Partial("avg"))
    steps = plan_reshard(a, b, itemsize=4, dtype="int32")  # integers: never next to a P(max) neutral
    assert len(steps) > 1
    for step in steps:
        if step.collective == "rescale":
            assert not any(isinstance(p, Partial) and p.op in ("max", "min") for p in step.src), format_plan(steps)


def test_it_is_registered_from_its_own_module_and_a_second_claim_is_refused():
    assert TRANSITIONS["rescale"] is RESCALE and RESCALE.executor.__module__.endswith("transition_kinds.rescale")
    with pytest.raises(ValueError, match="both claim P -> P"):
        register_transition(Transition("rescale_again", (("P", "P"),), RESCALE.legal, RESCALE.elements,
                                       RESCALE.executor))
    assert "rescale_again" not in TRANSITIONS
