"""The pipeline runtime's cost per action, per pipeline degree: which degree's figure a plan reads,
the closed forms it gives, and the fit that turns two measured steps into that figure.

With compute and communication free and ``a`` seconds an action, 1F1B on ``p`` stages at ``m``
microbatches runs ``(m + p - 1)`` slots of one stage's F and B, so its step is ``2 a (m + p - 1)``
(the closed form the two-stage test in test_plan_search checks at ``p = 2``).
"""
from __future__ import annotations

import pytest

from paddle_ext.plan.candidates import Candidate
from paddle_ext.plan.errors import ProfileError
from paddle_ext.plan.model_desc import gpt_family
from paddle_ext.plan.predict import predict
from paddle_ext.plan.profile import fit_action_cost, fit_split_extra, pipeline_degrees
from paddle_ext.plan.profile_data import COLLECTIVE_KINDS, Profile

TINY = gpt_family(hidden=4, heads=2, ffn=8, seq=2, vocab=8, layers=8)
FREE = {"alpha_s": 0.0, "s_per_byte": 0.0}


def profile_data(pipeline=None, rate=1e30) -> dict:
    """Compute at ``rate`` flop/s (free by default), other ops, optimizer and collectives free."""
    data = {"source": "closed-form test", "matmul": {"rate_flops_per_s": rate},
            "elementwise": {"fwd": FREE, "bwd": FREE}, "optimizer": {},
            "collectives": {k: {"any": FREE} for k in COLLECTIVE_KINDS}, "memory": {"process_base_bytes": 0}}
    if pipeline is not None:
        data["pipeline"] = pipeline
    return data


def one_f1b(pp: int, m: int) -> Candidate:
    return Candidate(pp=pp, schedule="1F1B", microbatches=m, batch=8)


@pytest.mark.parametrize("pp,m,per_action", [(2, 1, 1.0), (2, 8, 1.0), (4, 1, 3.0), (4, 8, 3.0), (8, 1, 3.0)])
def test_each_degree_reads_its_own_action_cost(pp, m, per_action):
    # measured at degrees 2 and 4; degree 8 reads 4's, the largest measured below it
    prof = Profile.from_json(profile_data({"action_s": 9.0, "action_s_by_degree": {"2": 1.0, "4": 3.0}}))
    assert predict(TINY, one_f1b(pp, m), prof).step_s == pytest.approx(2 * per_action * (m + pp - 1))


def test_without_degrees_every_pipeline_reads_action_s():
    prof = Profile.from_json(profile_data({"action_s": 2.0}))
    for pp in (2, 4):
        assert predict(TINY, one_f1b(pp, 1), prof).step_s == pytest.approx(2 * 2.0 * pp)


def test_a_degree_below_every_measured_one_reads_the_smallest():
    prof = Profile.from_json(profile_data({"action_s_by_degree": {"4": 3.0, "8": 5.0}}))
    assert prof.pipeline_action_s(2) == 3.0 and prof.pipeline_action_s(6) == 3.0 and prof.pipeline_action_s(16) == 5.0


def test_split_extra_is_bounded_by_the_degrees_own_action_cost():
    prof = Profile.from_json(profile_data({"action_s_by_degree": {"2": 1.0, "4": 3.0}, "split_extra_s": -2.5}))
    assert prof.pipeline_split_extra_s(2) == -1.0 and prof.pipeline_split_extra_s(4) == -2.5


@pytest.mark.parametrize("pp,extra", [(2, 0.5), (3, 0.5), (4, -2.0), (8, -2.0)])
def test_each_degree_reads_its_own_split_extra_bounded_by_its_own_action_cost(pp, extra):
    # measured at 2 and 4: 8 reads 4's (the largest below it); -2.5 at 4 is bounded by pp4's 2.0 a W
    prof = Profile.from_json(profile_data({"action_s_by_degree": {"2": 1.0, "4": 2.0}, "split_extra_s": 9.0,
                                           "split_extra_s_by_degree": {"2": 0.5, "4": -2.5}}))
    assert prof.pipeline_split_extra_s(pp) == extra


