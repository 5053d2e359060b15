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
    return _step_loop(steps, fault_rank, fault_step, fault)
