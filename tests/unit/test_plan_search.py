"""The planner's memory model, step-time model and search against closed forms worked out by hand
on a tiny GPT (hidden 4, 2 heads, MLP 8, sequence 2, vocabulary 4, one block).

Parameters of that model, by layer: embedding 4x4 + position 2x4 = 24; block: two norms 2x4,
q/k/v/o 4x(4x4), gate/up 2x(4x8), down 8x4 = 168; head: norm 4 + projection 4x4 = 20; total 212
in 13 tensors. Matmul flops per sample: weights q,k,v,o 4x(2*2*4*4)=256, gate/up 2x(2*2*4*8)=256,
down 2*2*8*4=128, head 2*2*4*4=64 (sum 704); the two attention products 2x(2*2*2*2*2)=64.
"""
from __future__ import annotations

import json
import time

import pytest

from paddle_ext.passes.schedules import generate_schedule
from paddle_ext.passes.simulate import simulate_schedule
from paddle_ext.plan.candidates import Candidate, enumerate_candidates, factorisations
from paddle_ext.plan.errors import MemoryUnitError, MeshFactorError, NoFeasiblePlanError, ProfileError
from paddle_ext.plan.memory import parse_memory
from paddle_ext.plan.model_desc import gpt_family
from paddle_ext.plan.predict import contention, live_activation_peaks, predict
from paddle_ext.plan.profile_data import COLLECTIVE_KINDS, Profile
from paddle_ext.plan.search import search, to_json
from paddle_ext.plan.stage_cost import reshard_bytes, stage_costs

TINY = gpt_family(hidden=4, heads=2, ffn=8, seq=2, vocab=4, layers=1)
PARAMS, TENSORS = 212, 13
WEIGHT_FLOPS, ATTENTION_FLOPS = 704, 64
FIXED_ORDER = ["FThenB", "1F1B", "VPP", "LoopedBFS", "ZBH1", "ZBH2", "ZBV", "DualPipeV", "InterleavedZB"]


def unit_profile(**extra) -> Profile:
    """Matmuls at 1 flop/s, other ops free, AdamW 1 s per tensor, collectives 1 s per byte."""
    data = {"source": "closed-form test", "matmul": {"rate_flops_per_s": 1.0},
            "elementwise": {"fwd": {"alpha_s": 0, "s_per_elem": 0}, "bwd": {"alpha_s": 0, "s_per_elem": 0}},
            "optimizer": {"alpha_s_per_tensor": 1.0, "s_per_elem": 0.0},
            "collectives": {k: {"any": {"alpha_s": 0.0, "s_per_byte": 1.0}} for k in COLLECTIVE_KINDS},
            "memory": {"process_base_bytes": 1000}}
    data.update(extra)
    return Profile.from_json(data)


def test_parameter_count_of_the_tiny_model():
    assert TINY.param_elems() == PARAMS
    assert sum(len(layer.params) for layer in TINY.layers) == TENSORS


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_memory_per_zero_stage(zero):
    p = predict(TINY, Candidate(dp=2, zero=zero, batch=2), unit_profile())
    mem = p.memory
    assert mem["parameters"] == 4 * PARAMS / (2 if zero == 3 else 1)
    assert mem["gradients"] == 4 * PARAMS / (2 if zero >= 2 else 1)
    assert mem["optimizer states"] == 2 * 4 * PARAMS / (2 if zero >= 1 else 1)
    # one sample per rank: every layer's activations, 4 bytes each
    assert mem["activations"] == 4 * sum(layer.activation_elems_per_sample() for layer in TINY.layers)
    # the largest message: a 4x8 MLP weight (32 elements) synced over dp, send + receive buffers
    assert mem["comm buffers"] == 2 * 32 * 4
    assert p.peak_bytes == sum(mem.values()) and mem["process base"] == 1000


def test_tensor_parallel_splits_column_and_row_weights():
    mem = predict(TINY, Candidate(tp=2, batch=2), unit_profile()).memory
    split = 4 * (4 * 16 + 2 * 32 + 32)   # q,k,v,o, gate, up, down halved
    assert mem["parameters"] == 4 * PARAMS - split / 2


