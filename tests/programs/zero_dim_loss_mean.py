"""A user's program: a dygraph step whose scalar loss is averaged once more (``loss.mean()``).

Run as ``python zero_dim_loss_mean.py MODE`` (``alone``, ``install`` or ``enable``); one process,
a one-rank mesh; prints ``LOSSES [...]``.
"""
import sys

import numpy as np
import paddle
import paddle.distributed as dist

mode = sys.argv[1]
if mode != "alone":
    import paddle_ext

    paddle_ext.install()
    if mode == "enable":
        paddle_ext.enable()

paddle.seed(3)
mesh = dist.ProcessMesh([0], dim_names=["mp"])
layer = paddle.nn.Linear(6, 3)
layer.weight = dist.shard_tensor(layer.weight, mesh, [dist.Shard(1)])
opt = paddle.optimizer.SGD(0.05, parameters=layer.parameters())
rng = np.random.default_rng(0)
losses = []
for _ in range(3):
    x = dist.shard_tensor(paddle.to_tensor(rng.standard_normal((4, 6)).astype("float32")), mesh, [dist.Replicate()])
    labels = paddle.to_tensor(rng.integers(0, 3, (4,)).astype("int64"))
    loss = paddle.nn.functional.cross_entropy(layer(x), dist.shard_tensor(labels, mesh, [dist.Replicate()]))
    loss = paddle.mean(loss)          # the loss is already 0-D: its mean is itself
    loss.backward()
    opt.step()
    opt.clear_grad()
    losses.append(float(loss))
print("LOSSES", losses)
