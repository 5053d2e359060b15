"""Static job lists compiled from the IR (pure), and the schedule_mode registry (one process)."""
from collections import Counter

import pytest

from paddle_ext.errors import ScheduleError
from paddle_ext.passes.schedule_ir import Kind
from paddle_ext.passes.schedules import SCHEDULES, get_schedule_info
from paddle_ext.passes.stage_placement import stage_to_rank_map
from paddle_ext.passes.static.jobs import compile_jobs, format_jobs, job_types, jobs_of_rank, rank_schedule

SIZES = [(2, 4), (2, 3), (3, 6), (4, 8)]
# the sizes each schedule accepts with its default chunks, by the generator's own rule
CASES = [pytest.param(name, p, m, id=f"{name}-p{p}-m{m}") for name in SCHEDULES for p, m in SIZES
         if get_schedule_info(name).valid_sizes(p, m)]
REFUSED = [pytest.param(name, p, m, id=f"{name}-p{p}-m{m}") for name in SCHEDULES for p, m in SIZES
           if not get_schedule_info(name).valid_sizes(p, m)]


@pytest.mark.parametrize("name, p, m", REFUSED)
def test_sizes_a_schedule_refuses_raise_with_the_fix(name, p, m):
    """The compiler passes the generator's refusal on: which parameter, and a value that works."""
    assert REFUSED and len(CASES) + len(REFUSED) == len(SCHEDULES) * len(SIZES)
    with pytest.raises(ScheduleError, match=r"^\S+: n_microbatches \(--microbatches\) must be .*: use "):
        compile_jobs(name, p, m, rank=0)


@pytest.mark.parametrize("name, p, m", CASES)
def test_every_compute_job_runs_once_per_microbatch(name, p, m):
    info = get_schedule_info(name)
    per_rank = [compile_jobs(name, p, m, rank=r) for r in range(p)]
    chunks = info.default_chunks
    split = any(t.startswith("backward_w") for jobs in per_rank for t, _ in jobs)
    for jobs in per_rank:
        counts = Counter(jobs)
        assert jobs[-1] == ("optimizer", 0) and counts[("optimizer", 0)] == 1
        for c in range(chunks):
            kinds = ("forward", "backward_b", "backward_w") if split else ("forward", "backward")
            for kind in kinds:
                assert [counts[(f"{kind}{c}", mb)] for mb in range(m)] == [1] * m, (kind, c)
        # forward before backward of the same chunk and micro-batch; B before W
        pos = {job: i for i, job in enumerate(jobs)}
        for c in range(chunks):
            for mb in range(m):
                back = pos.get((f"backward_b{c}", mb), pos.get((f"backward{c}", mb)))
                assert pos[(f"forward{c}", mb)] < back
                if split:
                    assert back < pos[(f"backward_w{c}", mb)]


@pytest.mark.parametrize("name, p, m", CASES)
def test_each_channel_meets_its_messages_in_one_order(name, p, m):
    """Per (sender, receiver) the sender's sends and the receiver's receives list the same
    messages in the same order: the FIFO gloo channels pair them correctly."""
    info, lowered, chunks = rank_schedule(name, p, m)
    rank_of = stage_to_rank_map(p, chunks, info.placement)
    sent, received = {}, {}
    for rank, actions in lowered.items():
        for a in actions:
            if a is None or a.kind not in (Kind.SEND_F, Kind.SEND_B, Kind.RECV_F, Kind.RECV_B):
                continue
            forward = a.kind in (Kind.SEND_F, Kind.RECV_F)
            if a.kind in (Kind.SEND_F, Kind.SEND_B):
                dst_stage = a.stage + 1 if forward else a.stage - 1
                sent.setdefault((rank, rank_of[dst_stage]), []).append((forward, a.stage, a.microbatch))
            else:
                src_stage = a.stage - 1 if forward else a.stage + 1
                received.setdefault((rank_of[src_stage], rank), []).append((forward, src_stage, a.microbatch))
    assert sent == received


