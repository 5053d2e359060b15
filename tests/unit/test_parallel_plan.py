"""The plan type's text form: what each part means, round trips, and the named errors."""
from __future__ import annotations

import pytest

from paddle_ext.parallel_plan import ParallelPlan, PlanError, parse_plan
from paddle_ext.plan.candidates import enumerate_candidates

# text -> (pp, dp, tp, zero, sp, schedule, chunks, microbatches), read off the documented grammar
MEANING = {
    "single": (1, 1, 1, 0, False, None, 1, 1),
    "dp2": (1, 2, 1, 0, False, None, 1, 1),
    "zero2": (1, 2, 1, 2, False, None, 1, 1),
    "zero3-tp2": (1, 2, 2, 3, False, None, 1, 1),
    "sp2-tp2": (1, 1, 2, 0, True, None, 1, 1),
    "tp2-pp2": (2, 1, 2, 0, False, None, 1, 1),
    "pp2-zero2d4-sp8-tp8:DualPipeV:m32": (2, 4, 8, 2, True, "DualPipeV", 2, 32),
    "pp4-dp2:1F1B:m8": (4, 2, 1, 0, False, "1F1B", 1, 8),
    "pp2-tp2:zbv:m4": (2, 1, 2, 0, False, "ZBV", 2, 4),          # schedule names are case-insensitive
    "pp2:VPP:m4:v3": (2, 1, 1, 0, False, "VPP", 3, 4),            # chunks other than the schedule's own
    "pp2:gpipe:m2": (2, 1, 1, 0, False, "FThenB", 1, 2),         # an alias reads as the canonical name
}
CANONICAL = {"zero2": "zero2d2", "zero3-tp2": "zero3d2-tp2", "tp2-pp2": "pp2-tp2", "pp2-tp2:zbv:m4": "pp2-tp2:ZBV:m4",
             "pp2:gpipe:m2": "pp2:FThenB:m2"}


@pytest.mark.parametrize("text", MEANING)
def test_each_part_means_what_the_grammar_says(text):
    p = parse_plan(text, batch=64)
    assert (p.pp, p.dp, p.tp, p.zero, p.sp, p.schedule, p.chunks, p.microbatches) == MEANING[text]
    assert p.batch == 64 and p.world_size == p.pp * p.dp * p.tp
    assert str(p) == CANONICAL.get(text, text)
    assert parse_plan(str(p), batch=64) == p


def test_mesh_is_pp_dp_tp_without_degree_one_dims():
    p = parse_plan("tp4-zero1d2-pp2")
    assert p.degrees == (("pp", 2), ("dp", 2), ("tp", 4))
    assert (p.mesh_dims, p.mesh_shape, p.world_size) == (("pp", "dp", "tp"), (2, 2, 4), 16)
    q = parse_plan("sp2-tp2")
    assert (q.mesh_dims, q.mesh_shape, q.degree("pp"), q.degree("mp")) == (("tp",), (2,), 1, 2)


@pytest.mark.parametrize("nproc,shape", [(4, (6, 4, 32, 64, 16, 8)), (8, (10, 8, 64, 128, 32, 16)),
                                         (64, (34, 32, 4096, 16384, 128, 128))])
def test_every_plan_the_planner_enumerates_round_trips(nproc, shape):
    n_layers, heads, hidden, ffn, seq, batch = shape
    cands = enumerate_candidates(n_layers, heads, hidden, ffn, seq, batch, nproc)
    assert len(cands) > 10
    names = set()
    for c in cands:
        p = parse_plan(c.name, batch=c.batch)
        assert (p.pp, p.dp, p.tp, p.zero, p.sp, p.schedule, p.chunks, p.microbatches, p.batch) == \
            (c.pp, c.dp, c.tp, c.zero, c.sp, c.schedule, c.chunks, c.microbatches, c.batch)
        assert p.name == c.name
        names.add(c.name)
    assert len(names) == len(cands)   # the text tells every plan apart


def test_with_schedule_keeps_the_mesh():
    p = parse_plan("pp2-sp2-tp2", batch=8).with_schedule("ZBV", microbatches=4)
    assert str(p) == "pp2-sp2-tp2:ZBV:m4" and p.chunks == 2 and p.n_stages == 4 and p.microbatch_samples == 2
    assert parse_plan("dp2-tp2").with_schedule("ZBV", 4) == parse_plan("dp2-tp2")   # no pipeline: no schedule


@pytest.mark.parametrize("text,says", [
    ("xx", "cannot read 'xx'"), ("tp2-sp4", "needs tp4"), ("dp1", "at least 2"), ("dp2-zero1", "sets dp twice"), ("pp2-tp2:1F1B", "e.g. pp2-tp2:1F1B:m4"),
    ("zero4", "stages are 1, 2, 3"), ("pp2:ZBV", "':Schedule:mM'"), ("pp2:NoSuch:m4", "known schedules"),
    ("dp2:1F1B:m2", "needs a ppN part"), ("", "empty"), ("tp", "needs a degree"),
])
def test_bad_text_is_a_named_error_that_says_what_works(text, says):
    with pytest.raises(PlanError) as info:
        parse_plan(text)
    assert says in str(info.value)


@pytest.mark.parametrize("fields,says", [
    (dict(dp=1, zero=2), "needs dp >= 2"), (dict(tp=1, sp=True), "needs tp >= 2"),
    (dict(pp=1, schedule="1F1B"), "needs pp >= 2"), (dict(tp=0), "positive int"), (dict(zero=5), "ZeRO level"),
    (dict(chunks=2), "give schedule="), (dict(pp=2, schedule="ZBV", microbatches=0), "positive int"),
])
def test_bad_fields_are_named_errors(fields, says):
    with pytest.raises(PlanError) as info:
        ParallelPlan(**fields)
    assert says in str(info.value)


def test_unbuilt_names_what_a_runner_would_drop():
    from paddle_ext.parallel_plan import FIELDS

    p = parse_plan("pp2-zero1d2-sp2-tp2:ZBV:m4", batch=8)
    assert p.unbuilt(FIELDS) == ()
    assert p.unbuilt(set(FIELDS) - {"sp", "zero"}) == ("zero", "sp")
    assert parse_plan("dp2-tp2").unbuilt(set(FIELDS) - {"sp", "zero"}) == ()   # at their defaults: nothing dropped