@pytest.mark.parametrize("key", ["action_s_by_degree", "split_extra_s_by_degree"])
@pytest.mark.parametrize("bad", [{"two": 1.0}, {"2": "fast"}, ["2", 1.0]])
def test_an_unreadable_degree_table_is_a_named_error_on_loading(key, bad):
    with pytest.raises(ProfileError, match=f"{key} must map a pipeline degree to seconds"):
        Profile.from_json(profile_data({key: bad}))


@pytest.mark.parametrize("pp,per_action", [(2, 0.5), (4, 2.5)])
def test_fit_recovers_the_action_cost_of_the_closed_form(pp, per_action):
    measured = {m: 2 * per_action * (m + pp - 1) for m in (1, 8)}
    assert fit_action_cost(TINY, profile_data(), pp, measured) == pytest.approx(per_action, rel=1e-6)


@pytest.mark.parametrize("pp", [2, 4])
def test_fit_inverts_the_prediction_with_compute(pp):
    # compute at 1 flop/s: the fit must leave the compute to the model and find the action cost alone
    with_cost = Profile.from_json(profile_data({"action_s": 7.0}, rate=1.0))
    measured = {m: predict(TINY, one_f1b(pp, m), with_cost, pp).step_s for m in (1, 8)}
    assert fit_action_cost(TINY, profile_data(rate=1.0), pp, measured) == pytest.approx(7.0, rel=1e-6)


def test_a_growth_the_compute_alone_explains_fits_zero():
    data = profile_data(rate=1.0)
    bare = Profile.from_json(data)
    measured = {m: predict(TINY, one_f1b(4, m), bare, 4).step_s for m in (1, 8)}
    measured[8] -= 1.0   # grows 1 s less than compute alone predicts (here: shrinks, the bubble's share falls)
    assert fit_action_cost(TINY, data, 4, measured) == 0.0


@pytest.mark.parametrize("nproc,degrees", [(1, (2,)), (2, (2,)), (3, (2,)), (4, (2, 4)), (6, (2, 4)), (8, (2, 4, 8))])
def test_pipeline_degrees_a_profile_times(nproc, degrees):
    assert pipeline_degrees(nproc) == degrees


@pytest.mark.parametrize("pp,true_extra", [(2, -0.5), (2, 0.0), (2, 0.7), (2, 3.0), (4, -2.5), (4, 0.7)])
def test_split_extra_fit_recovers_the_cost_and_ignores_an_error_both_schedules_share(pp, true_extra):
    """Steps "measured" as the prediction at a known cost per W, both 1F1B and ZBH1 then 5 s slower
    (an error of the absolute level, as a profile's compute can have): the fit returns the cost,
    at pp4 with its own action cost (3 s: -2.5 is inside its bound, outside pp2's 1 s)."""
    actions = {"action_s": 1.0, "action_s_by_degree": {"2": 1.0, "4": 3.0}}
    data = profile_data(dict(actions), rate=1e6)

    def step(schedule, extra):
        trial = {**data, "pipeline": {**actions, "split_extra_s_by_degree": {str(pp): extra}}}
        plan = Candidate(pp=pp, schedule=schedule, microbatches=4, batch=8)
        return predict(TINY, plan, Profile.from_json(trial), pp).step_s

    measured = {s: step(s, true_extra) + 5.0 for s in ("1F1B", "ZBH1")}
    assert fit_split_extra(TINY, data, measured, pp) == pytest.approx(true_extra, abs=1e-6)


def test_split_fit_ignores_a_degree_table_already_in_the_profile():
    # a profile being re-fitted may carry last time's table: the fit must vary the figure it reads
    data = profile_data({"action_s": 1.0, "split_extra_s_by_degree": {"2": 5.0}}, rate=1e6)
    clean = profile_data({"action_s": 1.0}, rate=1e6)
    measured = {s: predict(TINY, Candidate(pp=2, schedule=s, microbatches=4, batch=8),
                           Profile.from_json({**clean, "pipeline": {"action_s": 1.0, "split_extra_s": 0.25}}), 2).step_s
                for s in ("1F1B", "ZBH1")}
    assert fit_split_extra(TINY, data, measured) == pytest.approx(0.25, abs=1e-6)
