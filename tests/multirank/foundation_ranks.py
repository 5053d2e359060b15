"""Rank functions for the Foundation multi-rank tests (run through paddle_ext.testing.run_ranks)."""
import os
import time

import numpy as np


def allreduce_rank_sum(extra):
    import paddle.distributed as dist

    dist.init_parallel_env()  # a user's script joins the gloo world

    import paddle

    t = paddle.to_tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    return {"rank": dist.get_rank(), "sum": t.item(), "extra": extra}


def raise_on_rank(bad_rank):
    import paddle.distributed as dist

    dist.init_parallel_env()  # a user's script joins the gloo world

    import paddle

    if dist.get_rank() == bad_rank:
        raise ValueError(f"injected failure on rank {bad_rank}")
    t = paddle.to_tensor([1.0])
    dist.all_reduce(t)  # the healthy ranks wait here for the failed one
    return dist.get_rank()


def hang_on_rank(bad_rank, pid_dir):
    import paddle.distributed as dist

    open(os.path.join(pid_dir, f"{os.getpid()}.pid"), "w").close()
    if dist.get_rank() == bad_rank:
        time.sleep(3600)
    return dist.get_rank()


def process_state():
    """What the harness left in this rank's process: nothing a user's script would not have."""
    import paddle
    import paddle.distributed as dist

    return {"initialized": dist.is_initialized(),
            "reshard_is_paddles": dist.reshard is paddle.distributed.auto_parallel.api.reshard,
            "paddle_ext_imported": any(m == "paddle_ext" or m.startswith("paddle_ext.")
                                       for m in __import__("sys").modules),
            "rank": dist.get_rank(), "world": dist.get_world_size()}


def cpu_affinity():
    """The CPUs this rank's main thread, and a thread Paddle's import started after it, may run on."""
    import os
    import threading

    main = sorted(os.sched_getaffinity(0))
    import paddle  # noqa: F401 - a library imported after the harness pinned (or did not pin) the rank

    seen = {}
    t = threading.Thread(target=lambda: seen.setdefault("thread", sorted(os.sched_getaffinity(0))))
    t.start()
    t.join()
    return {"rank": int(os.environ["PADDLE_TRAINER_ID"]), "main": main, "thread": seen["thread"]}


def exit_badly(how, bad_rank):
    """Return normally, then make interpreter teardown on ``bad_rank`` hang, fail or crash."""
    import atexit
    import paddle.distributed as dist

    rank = dist.get_rank()
    if rank == bad_rank:
        if how == "hang":
            atexit.register(time.sleep, 3600)
        elif how == "segfault":
            import ctypes

            atexit.register(ctypes.string_at, 0)   # reads address 0: SIGSEGV in teardown
        else:
            atexit.register(os._exit, 3)
    return rank


def note_teardown_times(out_dir):
    """Join the gloo world (rank 0 hosts Paddle's TCP store), return, and in teardown write when
    this rank's Python teardown began (rank 0) or ended (rank 1, after a 1 s delay)."""
    import atexit
    import paddle.distributed as dist

    dist.init_parallel_env()
    rank = dist.get_rank()

    def note():
        with open(os.path.join(out_dir, f"teardown.{rank}"), "w") as f:
            f.write(repr(time.time()))

    atexit.register(note)   # atexit runs last-in first: rank 1 sleeps, then notes
    if rank == 1:
        atexit.register(time.sleep, 1.0)
    return rank


