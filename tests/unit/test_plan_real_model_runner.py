"""Which plans PaddleNLP's auto-parallel path can run (pipeline by annotation: one microbatch,
every forward then every backward), and the model name it is given."""
from __future__ import annotations

import pytest

from paddle_ext.passes.schedules import generate_schedule
from paddle_ext.plan.candidates import Candidate, enumerate_candidates
from paddle_ext.plan.real_model_runner import F_THEN_B, model_key, runnable


@pytest.mark.parametrize("schedule", F_THEN_B)
def test_f_then_b_schedules_at_one_microbatch_are_forward_then_backward_per_stage(schedule):
    # what pipeline by annotation runs: each stage does F then a whole B of the one microbatch
    sched = generate_schedule(schedule, 2, 1)
    assert [[a.kind for a in sched[r]] for r in (0, 1)] == [["F", "B"], ["F", "B"]]
    assert runnable(Candidate(pp=2, dp=2, schedule=schedule, microbatches=1), 2) == ""


def test_what_the_runner_refuses_says_why():
    assert "one microbatch" in runnable(Candidate(pp=2, dp=2, schedule="1F1B", microbatches=2), 2)
    assert "one microbatch" in runnable(Candidate(pp=2, dp=2, schedule="ZBH1", microbatches=1), 2)
    assert "ZeRO" in runnable(Candidate(pp=2, dp=2, zero=1, schedule="FThenB", microbatches=1), 2)
    assert "evenly" in runnable(Candidate(pp=4, schedule="FThenB", microbatches=1), 2)
    assert runnable(Candidate(dp=2, tp=2, zero=3), 2) == ""


def test_runnable_plans_of_the_tiny_gpt_on_4_ranks():
    # hidden 64, heads 4, MLP 128, seq 16, 2 layers (4 pipeline pieces), batch 8
    cands = enumerate_candidates(4, 4, 64, 128, 16, 8, 4)
    ok = {c.name for c in cands if not runnable(c, 2)}
    assert {"dp4", "zero3d4", "tp4", "sp4-tp4", "dp2-tp2", "zero1d2-sp2-tp2"} <= ok
    assert {n.split(":")[0] for n in ok if ":" in n} == {"pp2-dp2", "pp2-tp2", "pp2-sp2-tp2"}
    assert all(n.endswith(":m1") for n in ok if ":" in n)


def test_model_key():
    assert model_key("paddlenlp-qwen") == "qwen"
