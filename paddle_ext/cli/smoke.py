"""``paddle-ext smoke``: a short run on N CPU ranks proving the setup works end to end.

Each rank trains a column/row tensor-parallel MLP for a few steps on DistTensors (dygraph,
``shard_tensor`` on the weights) and the parent compares every rank's losses and gradients
with the same model run densely in one process.
"""
from __future__ import annotations

import numpy as np

STEPS = 3


def _data():
    rng = np.random.default_rng(7)
    return (rng.standard_normal((STEPS, 8, 16)).astype("float32"),
            rng.standard_normal((STEPS, 8, 4)).astype("float32"),
            (rng.standard_normal((16, 32)) * 0.2).astype("float32"),
            (rng.standard_normal((32, 4)) * 0.2).astype("float32"))


def _train(w1, w2, xs, ys, shard):
    """SGD on relu(x @ w1) @ w2 with MSE; ``shard`` wraps the weights (identity when dense)."""
    import paddle

    w1 = shard(paddle.to_tensor(w1, stop_gradient=False), 1)
    w2 = shard(paddle.to_tensor(w2, stop_gradient=False), 0)
    losses, grads = [], []
    for x, y in zip(xs, ys):
        out = paddle.matmul(paddle.nn.functional.relu(paddle.matmul(paddle.to_tensor(x), w1)), w2)
        loss = ((out - paddle.to_tensor(y)) ** 2).mean()
        loss.backward()
        losses.append(float(np.asarray(_full(loss)).reshape(-1)[0]))
        grads.append(np.asarray(_full(w1.grad)).copy())
        with paddle.no_grad():
            w1.set_value(w1 - 0.1 * w1.grad)
            w2.set_value(w2 - 0.1 * w2.grad)
        w1.clear_gradient()
        w2.clear_gradient()
    return losses, grads


def _full(t):
    import paddle.distributed as dist

    if getattr(t, "is_dist", lambda: False)():
        return dist.reshard(t, t.process_mesh, [dist.Replicate()]).numpy()
    return t.numpy()


def smoke_rank():
    """Run on every rank: the tensor-parallel MLP on a 1-D mesh of all ranks."""
    import paddle.distributed as dist
    import paddle_ext

    dist.init_parallel_env()  # a user's script joins the gloo world and turns paddle-ext on
    paddle_ext.install()

    mesh = dist.ProcessMesh(list(range(dist.get_world_size())), dim_names=["tp"])
    xs, ys, w1, w2 = _data()
    return _train(w1, w2, xs, ys, lambda t, dim: dist.shard_tensor(t, mesh, [dist.Shard(dim)]))


def dense_reference():
    xs, ys, w1, w2 = _data()
    return _train(w1, w2, xs, ys, lambda t, dim: t)


def run(args) -> int:
    from ..launcher import run_ranks

    results = run_ranks(smoke_rank, nproc=args.nproc, timeout=args.timeout, log_dir=args.log_dir)
    ref_losses, ref_grads = dense_reference()
    worst = 0.0
    print(f"{'step':>4}  {'dense loss':>12}  " + "  ".join(f"{'rank ' + str(r):>12}" for r in range(args.nproc)))
    for step, ref in enumerate(ref_losses):
        row = [res[0][step] for res in results]
        worst = max([worst] + [abs(v - ref) / max(abs(ref), 1e-12) for v in row])
        for res in results:
            g = res[1][step]
            worst = max(worst, float(np.max(np.abs(g - ref_grads[step])) / max(np.max(np.abs(ref_grads[step])), 1e-12)))
        print(f"{step:>4}  {ref:>12.7f}  " + "  ".join(f"{v:>12.7f}" for v in row))
    ok = worst <= 1e-5
    print(f"tensor-parallel MLP on {args.nproc} CPU ranks vs dense: max relative difference "
          f"(losses and gradients) {worst:.2e} -> {'ok' if ok else 'MISMATCH'}")
    return 0 if ok else 1


def register(subparsers) -> None:
    parser = subparsers.add_parser("smoke", help="train a tensor-parallel MLP on N CPU ranks and compare with dense")
    parser.add_argument("--nproc", type=int, default=2, help="number of ranks (default 2)")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds before the run is failed")
    parser.add_argument("--log-dir", default=None, help="keep the ranks' workerlog.N files here")
    parser.set_defaults(func=run)