def test_step_time_data_parallel_closed_form():
    # dp2, batch 2: one sample per rank. F = all flops; I = weight flops + both attention inputs;
    # W = weight flops. All-reduce of L elements on 2 ranks: L elements received, 4 bytes each.
    p = predict(TINY, Candidate(dp=2, batch=2), unit_profile())
    compute = (WEIGHT_FLOPS + ATTENTION_FLOPS) + (WEIGHT_FLOPS + 2 * ATTENTION_FLOPS) + WEIGHT_FLOPS
    assert p.parts["compute"] == compute
    assert p.parts["dp all-reduce"] == 4 * PARAMS
    assert p.parts["optimizer"] == TENSORS
    loss = reshard_bytes((1,), 2, "[P]", "[R]")
    assert p.step_s == compute + 4 * PARAMS + TENSORS + loss


def test_step_time_tensor_parallel_closed_form():
    # tp2, batch 2: per block 2 forward + 2 backward all-reduces of [2, 2, 4] (16 elements,
    # 16 received per rank = 64 bytes); the block's weight matmuls and its attention halve
    p = predict(TINY, Candidate(tp=2, batch=2), unit_profile())
    assert p.parts["tp all-reduce"] == 4 * 64
    block_weights, head = WEIGHT_FLOPS - 64, 64
    per_sample = (block_weights / 2 + head) * 3 + ATTENTION_FLOPS / 2 * 3
    assert p.parts["compute"] == 2 * per_sample
    assert p.parts["optimizer"] == TENSORS


def test_sequence_parallel_gathers_and_scatters():
    # per block 2+2 all-gathers (S(seq) -> R: 8 of 16 elements received) and 2+2 reduce-scatters
    # (P -> S(seq): 8 received); the head gathers once
    p = predict(TINY, Candidate(tp=2, sp=True, batch=2), unit_profile())
    assert p.parts["sp all-gather"] == 5 * 8 * 4
    assert p.parts["sp reduce-scatter"] == 4 * 8 * 4


def test_pipeline_makespan_and_peak_activations_come_from_the_simulator():
    model = gpt_family(hidden=4, heads=2, ffn=8, seq=2, vocab=4, layers=2)
    c = Candidate(pp=2, schedule="1F1B", microbatches=4, batch=4)
    p = predict(model, c, unit_profile(), memo={})
    # rebuild the same simulation by hand: 4 layers in 2 stages, one sample per microbatch
    from paddle_ext.plan.stage_cost import stage_costs

    stages = stage_costs(model, c, unit_profile(), None)
    r = simulate_schedule(generate_schedule("1F1B", 2, 4), {"F": 0, "I": 0, "W": 0},
                          comm_latency=1.0 * 2 * 4 * 4, activation_bytes={i: s.activation_bytes for i, s in enumerate(stages)},
                          stage_costs={i: {"F": s.forward, "I": s.backward_input, "W": s.backward_weight}
                                       for i, s in enumerate(stages)})
    assert p.parts["pipeline bubble"] == pytest.approx(r.makespan - max(r.busy))
    assert p.memory["activations"] == max(r.peak_activation_bytes)
    # 1F1B on 2 ranks: rank 0 holds 2 microbatches at its peak, rank 1 one
    assert r.peak_activation_bytes == (2 * stages[0].activation_bytes, stages[1].activation_bytes)


@pytest.mark.parametrize("m", [1, 4])
def test_pipeline_runtime_overhead_closed_form(m):
    # compute and communication free, 1 s per pipeline action (F = 1, I = W = 1/2): 1F1B on two
    # stages takes (m + 1)(F + B) = 2(m + 1); the busiest rank works 2m, the bubble is 2
    free = {"alpha_s": 0.0, "s_per_byte": 0.0}
    prof = unit_profile(matmul={"rate_flops_per_s": 1e30}, optimizer={}, pipeline={"action_s": 1.0},
                        collectives={k: {"any": free} for k in COLLECTIVE_KINDS})
    p = predict(TINY, Candidate(pp=2, schedule="1F1B", microbatches=m, batch=4), prof)
    assert p.parts["pipeline runtime"] == pytest.approx(2 * m)
    assert p.parts["pipeline bubble"] == pytest.approx(2)
    assert p.step_s == pytest.approx(2 * (m + 1))


