"""Rank functions for the dygraph pipeline tests (run through paddle_ext.testing.run_ranks).

Every rank builds the whole model with a fixed seed, so it can compute the single-process
reference itself (sum of the microbatch losses, one backward) and compare the gradients of the
stages it holds. Each function loops over many configurations in one launch.
"""
import numpy as np

H = 16


def _models():
    import paddle
    import paddle.nn as nn

    class MLPBlock(nn.Layer):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(H, H)

        def forward(self, x):
            return paddle.tanh(self.fc(x))

    class Block(nn.Layer):
        """Pre-LN transformer block: attention (4 Linears) and a GELU MLP."""

        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(H), nn.LayerNorm(H)
            self.attn = nn.MultiHeadAttention(H, 2)
            self.fc1, self.fc2 = nn.Linear(H, 2 * H), nn.Linear(2 * H, H)

        def forward(self, x):
            h = self.ln1(x)
            x = x + self.attn(h, h, h)
            return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))

    class TransposingBlock(nn.Layer):
        """Returns a strided view (a transpose of its last two dims): not contiguous in memory."""

        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(H, H)

        def forward(self, x):
            return paddle.tanh(self.fc(x)).transpose([0, 2, 1])

    return {"mlp": (MLPBlock, [None, H]), "transformer": (Block, [None, 4, H]),
            "transposing": (TransposingBlock, [None, H, H])}


def _data(shape, batch, seed):
    import paddle

    rng = np.random.default_rng(seed)
    full = [batch] + shape[1:]
    return (paddle.to_tensor(rng.standard_normal(full).astype("float32")),
            paddle.to_tensor(rng.standard_normal(full).astype("float32")))


def _rel(a, b) -> float:
    a, b = np.asarray(a, dtype="float64"), np.asarray(b, dtype="float64")
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-6))


def _reference(blocks, x, y, m, loss_fn):
    """Per-microbatch losses and the gradients of the sum (single process)."""
    import paddle

    losses = []
    for xs, ys in zip(paddle.split(x, m), paddle.split(y, m)):
        h = xs
        for b in blocks:
            h = b(h)
        losses.append(loss_fn(h, ys))
    paddle.add_n(losses).backward()
    return [float(v) for v in losses]


def run_grid(configs, steps=2, lr=0.1):
    """For each (schedule, model, n_microbatches, n_chunks): run ``steps`` training steps through
    the pipeline and the reference; return max relative errors (or the setup error)."""
    import paddle.distributed as dist
    import paddle_ext

    dist.init_parallel_env()  # a user's script joins the gloo world and turns paddle-ext on
    paddle_ext.install()

    import paddle
    import paddle.nn.functional as F

    from paddle_ext.errors import ScheduleError
    from paddle_ext.passes.runtime import build_stages, get_schedule, split_model

    rank, p = dist.get_rank(), dist.get_world_size()
    kinds = _models()
    out = []
    for name, model_kind, m, v in configs:
        block_cls, shape = kinds[model_kind]
        n_stages = p * v
        paddle.seed(7)
        ref_blocks = [block_cls() for _ in range(n_stages)]
        paddle.seed(7)
        pipe_blocks = [block_cls() for _ in range(n_stages)]
        result = {"config": (name, model_kind, m, v), "rank": rank}
        try:
            stages = build_stages(split_model(pipe_blocks, n_stages), name, rank, p, n_chunks=v)
            sched = get_schedule(name)(stages, m, loss_fn=F.mse_loss)
        except ScheduleError as exc:
            result["setup_error"] = str(exc)
            out.append(result)
            continue
        mine = sorted(s.stage_index for s in stages)
        errs = _train_and_compare(sched, mine, n_stages, ref_blocks, pipe_blocks, shape, m, steps, lr, seed=100)
        result.update(errs)
        out.append(result)
    return out


