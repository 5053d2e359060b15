"""Rank functions that inject faults mid-step: the harness must fail fast and say where."""
import os
import time


def _step_loop(steps, fault_rank, fault_step, fault):
    import paddle
    import paddle.distributed as dist

    from paddle_ext.testing import record_action

    rank = dist.get_rank()
    t = paddle.ones([4])
    for step in range(steps):
        if rank == fault_rank and step == fault_step:
            record_action(f"step {step}: injected {fault}")
            if fault == "raise":
                raise RuntimeError(f"injected fault on rank {rank} at step {step}")
            if fault == "exit":
                os._exit(3)
            if fault == "hang":
                time.sleep(3600)
        record_action(f"step {step}: all_reduce of a [4] tensor")
        dist.all_reduce(t)
    return rank


def fault_in_step(steps, fault_rank, fault_step, fault):
    import paddle.distributed as dist
    import paddle_ext

    dist.init_parallel_env()  # a user's script joins the gloo world and turns paddle-ext on
    paddle_ext.install()

    return _step_loop(steps, fault_rank, fault_step, fault)


def pipeline_with_hanging_stage(schedule_name, hang_rank, hang_call):
    """A 2-stage MLP pipeline whose stage on ``hang_rank`` hangs in its ``hang_call``-th forward."""
    import paddle.distributed as dist
    import paddle_ext

    dist.init_parallel_env()  # a user's script joins the gloo world and turns paddle-ext on
    paddle_ext.install()

    import paddle
    import paddle.nn as nn
    import paddle.nn.functional as F

    from paddle_ext.passes.runtime import build_stages, get_schedule, split_model

    class Sleepy(nn.Layer):
        calls = 0

        def forward(self, x):
            Sleepy.calls += 1
            if dist.get_rank() == hang_rank and Sleepy.calls == hang_call:
                time.sleep(3600)
            return x

    mesh = dist.ProcessMesh([0, 1], dim_names=["pp"])
    dist.auto_parallel.set_mesh(mesh)
    paddle.seed(0)
    layers = [nn.Linear(8, 8), Sleepy(), nn.Linear(8, 8), Sleepy()]
    rank = dist.get_rank()
    stages = build_stages(split_model(layers, 2), schedule_name, rank, 2)
    sched = get_schedule(schedule_name)(stages[0], n_microbatches=4, loss_fn=F.mse_loss)
    x, y = paddle.randn([8, 8]), paddle.randn([8, 8])
    if rank == 0:
        sched.step(x)
    else:
        sched.step(target=y, losses=[])
    return rank


def report_pid_and_sleep(out_dir, seconds):
    """Write this rank's pid to ``out_dir/rank<N>.pid``, then sleep: a rank whose harness dies."""
    rank = os.environ.get("PADDLE_TRAINER_ID", "0")
    tmp = os.path.join(out_dir, f".rank{rank}.pid")
    with open(tmp, "w") as f:
        f.write(str(os.getpid()))
    os.replace(tmp, os.path.join(out_dir, f"rank{rank}.pid"))
    time.sleep(seconds)
    return rank
