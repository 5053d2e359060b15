"""Dygraph pipeline runtime in one process: split backward, placement, names, the deadlock grid,
and every schedule run with all its stages on one rank (hand-offs instead of messages)."""
import re

import numpy as np
import pytest

from paddle_ext.errors import ScheduleError
from paddle_ext.passes import (add_send_recv, generate_schedule, get_schedule_info, schedule_names,
                               validate_schedule)
from paddle_ext.passes.runtime import get_schedule, split_model, split_sizes, stage_indices

NAMES = schedule_names()
# the runtime modules' docstring examples run in test_doctests.py (stage_runtime has none)


# ------------------------------------------------------------------------------ deadlock grid
SIZES = [(name, p, m, v) for name in NAMES for p in (2, 4) for m in (p, 2 * p, 3 * p) for v in (1, 2)]
GRID = [s for s in SIZES if get_schedule_info(s[0]).valid_sizes(*s[1:])]
REFUSED = [s for s in SIZES if s not in GRID]


def _ids(cases):
    return [f"{n}-p{p}-m{m}-v{v}" for n, p, m, v in cases]


@pytest.mark.parametrize("name, p, m, v", GRID, ids=_ids(GRID))
def test_lowered_schedule_cannot_deadlock_with_blocking_sends(name, p, m, v):
    """What the runtime runs: the generator's IR lowered by add_send_recv, validated by a
    rendezvous simulation (a send waits for its receive, as on gloo)."""
    lowered = add_send_recv(generate_schedule(name, p, m, v))
    shape = validate_schedule(lowered, p * v, m)
    assert shape.lowered and shape.n_stages == p * v
    # every (stage, microbatch) that is split has its I and W on the stage's rank, in that order
    for actions in lowered.values():
        order = [str(a) for a in actions if a is not None]
        for a in order:
            if "I" in a and "SEND" not in a and "RECV" not in a:
                assert order.index(a) < order.index(a.replace("I", "W"))


FIXES = [(r"pass n_chunks=(\d+)$", 2), (r"use at least (\d+) microbatches$", 1), (r"use (?:\d+ or )?(\d+)$", 1)]


@pytest.mark.parametrize("name, p, m, v", REFUSED, ids=_ids(REFUSED))
def test_refused_sizes_raise_and_say_what_would_work(name, p, m, v):
    """A size the schedule refuses raises ScheduleError naming the parameter and a value that
    works: applying the message's fixes reaches sizes the generator accepts."""
    sizes, fixes = [p, m, v], 0
    while True:
        try:
            generate_schedule(name, *sizes)
            break
        except ScheduleError as exc:
            msg = str(exc)
            assert msg.startswith(f"{name}: n_") and " must be " in msg and " because " in msg, msg
            fix = [(int(found[1]), slot) for pattern, slot in FIXES for found in [re.search(pattern, msg)] if found]
            assert len(fix) == 1, f"no single fix in: {msg}"
            sizes[fix[0][1]] = fix[0][0]
            fixes += 1
            assert fixes <= 2, msg
    assert fixes >= 1 and tuple(sizes) == get_schedule_info(name).nearest_valid_sizes(p, m, v)


def test_the_grid_keeps_every_schedule_and_refuses_what_the_generators_refuse():
    assert {n for n, *_ in GRID} == set(NAMES)
    assert ("DualPipeV", 2, 2, 2) in REFUSED and ("1F1B", 2, 2, 2) in REFUSED and ("ZBV", 4, 8, 1) in REFUSED
    assert ("VPP", 4, 4, 1) in GRID and ("LoopedBFS", 2, 2, 1) in GRID


# --------------------------------------------------------------------------------- names
def test_get_schedule_is_case_insensitive_and_lists_names_on_error():
    assert get_schedule("zbv") is get_schedule("ZBV") is get_schedule("ZbV")
    assert get_schedule("gpipe").SCHEDULE_NAME == "FThenB"
    assert get_schedule("interleaved1f1b").SCHEDULE_NAME == "VPP"
    assert {get_schedule(n).SCHEDULE_NAME for n in NAMES} == set(NAMES)
    with pytest.raises(ScheduleError) as info:
        get_schedule("ZB-H3")
    for name in NAMES:
        assert name in str(info.value)