def local_shards_of_shard_tensor(cases):
    """For each (shape, mesh_shape, placements text): this rank's local shape and values.

    Returns a list of ("ok", local ndarray) or ("error", message) per case.
    """
    import paddle
    import paddle.distributed as dist

    from paddle_ext.compat import to_paddle_placements

    out = []
    for shape, mesh_shape, text in cases:
        n = int(np.prod(mesh_shape))
        mesh = dist.ProcessMesh(np.arange(n).reshape(mesh_shape).tolist())
        dense = paddle.to_tensor(np.arange(np.prod(shape), dtype="float32").reshape(shape))
        try:
            x = dist.shard_tensor(dense, mesh, to_paddle_placements(text))
            out.append(("ok", x._local_value().numpy()))
        except Exception as exc:  # noqa: BLE001 - Paddle's own failure is the measurement
            out.append(("error", f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"))
    return out


def _tp_mlp_losses(steps):
    """Train a 2-layer MLP with column/row tensor parallelism under dist.to_static on 2 ranks."""
    import paddle
    import paddle.distributed as dist

    paddle.seed(1234)
    np.random.seed(1234)
    mesh = dist.ProcessMesh([0, 1], dim_names=["x"])

    class MLP(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.fc1 = paddle.nn.Linear(8, 16)
            self.fc2 = paddle.nn.Linear(16, 4)
            self.fc1.weight = dist.shard_tensor(self.fc1.weight, mesh, [dist.Shard(1)])
            self.fc1.bias = dist.shard_tensor(self.fc1.bias, mesh, [dist.Shard(0)])
            self.fc2.weight = dist.shard_tensor(self.fc2.weight, mesh, [dist.Shard(0)])

        def forward(self, x):
            return self.fc2(paddle.nn.functional.relu(self.fc1(x)))

    class Data(paddle.io.Dataset):
        def __init__(self):
            rng = np.random.default_rng(0)
            self.x = rng.standard_normal((16, 8)).astype("float32")
            self.y = rng.standard_normal((16, 4)).astype("float32")

        def __getitem__(self, i):
            return self.x[i], self.y[i]

        def __len__(self):
            return len(self.x)

    model = MLP()
    opt = paddle.optimizer.SGD(0.1, parameters=model.parameters())
    return to_static_losses(model, opt, Data(), 4, mesh, steps)


def to_static_losses(model, opt, dataset, batch_size, mesh, steps):
    """Train ``model`` with ``dist.to_static`` and MSE for ``steps`` batches of ``dataset``; the
    loss of each step (None on ranks that do not hold the loss)."""
    import paddle
    import paddle.distributed as dist

    loader = paddle.io.DataLoader(dataset, batch_size=batch_size, shuffle=False)
    dist_loader = dist.shard_dataloader(loader, meshes=[mesh])
    dm = dist.to_static(model, dist_loader, paddle.nn.MSELoss(), opt)
    dm.train()
    losses = []
    for step, (x, y) in enumerate(dist_loader()):
        if step >= steps:
            break
        loss = dm(x, y)
        losses.append(None if loss is None else float(np.asarray(loss).reshape(-1)[0]))
    return losses


def static_engine_with_fixes(fix_names, steps):
    """TP training under dist.to_static with only ``fix_names`` applied (nothing else installed).

    Returns ("ok", losses) or ("error", message): a failed Engine build cannot be retried in the
    same process (Paddle segfaults in dialect::parameter), so each fix set needs its own launch.
    """
    import paddle.distributed as dist

    dist.init_parallel_env()  # a user's script joins the gloo world

    from paddle_ext.compat import FIXES

    for name in fix_names:
        FIXES[name].apply()
    try:
        return ("ok", _tp_mlp_losses(steps))
    except Exception as exc:  # noqa: BLE001 - the failure is what this run measures
        return ("error", f"{type(exc).__name__}: {exc}")


def dense_mlp_losses(steps):
    """The single-process reference for _tp_mlp_losses: same seed, same data, dense layers."""
    import paddle

    paddle.seed(1234)
    fc1, fc2 = paddle.nn.Linear(8, 16), paddle.nn.Linear(16, 4)
    params = fc1.parameters() + fc2.parameters()
    opt = paddle.optimizer.SGD(0.1, parameters=params)
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((16, 8)).astype("float32")
    ys = rng.standard_normal((16, 4)).astype("float32")
    losses = []
    for step in range(steps):
        x = paddle.to_tensor(xs[step * 4:(step + 1) * 4])
        y = paddle.to_tensor(ys[step * 4:(step + 1) * 4])
        loss = paddle.nn.functional.mse_loss(fc2(paddle.nn.functional.relu(fc1(x))), y)
        loss.backward()
        opt.step()
        opt.clear_grad()
        losses.append(float(loss.numpy()))
    return losses