def test_a_split_backward_costs_one_runtime_action_more():
    # compute free, 1 s per action: ZBH1 runs F, I, W per microbatch (3 actions), 1F1B F and B (2)
    free = {"alpha_s": 0.0, "s_per_byte": 0.0}
    prof = unit_profile(matmul={"rate_flops_per_s": 1e30}, optimizer={}, pipeline={"action_s": 1.0},
                        collectives={k: {"any": free} for k in COLLECTIVE_KINDS})
    zb = predict(TINY, Candidate(pp=2, schedule="ZBH1", microbatches=4, batch=4), prof)
    one = predict(TINY, Candidate(pp=2, schedule="1F1B", microbatches=4, batch=4), prof)
    assert one.step_s == pytest.approx(2 * 5)
    assert zb.step_s >= 3 * 4 and zb.step_s > one.step_s


def test_split_extra_is_charged_to_w_only():
    # compute free, 1 s per action and 2 s more per split backward: on each stage F = 1, I = 1/2 + ...
    # as before, W = 1/2 + 2 more; the unsplit backward B is unchanged (1F1B's step as without it)
    free = {"alpha_s": 0.0, "s_per_byte": 0.0}
    base = dict(matmul={"rate_flops_per_s": 1e30}, optimizer={},
                collectives={k: {"any": free} for k in COLLECTIVE_KINDS})
    plain = unit_profile(pipeline={"action_s": 1.0}, **base)
    split = unit_profile(pipeline={"action_s": 1.0, "split_extra_s": 2.0}, **base)
    one_f1b = Candidate(pp=2, schedule="1F1B", microbatches=4, batch=4)
    assert predict(TINY, one_f1b, split).step_s == pytest.approx(predict(TINY, one_f1b, plain).step_s)
    zb = Candidate(pp=2, schedule="ZBH1", microbatches=4, batch=4)
    before, after = stage_costs(TINY, zb, plain, None)[0], stage_costs(TINY, zb, split, None)[0]
    assert after.backward_weight == pytest.approx(before.backward_weight + 2.0)
    assert after.backward_input == pytest.approx(before.backward_input)
    assert after.full_backward == pytest.approx(before.full_backward)
    # every rank runs 4 W: the step grows by at least the 8 s of the busiest rank's extra work
    assert predict(TINY, zb, split).step_s >= predict(TINY, zb, plain).step_s + 8 - 1e-9


@pytest.mark.parametrize("name,pp,m", [("1F1B", 4, 8), ("ZBH2", 4, 8), ("ZBV", 2, 4), ("VPP", 2, 4), ("FThenB", 3, 5)])
def test_live_peaks_equal_the_simulators(name, pp, m):
    sched = generate_schedule(name, pp, m)
    n_stages = len({a[0] for acts in sched.values() for a in acts if a is not None})
    act = tuple(float(10 + s) for s in range(n_stages))
    sim = simulate_schedule(sched, activation_bytes=dict(enumerate(act)))
    v = n_stages // pp
    assert live_activation_peaks(name, pp, m, v, act) == sim.peak_activation_bytes


def test_enumeration_counts():
    assert len(factorisations(64)) == 28            # ordered triples with product 2^6: C(8, 2)
    c = enumerate_candidates(6, 4, 32, 64, 16, 8, 4, schedules=["1F1B"])
    # no pipeline: dp4 x 4 ZeRO stages + dp2.tp2 x 4 x 2 sp + tp4 x 2 sp = 14;
    # pp2: dp2 x 4 ZeRO x m in 1,2,4 = 12, tp2 x 2 sp x m in 1,2,4,8 = 8; pp4: m in 1,2,4,8 = 4
    assert len(c) == 38
    assert len({x.name for x in c}) == 38


def test_json_has_the_issue_schema():
    doc = to_json(search(TINY, unit_profile(), 2, schedules=["1F1B"]))
    assert set(doc) >= {"candidates", "search_s", "plans"}
    assert isinstance(doc["candidates"], int) and isinstance(doc["search_s"], float)
    for plan in doc["plans"]:
        assert set(plan) >= {"name", "predicted_step_s", "predicted_peak_bytes", "measured_step_s",
                             "measured_peak_bytes"}
        assert plan["measured_step_s"] is None and plan["measured_peak_bytes"] is None
        assert len(plan["top"]) <= 3
    json.dumps(doc)
    steps = [p["predicted_step_s"] for p in doc["plans"]]
    assert steps == sorted(steps)