def _train_and_compare(sched, mine, n_stages, ref_blocks, pipe_blocks, shape, m, steps, lr, seed,
                       full=lambda t: t.numpy()):
    """Run ``steps`` pipeline steps of ``sched`` and of the single-process reference (SGD, sum of
    the m microbatch MSE losses); the largest relative error of the losses, this rank's gradients
    and its parameters after each update. ``full`` turns a (Dist)Tensor into its global numpy value."""
    import paddle
    import paddle.nn.functional as F

    ref_params = [q for i in mine for q in ref_blocks[i].parameters()]
    pipe_params = [q for i in mine for q in pipe_blocks[i].parameters()]
    ref_opt = paddle.optimizer.SGD(lr, parameters=[q for b in ref_blocks for q in b.parameters()])
    pipe_opt = paddle.optimizer.SGD(lr, parameters=pipe_params)
    errs = {"loss": 0.0, "grad": 0.0, "param": 0.0}
    losses = []
    for step in range(steps):
        x, y = _data(shape, 2 * m, seed=seed + step)
        ref_losses = _reference(ref_blocks, x, y, m, F.mse_loss)
        losses = []
        if 0 in mine and n_stages - 1 in mine:
            sched.step(x, target=y, losses=losses)
        elif 0 in mine:
            sched.step(x)
        elif n_stages - 1 in mine:
            sched.step(target=y, losses=losses)
        else:
            sched.step()
        if losses:
            errs["loss"] = max(errs["loss"], _rel([float(full(v)) for v in losses], ref_losses))
        for a, b in zip(pipe_params, ref_params):
            errs["grad"] = max(errs["grad"], _rel(full(a.grad), b.grad.numpy()))
        ref_opt.step()
        ref_opt.clear_grad()
        pipe_opt.step()
        pipe_opt.clear_grad()
        for a, b in zip(pipe_params, ref_params):
            errs["param"] = max(errs["param"], _rel(full(a), b.numpy()))
    errs["n_losses"] = len(losses)
    errs["dist_params"] = all(q.is_dist() for q in pipe_params)
    return errs


def _full(t):
    """A tensor's global value as numpy (DistTensors are made Replicate first)."""
    import paddle.distributed as dist

    if t.is_dist():
        t = dist.reshard(t, t.process_mesh, [dist.Replicate()] * len(t.placements))
        return t._local_value().numpy()
    return t.numpy()


def run_pp_tp(names, m=4, steps=2, lr=0.1):
    """pp2 x tp2 on 4 ranks: Megatron-style column/row parallel MLP blocks as DistTensors on
    each stage's tp sub-mesh; compare losses, gradients and updated parameters with dense."""
    import paddle.distributed as dist
    import paddle_ext

    dist.init_parallel_env()  # a user's script joins the gloo world and turns paddle-ext on
    paddle_ext.install()

    import paddle
    import paddle.nn as nn
    import paddle.nn.functional as F

    from paddle_ext.passes.runtime import get_schedule, pipeline_group, split_model, stage_indices
    from paddle_ext.passes.schedules import get_schedule_info

    class TPBlock(nn.Layer):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(H, 2 * H), nn.Linear(2 * H, H)

        def forward(self, x):
            return x + self.fc2(F.gelu(self.fc1(x)))

    mesh = dist.ProcessMesh([[0, 1], [2, 3]], dim_names=["pp", "tp"])
    dist.auto_parallel.set_mesh(mesh)
    group = pipeline_group(mesh, "pp")
    rank = dist.get_rank()
    pp_rank = rank // 2
    out = []
    for name in names:
        v = get_schedule_info(name).default_chunks   # 2 for the V and looped schedules, else 1
        n_stages = 2 * v
        paddle.seed(11)
        ref_blocks = [TPBlock() for _ in range(n_stages)]
        paddle.seed(11)
        pipe_blocks = [TPBlock() for _ in range(n_stages)]
        mine = stage_indices(name, pp_rank, 2, v)
        sub = mesh.get_mesh_with_dim("pp", pp_rank)
        for i in mine:
            b = pipe_blocks[i]
            b.fc1.weight = dist.shard_tensor(b.fc1.weight, sub, [dist.Shard(1)])
            b.fc1.bias = dist.shard_tensor(b.fc1.bias, sub, [dist.Shard(0)])
            b.fc2.weight = dist.shard_tensor(b.fc2.weight, sub, [dist.Shard(0)])
            b.fc2.bias = dist.shard_tensor(b.fc2.bias, sub, [dist.Replicate()])
        pieces = split_model(pipe_blocks, n_stages)
        from paddle_ext.compat.ports.pipelining import pipeline_stage_class

        stages = [pipeline_stage_class()(pieces[i], i, n_stages, group=group) for i in mine]
        sched = get_schedule(name)(stages, m, loss_fn=F.mse_loss)
        errs = _train_and_compare(sched, mine, n_stages, ref_blocks, pipe_blocks, [None, H], m, steps, lr,
                                  seed=200, full=_full)
        out.append({"name": name, "rank": rank, **errs})
    return out


