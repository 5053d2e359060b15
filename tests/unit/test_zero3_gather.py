"""ZeRO-3 (``dist.ShardingStage3``) on a dp x mp mesh in dygraph, one process: from the second step
Paddle's ``linear`` SPMD rule refuses the bias ShardingStage3 sharded on "dp" while the weight's
output axis is on "mp". The ``zero3-gather-on-conflict`` fix gathers it and the run matches the
dense model, losses and parameters. (The same plan on 4 ranks with PaddleNLP's GPT and Qwen is in
the real-model matrix, docs/compatibility.md.)"""
import numpy as np
import paddle
import paddle.distributed as dist
import pytest

from paddle_ext.compat.fixes.table import FIXES

STEPS = 3


class _Net(paddle.nn.Layer):
    """ids [b, s] -> embedding [b, s, h] -> linear (column-parallel on "mp") -> mean."""

    def __init__(self, mesh=None):
        super().__init__()
        paddle.seed(7)
        self.emb = paddle.nn.Embedding(16, 8)
        self.fc = paddle.nn.Linear(8, 8)
        if mesh is not None:
            self.fc.weight = dist.shard_tensor(self.fc.weight, mesh, [dist.Replicate(), dist.Shard(1)])

    def forward(self, ids):
        return self.fc(self.emb(ids)).mean()


IDS = (np.arange(8).reshape(4, 2) * 3) % 16


def _train(mesh):
    net = _Net(mesh)
    opt = paddle.optimizer.AdamW(0.1, parameters=net.parameters())
    ids = paddle.to_tensor(IDS)
    if mesh is not None:
        opt = dist.shard_optimizer(opt, dist.ShardingStage3("dp"))
        ids = dist.shard_tensor(ids, mesh, [dist.Shard(0), dist.Replicate()])
    losses = []
    for _ in range(STEPS):
        loss = net(ids)
        loss.backward()
        opt.step()
        opt.clear_grad()
        losses.append(float(loss))
    params = {}
    for name, p in net.named_parameters():
        local = dist.reshard(p, p.process_mesh, [dist.Replicate()] * 2) if p.is_dist() else p
        params[name] = (local._local_value() if local.is_dist() else local).numpy()
    return losses, params


@pytest.fixture
def mesh():
    mesh = dist.ProcessMesh([[0]], dim_names=["dp", "mp"])
    dist.auto_parallel.set_mesh(mesh)   # ShardingStage3("dp") finds its dim on the global mesh
    fix = FIXES["zero3-gather-on-conflict"]
    was = fix.is_applied()
    yield mesh, fix
    dist.auto_parallel.set_mesh(None)
    (fix.apply if was else fix.revert)()


def test_paddle_alone_refuses_the_second_step(mesh):
    mesh, fix = mesh
    fix.revert()
    with pytest.raises(Exception, match=r"Sharded by two different mesh dimension"):
        _train(mesh)


def test_gathered_on_conflict_matches_dense(mesh):
    mesh, fix = mesh
    fix.apply()
    dense_losses, dense_params = _train(None)
    losses, params = _train(mesh)
    np.testing.assert_allclose(losses, dense_losses, rtol=1e-6)
    assert params.keys() == dense_params.keys()
    for name in params:   # every update (so every gradient) was the dense one
        np.testing.assert_allclose(params[name], dense_params[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_other_errors_go_to_the_caller_unchanged(mesh):
    mesh, fix = mesh
    fix.apply()
    _train(mesh)   # a ShardingStage3 optimizer exists: the ops are wrapped now
    with pytest.raises(ValueError) as paddle_error:
        paddle.nn.functional.linear(paddle.ones([2, 3]), paddle.ones([4, 5]))
    assert "spmd" not in str(paddle_error.value)
