"""A user's program: dist.to_static training whose loss has a data-dependent (-1) shape.

``masked_select`` keeps the entries where the target is positive, so the loss's input has shape
``[-1]`` in the static program. Run as ``python to_static_dynamic_loss.py MODE`` with MODE
``alone`` (Paddle only), ``install`` or ``enable``; it prints one line ``LOSSES [...]``.
One process, a one-rank mesh, no ``init_parallel_env``: the state such a script runs in.
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


class Net(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc1 = paddle.nn.Linear(8, 16)
        self.fc2 = paddle.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(paddle.nn.functional.gelu(self.fc1(x)))


def loss_fn(out, y):
    picked = paddle.masked_select(out - y, y > 0)
    return paddle.mean(picked * picked) + 0.1 * paddle.mean(out)


class Data(paddle.io.Dataset):
    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        return rng.standard_normal(8).astype("float32"), rng.standard_normal(4).astype("float32")

    def __len__(self):
        return 24


paddle.seed(7)
mesh = dist.ProcessMesh([0], dim_names=["dp"])
net = Net()
for layer in (net.fc1, net.fc2):
    layer.weight = dist.shard_tensor(layer.weight, mesh, [dist.Replicate()])
opt = paddle.optimizer.SGD(0.1, parameters=net.parameters())
loader = dist.shard_dataloader(paddle.io.DataLoader(Data(), batch_size=4), meshes=[mesh])
model = dist.to_static(net, loader, loss_fn, opt)
model.train()
losses = [float(np.asarray(model(x, y)).reshape(-1)[0]) for x, y in loader()]
print("LOSSES", losses)
