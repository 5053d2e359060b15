"""paddle-ext's rules vs core.get_phi_spmd_rule on seeded random shapes and placements.

Meshes 2, 4 and 2x2; P(sum) inputs included (forward). Every disagreement must fall into a
category documented in docs/spmd_rules.md ("Differences from Paddle's C++ rules"), and a
category only excuses a disagreement when paddle-ext's answer is right by the dense ground
truth on simulated ranks (validator.check_claim): inputs laid out as we require, the op run per
rank, our claimed outputs rebuilt and compared with the dense result.

infer_backward is compared the same way (requested output specs -> inputs each side asks for
and the outputs each side says the op produces), through paddle-ext's Paddle-convention bridge.

The dense check cannot see over-caution, so a second gate: where paddle-ext is more replicated
than Paddle and Paddle's answer passes the dense check, the test fails unless an entry of the
documented list (paddle_ext.spmd.caution.ALLOWED, mirrored in docs/spmd_rules.md) covers it.
"""
import pytest

from paddle_ext.placements import DistSpec
from paddle_ext.spmd import REGISTRY, register_spmd_rule
from paddle_ext.spmd.caution import allowance_for, over_caution, unexcused
from paddle_ext.spmd.compare import (CATEGORIES, PADDLE_BACKWARD_IS_GRAD, Disagreement, Instance, classify,
                                     compare_op, ground_truth)
from paddle_ext.spmd.opcases import CASES

PADDLE_OPS = sorted(o for o, c in CASES.items() if c.paddle)
BACKWARD_OPS = [o for o in PADDLE_OPS if o not in PADDLE_BACKWARD_IS_GRAD]
UNARY_DUPES = {"abs", "exp", "log", "sigmoid", "silu", "sin", "sqrt", "square", "tanh"}


def _check_excused(ds):
    """Every disagreement is in a documented category and our side is right by ground truth."""
    unexplained = [d for d in ds if classify(d) is None]
    assert not unexplained, "\n".join(map(str, unexplained[:10]))
    assert all(classify(d) in CATEGORIES for d in ds)
    wrong = [(d, why) for d in ds for why in [ground_truth(d)] if why]
    assert not wrong, "\n".join(f"{d} -- {why}" for d, why in wrong[:10])
    cautious = unexcused(ds)
    assert not cautious, ("more replicated than Paddle where Paddle's answer is right; fix the rule or add an "
                          "entry with its reason to paddle_ext.spmd.caution.ALLOWED:\n"
                          + "\n".join(map(str, cautious[:10])))


@pytest.mark.parametrize("op", PADDLE_OPS)
def test_spmd_differential_vs_paddle(op):
    n = 120 if op in UNARY_DUPES else 300
    count, ds = compare_op(op, n, seed=1)
    assert count == n
    _check_excused(ds)
    if op in ("layer_norm", "reshape", "flatten", "cumsum"):
        # these agree almost everywhere, but where a partial input passes (Paddle all-reduces it)
        assert len([d for d in ds if classify(d) != "partial"]) < 0.1 * n


@pytest.mark.parametrize("op", BACKWARD_OPS)
def test_spmd_differential_backward_vs_paddle(op):
    n = 60 if op in UNARY_DUPES else 150
    count, ds = compare_op(op, n, seed=1, backward=True)
    assert count == n
    _check_excused(ds)
    if op in ("reshape", "flatten", "cumsum", "slice", "squeeze", "unsqueeze"):
        assert len(ds) < 0.1 * n


def test_spmd_differential_agrees_on_plain_cases():
    # even, non-partial, single-input: identical to Paddle
    for op in ("softmax", "reshape", "transpose", "sum"):
        _, ds = compare_op(op, 200, seed=3)
        assert all(classify(d) in ("uneven", "size-one", "coshard", "partial") for d in ds), op


def test_spmd_ground_truth_rejects_a_wrong_excused_answer():
    # an uneven softmax instance (so classify excuses any disagreement on it) with a made-up
    # answer that keeps the softmax axis sharded: the dense check must refuse it
    x = DistSpec((5, 7), (2,), "[S(1)]")
    inst = Instance("softmax", (x,), (("axis", 1),))
    bad = Disagreement(inst, "[S(1)] = [S(1)]", "[R] = [R]", "inputs", ((x,), (x,)))
    assert classify(bad) == "uneven"
    assert "values differ" in ground_truth(bad)
    good_in = DistSpec((5, 7), (2,), "[R]")
    good = Disagreement(inst, "[R] = [R]", "[S(1)] = [S(1)]", "inputs", ((good_in,), (good_in,)))
    assert ground_truth(good) == ""


def _replicating_transpose(x: DistSpec, perm: list[int]):
    """d0 d1 -> d1 d0 | replicate: d0 d1   (every dim and partial replicated: never wrong, never sharded)"""
    names = [f"d{i}" for i in range(x.ndim)]
    return f"{' '.join(names)} -> {' '.join(names[p] for p in perm)} | replicate: {' '.join(names)}"


def test_spmd_over_caution_gate_trips_on_a_replicating_rule():
    """The gate is not vacuous: a transpose that replicates everything passes the dense check
    everywhere, and is caught forward and backward as more replicated than Paddle."""
    saved = REGISTRY.reset(dict(REGISTRY.rules))
    try:
        register_spmd_rule("transpose", override=True)(_replicating_transpose)
        _, fwd = compare_op("transpose", 100, seed=1)
        _, bwd = compare_op("transpose", 50, seed=1, backward=True)
    finally:
        REGISTRY.reset(saved)
    assert not [d for d in fwd + bwd if ground_truth(d)]        # right by the dense check
    caught = unexcused(fwd), unexcused(bwd)
    assert len(caught[0]) > 20 and len(caught[1]) > 10, [len(c) for c in caught]
    assert "P(sum)" in str(next(c for c in caught[0] if "P(sum)" in c.disagreement.paddle))
    assert not unexcused(compare_op("transpose", 100, seed=1)[1])   # the real rule passes


def test_spmd_over_caution_allowances_are_decided_by_the_instance():
    # a co-sharded requested output (backward) is allowed whatever the answers; a forward
    # instance with ascending shards is not covered by the coshard-order entry
    out = DistSpec((4,), (2, 2), "[S(0),S(0)]")
    back = Instance("abs", (DistSpec((4,), (2, 2), "[R,R]"),), (), (out,))
    assert allowance_for(back).category == "binding-coshard"
    desc = Instance("flatten", (DistSpec((4, 3), (2, 2), "[S(1),S(0)]"),), (("start_axis", 0), ("stop_axis", 1)))
    asc = Instance("flatten", (DistSpec((4, 3), (2, 2), "[S(0),S(1)]"),), (("start_axis", 0), ("stop_axis", 1)))
    assert allowance_for(desc).category == "coshard-order" and allowance_for(asc) is None
    (d,) = [x for x in compare_op("flatten", 300, seed=1)[1] if over_caution(x)]
    assert allowance_for(d.instance).category == "coshard-order"
