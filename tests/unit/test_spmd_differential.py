"""paddle-ext's rules vs core.get_phi_spmd_rule on seeded random shapes and placements.

Meshes 2, 4 and 2x2; P(sum) inputs included (forward). Every disagreement must fall into a
category documented in docs/spmd_rules.md ("Differences from Paddle's C++ rules"), and a
category only excuses a disagreement when paddle-ext's answer is right by the dense ground
truth on simulated ranks (validator.check_claim): inputs laid out as we require, the op run per
rank, our claimed outputs rebuilt and compared with the dense result.

infer_backward is compared the same way (requested output specs -> inputs each side asks for
and the outputs each side says the op produces), through paddle-ext's Paddle-convention bridge.
"""
import pytest

from paddle_ext.spmd.compare import (CATEGORIES, PADDLE_BACKWARD_IS_GRAD, Disagreement, Instance, classify,
                                     compare_op, ground_truth)
from paddle_ext.spmd.opcases import CASES
from paddle_ext.placements import DistSpec

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