@pytest.mark.parametrize("name", ["ZBH1", "ZBV", "InterleavedZB"])
def test_without_split_I_becomes_backward_and_W_goes(name):
    p, m = 2, 4
    split = compile_jobs(name, p, m, rank=1)
    full = compile_jobs(name, p, m, rank=1, split_backward=False)
    assert not any(t.startswith(("backward_b", "backward_w")) for t, _ in full)
    renamed = [(t.replace("backward_b", "backward"), mb) for t, mb in split if not t.startswith("backward_w")]
    assert list(full) == renamed


def test_zbv_puts_the_last_stage_on_rank0_chunk1():
    jobs = compile_jobs("ZBV", 2, 2, rank=0)
    # stage 3 (chunk 1 of rank 0) receives from stage 2 on rank 1 and holds the loss
    assert ("recv_forward1", 0) in jobs and not any(t == "send_forward1" for t, _ in jobs)
    assert job_types(compile_jobs("ZBV", 2, 2, rank=1))[:3] == ("recv_forward0", "forward0", "forward1")


def test_1f1b_rank1_job_list_text():
    text = format_jobs(compile_jobs("1F1B", 2, 3, rank=1), width=60)
    # the receive of micro-batch 1 waits until its forward: the backward of 0 does not wait for it
    assert text.splitlines()[0].startswith("recv_forward0:0 forward0:0 backward0:0 send_backward0:0")


def test_bad_rank_and_unknown_schedule_say_how_to_fix():
    with pytest.raises(ScheduleError, match="pp_stage must be below pp_degree=2"):
        compile_jobs("1F1B", 2, 4, rank=2)
    with pytest.raises(ScheduleError, match="known schedules: FThenB"):
        compile_jobs("ZB-H3", 2, 4, rank=0)


@pytest.mark.parametrize("name, p, m", CASES)
def test_one_generated_schedule_gives_every_ranks_jobs(name, p, m, monkeypatch):
    """build_plan generates and lowers a schedule once and compiles the rank's jobs from it: the
    same jobs as compile_jobs, which generates its own, for both backward modes, and nothing is
    generated again."""
    import paddle_ext.passes.static.jobs as jobs_module

    cases = [(r, split) for r in range(p) for split in (None, False)]
    expected = [compile_jobs(name, p, m, rank=r, split_backward=split) for r, split in cases]
    generated = rank_schedule(name, p, m)

    def no_regeneration(*args):
        raise AssertionError(f"schedule generated again: {args}")

    monkeypatch.setattr(jobs_module, "rank_schedule", no_regeneration)
    monkeypatch.setattr(jobs_module, "get_schedule_info", no_regeneration)
    assert [jobs_of_rank(generated, rank=r, split_backward=split) for r, split in cases] == expected
    with pytest.raises(ScheduleError, match=f"pipeline rank {p} is outside 0..{p - 1}; pp_stage must be below"):
        jobs_of_rank(generated, rank=p)


# -- the schedule_mode registry Paddle sees (imports Paddle; no ranks) --------------------
def test_unknown_schedule_mode_lists_the_available_names():
    from paddle_ext.compat.ports.pipeline_registry import (available_schedule_modes, registered_pipeline_passes,
                                                           resolve_schedule_mode)
    from paddle_ext.passes.static.passes import install_static, registered_name

    install_static()
    modes = available_schedule_modes()
    for name in ("FThenB", "1F1B", "VPP", "ZBH1", "ZBV", "IR_1F1B", "DualPipeV", "InterleavedZB"):
        assert name in modes
    assert resolve_schedule_mode("zbv") == "ZBV"
    registered = registered_pipeline_passes()
    install_static()  # idempotent: paddle-ext's pass classes stay the ones registered first
    again = registered_pipeline_passes()
    for schedule in SCHEDULES:
        name = registered_name(schedule)
        assert again[name] is registered[name] and again[name].paddle_ext_schedule == schedule
    with pytest.raises(ScheduleError) as info:
        resolve_schedule_mode("ZB-H3")
    msg = str(info.value)
    assert "unknown pipeline schedule_mode 'ZB-H3'" in msg and "ZBH1" in msg and "available:" in msg