def test_h100_scale_search():
    from paddle_ext.plan.describe import describe_model
    from pathlib import Path

    profile = Profile.load(str(Path(__file__).resolve().parents[2] / "examples/profiles/h100_8x_published.json"))
    model = describe_model("demo", layers=32, hidden=4096)
    cpu = time.process_time()
    # every schedule in the table, the search-based ones (ZBAuto, VMin, VHalf, VZB) included: they
    # cost up to a second per size to build, so the search must not build the sizes it can rule out
    r = search(model, profile, 64)
    cpu = time.process_time() - cpu
    assert r.candidates >= 1000
    assert cpu < 10, f"{r.candidates} plans took {cpu:.1f} s of CPU"
    assert all(p.simulated for p in r.plans[:50])


@pytest.mark.parametrize("extra", [{}, {"pipeline": {"action_s": 50.0}},
                                   {"collectives": {k: {"any": {"alpha_s": 300.0, "s_per_byte": 1.0}}
                                                    for k in COLLECTIVE_KINDS}},
                                   {"host": {"cores": 2}, "pipeline": {"action_s": 50.0}},
                                   {"pipeline": {"action_s": 50.0, "split_extra_s": -50.0}}],
                         ids=["unit", "runtime-per-action", "p2p-latency", "cpu-contention", "cheap-split"])
def test_lower_bound_never_exceeds_the_simulated_step(extra):
    """The search skips building a pipeline whose lower bound cannot enter the best plans; that is
    only sound if the bound is below the simulated step of every plan, for every schedule."""
    model = gpt_family(hidden=8, heads=2, ffn=16, seq=2, vocab=8, layers=8)
    profile = unit_profile(**extra)
    cands = [c for c in enumerate_candidates(8, 2, 8, 16, 2, 16, 8, max_microbatches=16) if c.pp > 1]
    assert len({c.schedule for c in cands}) >= 10 and len(cands) > 100
    memo: dict = {}
    for c in cands:
        bound = predict(model, c, profile, memo=memo, lower_bound=True)
        exact = predict(model, c, profile, memo=memo)
        assert not bound.simulated and exact.simulated
        assert bound.step_s <= exact.step_s * (1 + 1e-9), (c.name, bound.step_s, exact.step_s)
        assert bound.peak_bytes <= exact.peak_bytes * (1 + 1e-9), c.name


def test_plans_with_the_same_action_lists_are_one_row():
    """At one microbatch 1F1B, FThenB and Eager1F1B run the same actions: one plan, three names.
    No two rows left may run equal action lists on the same mesh and microbatch count."""
    model = gpt_family(hidden=8, heads=2, ffn=16, seq=2, vocab=8, layers=2)
    r = search(model, unit_profile(), 4, schedules=["1F1B", "FThenB", "Eager1F1B", "ZBH1"], exact=10_000)
    same = [generate_schedule(n, 4, 1) for n in ("1F1B", "FThenB", "Eager1F1B")]
    assert same[0] == same[1] == same[2]  # the fact the merge rests on, from the generators
    row = next(p for p in r.plans if p.candidate.pp == 4 and p.candidate.microbatches == 1
               and p.candidate.schedule in ("1F1B", "FThenB", "Eager1F1B"))
    assert sorted((row.candidate.schedule,) + row.same_as) == ["1F1B", "Eager1F1B", "FThenB"]
    seen = set()
    for p in r.plans:
        c = p.candidate
        if c.pp > 1:
            key = (c.pp, c.dp, c.tp, c.zero, c.sp, c.microbatches, str(generate_schedule(c.schedule, c.pp, c.microbatches)))
            assert key not in seen, c.name
            seen.add(key)
    assert r.merged >= 2 and to_json(r)["merged"] == r.merged
    assert sorted(next(e for e in to_json(r)["plans"] if e["name"] == row.candidate.name)["same_as"]) == \
        sorted(row.same_as)


