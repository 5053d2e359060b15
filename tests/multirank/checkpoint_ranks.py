"""Rank functions for checkpoints across plans: save under one plan, load under another."""
import os

import numpy as np

from paddle_ext.checkpoint import optimizer_state
from paddle_ext.demo.data import make_batches
from paddle_ext.demo.model import GPTConfig
from paddle_ext.demo.plans import parse_plan
from paddle_ext.demo.pipeline import PipelineParallel
from paddle_ext.demo.train import setup_parallel

CFG = GPTConfig()
LR = 1e-2


def _full(tensor):
    """The whole logical value of a (Dist)Tensor as numpy, on every rank."""
    import paddle.distributed as dist

    if tensor.is_dist():
        tensor = dist.reshard(tensor, tensor.process_mesh, [dist.Replicate()] * len(tensor.placements))
    return np.array(tensor.numpy(), copy=True)


def _setup(plan_name, seed):
    """The demo's layout for ``plan_name``: pipeline plans hold only their stages' parameters."""
    plan = parse_plan(plan_name)
    if plan.degree("pp") > 1:
        return PipelineParallel(plan.with_schedule("1F1B", microbatches=4), CFG, seed, LR)
    return setup_parallel(plan, CFG, seed=seed, lr=LR)


def _model_state(parallel):
    """The parameters this rank holds, under the whole model's names."""
    return parallel.state_dict() if hasattr(parallel, "state_dict") else parallel.model.state_dict()


def _opt_state(parallel):
    """The optimizer's state under the model's own names, so every plan writes the same keys."""
    return optimizer_state(_model_state(parallel), parallel.optimizer.state_dict())


def _full_state(parallel):
    """This rank's parameters and optimizer states as whole (logical) numpy arrays."""
    model = {k: _full(v) for k, v in _model_state(parallel).items()}
    opt = {k: _full(v) for k, v in _opt_state(parallel).items() if hasattr(v, "is_dist")}
    return model, opt


def _record_next_step(parallel) -> dict:
    """Record the next optimizer step, as each rank holds it: per parameter (the model's structured
    names) its value before the step (``init:``), its gradient (``grad:``) and its value after
    (``step1:``), and the optimizer's state before the step (``opt:<name>/<kind>``). The step
    runs unchanged: the optimizer's ``step`` is wrapped on this instance for one call (a step
    that never comes leaves the records empty, which the test reports)."""
    from scenario_ranks import rec

    opt, out = parallel.optimizer, {}
    named = list(_model_state(parallel).items())

    def step():
        del vars(opt)["step"]   # the class's step again
        out.update({f"init:{n}": rec(p) for n, p in named})
        out.update({f"grad:{n}": rec(p.grad) for n, p in named})
        out.update({f"opt:{k}": rec(v) for k, v in _opt_state(parallel).items() if hasattr(v, "is_dist")})
        opt.step()
        out.update({f"step1:{n}": rec(p) for n, p in named})

    vars(opt)["step"] = step   # not opt.step = ...: shard_optimizer's wrapper forwards attribute writes
    return out


def train_save_continue(plan_name, steps_before, steps_after, path):
    """Train, save model and optimizer with dist.save_state_dict, then keep training."""
    import paddle.distributed as dist
    import paddle_ext

    dist.init_parallel_env()  # a user's script joins the gloo world and turns paddle-ext on
    paddle_ext.install()

    parallel = _setup(plan_name, seed=0)
    batches = make_batches(steps_before + steps_after, 8, CFG.seq_len, CFG.vocab, seed=0)
    first_step = _record_next_step(parallel)   # the first step, from the seed's weights
    before = [parallel.train_step(x, y) for x, y in batches[:steps_before]]
    dist.save_state_dict(_model_state(parallel), os.path.join(path, "model"))
    dist.save_state_dict(_opt_state(parallel), os.path.join(path, "opt"))
    saved = _full_state(parallel)
    after = [parallel.train_step(x, y) for x, y in batches[steps_before:]]
    return {"before": before, "after": after, "state": saved, "first_step": first_step}


def load_continue(plan_name, steps_before, steps_after, path, save_to=None, try_without_fix=False):
    """Build a differently initialised model under another plan, load, keep training.

    With ``save_to``, the state just loaded is saved again under this plan (before training on),
    so a chain of plans needs one launch per plan. With ``try_without_fix``, Paddle's own loader
    (paddle-ext's checkpoint fix taken back) is tried first; its error goes in the result."""
    import paddle.distributed as dist
    import paddle_ext

    dist.init_parallel_env()  # a user's script joins the gloo world and turns paddle-ext on
    paddle_ext.install()

    parallel = _setup(plan_name, seed=99)
    without_fix = _load_without_cpu_fix(parallel, path) if try_without_fix else None
    batches = make_batches(steps_before + steps_after, 8, CFG.seq_len, CFG.vocab, seed=0)
    parallel.train_step(*batches[0])  # creates the optimizer's accumulators; the load overwrites them
    dist.load_state_dict(_model_state(parallel), os.path.join(path, "model"))
    dist.load_state_dict(_opt_state(parallel), os.path.join(path, "opt"))
    loaded = _full_state(parallel)
    if save_to is not None:  # the next link of a chain loads what this plan writes
        dist.save_state_dict(_model_state(parallel), os.path.join(save_to, "model"))
        dist.save_state_dict(_opt_state(parallel), os.path.join(save_to, "opt"))
    first_step = _record_next_step(parallel)   # the first step from the loaded weights and state
    after = [parallel.train_step(x, y) for x, y in batches[steps_before:]]
    return {"after": after, "state": loaded, "without_fix": without_fix, "first_step": first_step}


def _load_without_cpu_fix(parallel, path):
    """Paddle's own loader on a CPU build, with paddle-ext's checkpoint fix taken back (and then
    put back): what a user without paddle-ext gets."""
    import paddle.distributed as dist
    from paddle_ext.compat import FIXES

    fix = FIXES["checkpoint-cpu-load"]
    fix.revert()
    try:
        dist.load_state_dict(_model_state(parallel), os.path.join(path, "model"))
    except Exception as exc:  # noqa: BLE001 - the failure is the measurement
        return f"{type(exc).__name__}: {exc}"
    finally:
        fix.apply()
    return "loaded"
