"""``paddle-ext profile`` for a PaddleNLP model times the model's own decoder layer under tensor
parallelism on the ranks (PaddleNLP's auto class on a ``[dp, mp]`` mesh against its dense class):
every key the step model reads is there, and a tensor-parallel layer costs more than dense."""
import pytest

import plan_ranks
from paddle_ext.plan.profile_blocks import SAMPLES, block_key
from paddle_ext.testing import run_ranks

pytestmark = pytest.mark.multirank


def test_paddlenlp_layers_timed_on_two_ranks(tmp_path):
    res = run_ranks(plan_ranks.block_extras, 2, args=(("gpt", "qwen"), 2), timeout=300, log_dir=tmp_path / "log")
    want = {block_key(g, sp, b) for g, sp in ((1, False), (2, False), (2, True)) for b in SAMPLES}
    for model in ("gpt", "qwen"):
        for rank in res:
            extra = rank[model]
            assert set(extra) == want, (model, sorted(extra))
            assert all(v["fwd_s"] >= 0 and v["bwd_s"] >= 0 for v in extra.values())
            # two ranks running PaddleNLP's tensor-parallel layer (its collectives, Paddle's SPMD
            # path) take longer than one dense layer on the same samples
            assert all(extra[block_key(2, False, b)]["fwd_s"] + extra[block_key(2, False, b)]["bwd_s"] > 0
                       for b in SAMPLES), extra
