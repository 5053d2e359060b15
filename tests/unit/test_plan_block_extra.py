"""A profile's timed decoder layer (``blocks``: a PaddleNLP model's own layer under tensor
parallelism) read back on its line through the timed sample counts, and charged by the step
model in place of the formula's tensor-parallel collectives and dispatch, for that model only."""
import pytest

from paddle_ext.plan.candidates import Candidate
from paddle_ext.plan.model_desc import gpt_family
from paddle_ext.plan.profile_data import COLLECTIVE_KINDS, Profile
from paddle_ext.plan.stage_cost import CommCost, stage_costs

MODEL = gpt_family(hidden=4, heads=2, ffn=8, seq=2, vocab=4, layers=2, name="paddlenlp-gpt")


def profile(blocks=None) -> Profile:
    data = {"source": "block-extra test", "matmul": {"rate_flops_per_s": 1.0},
            "elementwise": {"fwd": {"alpha_s": 0, "s_per_elem": 0}, "bwd": {"alpha_s": 0, "s_per_elem": 0}},
            "dispatch": {"dist_op_s": 0.5},
            "collectives": {k: {"any": {"alpha_s": 100.0, "s_per_byte": 0.0}} for k in COLLECTIVE_KINDS}}
    if blocks is not None:
        data["blocks"] = blocks
    return Profile.from_json(data)


BLOCKS = {"model": "paddlenlp-gpt", "hidden": 4, "seq": 2,
          "extra": {"tp=2,sp=0,b=1": {"fwd_s": 1.0, "bwd_s": 2.0}, "tp=2,sp=0,b=8": {"fwd_s": 8.0, "bwd_s": 16.0},
                    "tp=2,sp=1,b=1": {"fwd_s": 5.0, "bwd_s": 5.0}, "tp=2,sp=1,b=8": {"fwd_s": 3.0, "bwd_s": 3.0}}}


def test_read_on_the_line_through_the_timed_samples():
    p = profile(BLOCKS)
    assert p.block_extra("paddlenlp-gpt", 4, 2, 2, False, 4) == (4.0, 8.0)
    assert p.block_extra("paddlenlp-gpt", 4, 2, 2, False, 16) == (16.0, 32.0)
    # fewer readings for more samples: noise on a flat line, read as its mean
    assert p.block_extra("paddlenlp-gpt", 4, 2, 2, True, 4) == (4.0, 4.0)


@pytest.mark.parametrize("model, hidden, seq, tp", [("demo", 4, 2, 2), ("paddlenlp-gpt", 8, 2, 2),
                                                    ("paddlenlp-gpt", 4, 4, 2), ("paddlenlp-gpt", 4, 2, 4)])
def test_only_for_the_model_and_sizes_it_timed(model, hidden, seq, tp):
    assert profile(BLOCKS).block_extra(model, hidden, seq, tp, False, 1) is None


def _stage(p, model=MODEL, c=Candidate(tp=2, batch=2)):
    return stage_costs(model, c, p, CommCost(p, c, c.world_size))[0]


def test_a_timed_layer_replaces_the_formulas_collectives_and_dispatch():
    formula = _stage(profile())
    assert formula.parts["tp all-reduce"] == 2 * 4 * 100.0     # 2 blocks, 2 forward + 2 backward each
    assert "dispatch" in formula.parts
    timed = _stage(profile(BLOCKS))
    assert "tp all-reduce" not in timed.parts
    # two blocks at 2 samples (batch 2, one microbatch): (2, 4) seconds each, forward in F, backward in I
    assert timed.parts["tp block (measured)"] == 2 * (2.0 + 4.0)
    # the embedding and head keep the per-op dispatch; the blocks' went into their measured extra
    assert timed.parts["dispatch"] == pytest.approx(0.5 * 2 * (len(MODEL.layers[0].ops) + len(MODEL.layers[-1].ops)))
    assert timed.forward - formula.forward == pytest.approx(
        2 * 2.0 - 2 * 2 * 100.0 - 0.5 * (formula.parts["dispatch"] - timed.parts["dispatch"]))


def test_another_model_keeps_the_formula():
    other = gpt_family(hidden=4, heads=2, ffn=8, seq=2, vocab=4, layers=2, name="demo")
    assert _stage(profile(BLOCKS), other).parts == _stage(profile(), other).parts