# ------------------------------------------------------------------------------- placement
def test_split_sizes_and_errors():
    assert split_sizes(8, 4) == [2, 2, 2, 2]
    assert split_sizes(7, 3) == [3, 2, 2]
    with pytest.raises(ScheduleError, match="cannot split 3 layers into 4 pipeline stages"):
        split_sizes(3, 4)
    with pytest.raises(ScheduleError, match="do not split 4 layers into 2 stages"):
        split_model(list(range(4)), 2, sizes=[1, 2])


def test_split_model_of_sequential_keeps_layer_order():
    import paddle

    layers = [paddle.nn.Linear(2, 2) for _ in range(5)]
    pieces = split_model(paddle.nn.Sequential(*layers), 2)
    assert [len(p) for p in pieces] == [3, 2]
    assert [m for p in pieces for m in p] == layers
    with pytest.raises(ScheduleError, match="takes a paddle.nn.Sequential"):
        split_model(paddle.nn.Linear(2, 2), 2)


def test_stage_indices_follow_the_schedule_placement():
    assert [stage_indices("ZBV", r, 4) for r in range(4)] == [(0, 7), (1, 6), (2, 5), (3, 4)]
    assert [stage_indices("DualPipeV", r, 2) for r in range(2)] == [(0, 3), (1, 2)]
    assert stage_indices("VPP", 1, 4, n_chunks=3) == (1, 5, 9)
    assert stage_indices("1F1B", 2, 4) == (2,)
    with pytest.raises(ScheduleError, match="exactly 2 chunks"):
        stage_indices("ZBV", 0, 2, n_chunks=3)
    with pytest.raises(ScheduleError, match="not one of the 2 pipeline ranks"):
        stage_indices("1F1B", 2, 2)


# ---------------------------------------------------------------------------- split backward
def _block(h=8):
    import paddle.nn as nn

    class Block(nn.Layer):
        def __init__(self):
            super().__init__()
            self.ln = nn.LayerNorm(h)
            self.attn = nn.MultiHeadAttention(h, 2)
            self.fc1, self.fc2 = nn.Linear(h, 2 * h), nn.Linear(2 * h, h, bias_attr=False)

        def forward(self, x):
            y = self.ln(x)
            x = x + self.attn(y, y, y)
            return x + self.fc2(nn.functional.gelu(self.fc1(x)))

    return Block()


@pytest.mark.parametrize("strategy", ["deferred-linear", "regrad"])
@pytest.mark.parametrize("input_needs_grad", [True, False])
def test_split_backward_equals_full_backward(strategy, input_needs_grad):
    import paddle

    from paddle_ext.passes.runtime import get_split_strategy

    paddle.seed(0)
    x0, g = paddle.randn([2, 3, 8]), paddle.randn([2, 3, 8])
    paddle.seed(1)
    ref = _block()
    x = x0.detach()
    x.stop_gradient = not input_needs_grad
    paddle.autograd.backward([ref(x)], [g])
    ref_dx = x.grad

    paddle.seed(1)
    model = _block()
    split = get_split_strategy(strategy)
    x = x0.detach()
    x.stop_gradient = not input_needs_grad
    with split.forward(model) as record:
        y = model(x)
    (dx,) = split.input(record, [y], [g], [x])
    after_i = {n for n, p in model.named_parameters() if p.grad is not None}
    split.weight(record)
    if input_needs_grad:
        np.testing.assert_array_equal(dx.numpy(), ref_dx.numpy())
    if strategy == "deferred-linear":
        assert after_i == {"ln.weight", "ln.bias"}  # every Linear's gradient waits for W
    else:
        assert after_i == set()
    for (name, a), b in zip(model.named_parameters(), ref.parameters()):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-6, atol=1e-7, err_msg=name)


def test_weight_grads_accumulate_over_microbatches():
    import paddle

    from paddle_ext.passes.runtime import DeferredLinearSplit

    paddle.seed(0)
    lin = paddle.nn.Linear(4, 3)
    xs = [paddle.randn([2, 4]) for _ in range(3)]
    split = DeferredLinearSplit()
    records = []
    for x in xs:
        with split.forward(lin) as record:
            y = lin(x)
        split.input(record, [y.sum()], None, [])
        records.append(record)
    for record in reversed(records):  # W in any order
        split.weight(record)
    expect = sum(x.numpy().T @ np.ones([2, 3], "float32") for x in xs)
    np.testing.assert_allclose(lin.weight.grad.numpy(), expect, rtol=1e-6)
    np.testing.assert_allclose(lin.bias.grad.numpy(), np.full([3], 6.0), rtol=1e-6)
    assert "forward" not in lin.__dict__  # the patch is gone after the forward