# -- bad inputs ------------------------------------------------------------------------------
def test_memory_limit_no_plan_meets_says_the_smallest():
    smallest = min(predict(TINY, c, unit_profile()).peak_bytes
                   for c in enumerate_candidates(3, 2, 4, 8, 2, 8, 2, schedules=["1F1B"]))
    with pytest.raises(NoFeasiblePlanError, match=r"the smallest any of the \d+ plans needs is") as info:
        search(TINY, unit_profile(), 2, "1KiB", schedules=["1F1B"])
    from paddle_ext.plan.memory import format_bytes

    assert format_bytes(smallest) in str(info.value)


@pytest.mark.parametrize("text", ["2 GiBs", "lots", "-1GB", "0", ""])
def test_unreadable_memory_units(text):
    with pytest.raises(MemoryUnitError, match="is not a positive number with a unit"):
        parse_memory(text)


def test_no_mesh_factorisation():
    with pytest.raises(MeshFactorError, match="no plan fits 7 ranks"):
        search(TINY, unit_profile(), 7, batch=8)   # dp7 does not divide 8, tp7 the heads, pp7 > 3 pieces


def test_profile_missing_a_collective_names_it_and_how_to_measure():
    prof = unit_profile(collectives={k: {"any": {"alpha_s": 0, "s_per_byte": 1}} for k in COLLECTIVE_KINDS})
    prof.data["collectives"]["all_reduce"] = {"2": {"alpha_s": 0, "s_per_byte": 1}}
    with pytest.raises(ProfileError, match=r"has no all_reduce for a group of 4 ranks .*paddle-ext profile"):
        search(TINY, prof, 4, schedules=["1F1B"])


def test_profile_missing_a_matmul_names_the_shape():
    prof = unit_profile(matmul={"shapes": {}})
    with pytest.raises(ProfileError, match=r"has no time for matmul 1x2x4x4 \(BxMxKxN\)"):
        search(TINY, prof, 2, schedules=["1F1B"])


def test_cpu_ranks_beyond_the_cores_stretch_compute_only():
    """4 ranks on 2 cores, no pipeline: every rank computes at once, each at half speed; the
    collectives (timed with every rank busy) and the optimizer keep their profile times."""
    model = gpt_family(hidden=8, heads=2, ffn=16, seq=2, vocab=8, layers=2)
    for c in (Candidate(dp=4, batch=8), Candidate(dp=2, tp=2, batch=8), Candidate(tp=4, sp=True, batch=8)):
        free, shared = predict(model, c, unit_profile()), predict(model, c, unit_profile(host={"cores": 2}))
        assert shared.parts["compute"] == pytest.approx(2 * free.parts["compute"])
        assert {k: v for k, v in shared.parts.items() if k != "compute"} == \
            {k: v for k, v in free.parts.items() if k != "compute"}
        assert shared.step_s == pytest.approx(free.step_s + free.parts["compute"])
        # as many cores as ranks, or a profile without host (a device per rank): no change
        assert predict(model, c, unit_profile(host={"cores": 4})).step_s == free.step_s


def test_pipeline_bubbles_leave_cores_to_the_busy_ranks():
    """pp2 on 1 core: at one microbatch one stage computes at a time, so the ranks never contend;
    at 8 microbatches the stages mostly overlap and compute stretches by 2 x utilization."""
    model = gpt_family(hidden=8, heads=2, ffn=16, seq=2, vocab=8, layers=6)
    free_comm = {k: {"any": {"alpha_s": 0.0, "s_per_byte": 0.0}} for k in COLLECTIVE_KINDS}
    profile, shared = unit_profile(collectives=free_comm), unit_profile(collectives=free_comm, host={"cores": 1})
    one = Candidate(pp=2, schedule="FThenB", microbatches=1, batch=8)
    assert predict(model, one, shared).step_s == predict(model, one, profile).step_s
    many = Candidate(pp=2, schedule="1F1B", microbatches=8, batch=8)
    free, stretched = predict(model, many, profile), predict(model, many, shared)
    assert 1.5 * free.parts["compute"] < stretched.parts["compute"] < 2 * free.parts["compute"]
    assert stretched.step_s > free.step_s
    assert contention(many, shared, 0.5) == 1.0 and contention(many, shared, 0.75) == 1.5
    assert contention(many, profile, 1.0) == 1.0