def run_bad_inputs():
    """Each bad configuration must raise ScheduleError on every rank (no hang); afterwards a good
    schedule still runs. Returns {case: error text or 'no error'} for this rank."""
    import paddle
    import paddle.distributed as dist
    import paddle.nn.functional as F

    from paddle_ext.compat.ports.pipelining import pipeline_stage_class
    from paddle_ext.errors import ScheduleError
    from paddle_ext.passes.runtime import get_schedule

    Stage = pipeline_stage_class()
    rank = dist.get_rank()
    block_cls, _ = _models()["mlp"]

    def stages_for(indices, n_stages):
        paddle.seed(3)
        blocks = [block_cls() for _ in range(n_stages)]
        return [Stage(blocks[i], i, n_stages) for i in indices]

    def attempt(fn):
        try:
            fn()
        except ScheduleError as exc:
            return str(exc)
        return "no error"

    x, y = _data([None, H], 8, seed=5)
    x6, _ = _data([None, H], 6, seed=5)
    out = {}
    out["split"] = attempt(lambda: get_schedule("1F1B")(stages_for([rank], 3), 4, loss_fn=F.mse_loss))
    out["placement"] = attempt(lambda: get_schedule("VPP")(stages_for([2 * rank, 2 * rank + 1], 4), 4,
                                                           loss_fn=F.mse_loss))
    # ZBV on one stage per rank: a V needs two (VPP's old "multiple of n_ranks" constraint is gone)
    out["constraint_zbv"] = attempt(lambda: get_schedule("ZBV")(stages_for([rank], 2), 4, loss_fn=F.mse_loss))
    out["constraint_dualpipev"] = attempt(lambda: get_schedule("DualPipeV")(stages_for([rank, 3 - rank], 4), 2,
                                                                            loss_fn=F.mse_loss))
    out["mismatch"] = attempt(lambda: get_schedule("1F1B")(stages_for([rank], 2), 4 if rank == 0 else 8,
                                                           loss_fn=F.mse_loss))
    sched = get_schedule("1F1B")(stages_for([rank], 2), 4, loss_fn=F.mse_loss)
    out["batch"] = attempt(lambda: sched.step(x6) if rank == 0 else sched.step(target=y, losses=[]))
    out["target"] = attempt(lambda: sched.step(x) if rank == 0 else sched.step())
    losses = []
    sched.step(x) if rank == 0 else sched.step(target=y, losses=losses)
    out["after"] = [float(v) for v in losses]
    return out


def run_doc_snippet(doc_path):
    """Execute the ```python run``` block of a docs page on this rank; returns 'ok'."""
    import re

    text = open(doc_path, encoding="utf-8").read()
    blocks = re.findall(r"```python run\n(.*?)```", text, flags=re.S)
    for block in blocks:
        exec(compile(block, f"{doc_path}:snippet", "exec"), {"__name__": "__doc_snippet__"})
    return len(blocks)


def run_bad_inputs_and_doc(doc_path):
    """Both in one launch (each launch costs seconds)."""
    import paddle.distributed as dist
    import paddle_ext

    dist.init_parallel_env()  # a user's script joins the gloo world and turns paddle-ext on
    paddle_ext.install()

    return {"bad": run_bad_inputs(), "doc_blocks": run_doc_snippet(doc_path)}