# ------------------------------------------------------------------- all stages on one rank
def _mlp(n):
    import paddle
    import paddle.nn as nn

    paddle.seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(8, 8), nn.Tanh()) for _ in range(n)])


@pytest.mark.parametrize("name", NAMES)
def test_every_schedule_on_one_rank_matches_plain_training(name):
    """p = 1: every stage is local, so this runs the compute path and the local hand-offs."""
    import paddle
    import paddle.nn.functional as F

    from paddle_ext.passes.runtime import build_stages

    m = 4
    v = next(v for v in (4, 2, 1) if get_schedule_info(name).valid_sizes(1, m, v))  # the most stages it takes
    x, y = paddle.randn([8, 8]), paddle.randn([8, 8])
    ref = _mlp(4)
    losses = [F.mse_loss(ref(a), b) for a, b in zip(paddle.split(x, m), paddle.split(y, m))]
    paddle.add_n(losses).backward()

    model = _mlp(4)
    stages = build_stages(split_model(model, v), name, 0, 1, n_chunks=v)
    sched = get_schedule(name)(stages, m, loss_fn=F.mse_loss)
    got = []
    sched.step(x, target=y, losses=got)
    np.testing.assert_allclose([float(a) for a in got], [float(a) for a in losses], rtol=1e-6)
    for a, b in zip(model.parameters(), ref.parameters()):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-5, atol=1e-7)
    out = sched.step(x, target=y, losses=got, return_output=True)
    assert out.shape == [8, 8]


def test_forward_only_without_loss_fn_returns_the_output():
    import paddle

    from paddle_ext.passes.runtime import build_stages

    model = _mlp(4)
    x = paddle.randn([8, 8])
    sched = get_schedule("ZBV")(build_stages(split_model(model, 2), "ZBV", 0, 1), 4)
    out = sched.step(x, return_output=True)
    np.testing.assert_allclose(out.numpy(), model(x).numpy(), rtol=1e-6)
    assert all(p.grad is None for p in model.parameters())


def test_single_rank_errors_name_the_fix():
    import paddle
    import paddle.nn.functional as F

    from paddle_ext.passes.runtime import build_stages

    sched = get_schedule("1F1B")(build_stages(split_model(_mlp(2), 1), "1F1B", 0, 1), 4, loss_fn=F.mse_loss)
    with pytest.raises(ScheduleError, match="args\\[0\\] has 6 rows .* multiple of 4"):
        sched.step(paddle.randn([6, 8]), target=paddle.randn([6, 8]))
    with pytest.raises(ScheduleError, match="target=y"):
        sched.step(paddle.randn([8, 8]))
    with pytest.raises(ScheduleError, match="expected paddle PipelineStage"):
        get_schedule("1F1B")([_mlp(1)], 4)


def test_profiled_step_times_every_action_with_the_action_clock():
    """profile=True records (action, start, end) per action with compat's action clock (the
    device's time on a GPU, perf_counter here), and the host memory of the step."""
    import time

    import paddle

    from paddle_ext.compat.ports.pipelining import action_clock
    from paddle_ext.passes.runtime import build_stages, get_schedule, split_model

    assert action_clock() is time.perf_counter   # this machine runs on the CPU
    model = paddle.nn.Sequential(*[paddle.nn.Linear(4, 4) for _ in range(4)])
    stages = build_stages(split_model(model, 2), "ZBV", rank=0, n_ranks=1)
    sched = get_schedule("ZBV")(stages, n_microbatches=4, loss_fn=paddle.nn.functional.mse_loss, profile=True)
    before = time.perf_counter()
    sched.step(paddle.randn([8, 4]), target=paddle.zeros([8, 4]), losses=[])
    trace = sched.last_trace
    assert [a for a, _, _ in trace] == [str(a) for a in sched._actions]
    assert all(before <= t0 <= t1 for _, t0, t1 in trace)
    assert all(trace[i][2] <= trace[i + 1][1] for i in range(len(trace) - 1))   # one after the other
    assert sched.last_memory["peak"] >= sched.last_memory["start"]
