"""One PyLayer for differentiable reshards (one process, a mesh of rank 0, no launch).

``paddle_ext.reshard`` and dispatch's required input reshards both run through
``reshard/dygraph.py``'s ``differentiable``, whose backward gives the gradient the source's
placements with a Partial dim given Replicate, as Paddle's own reshard does (checked here too).
Values are checked against the dense computation.
"""
import numpy as np
import pytest

import paddle
import paddle.distributed as dist

import paddle_ext
from paddle_ext.dispatch import autograd

DENSE = np.arange(12, dtype="float32").reshape(3, 4)


def _partial_source():
    mesh = dist.ProcessMesh([0], dim_names=["x"])
    x = dist.shard_tensor(paddle.to_tensor(DENSE), mesh, [dist.Partial()])
    x.stop_gradient = False
    return x, mesh


def _grad_of(reshard):
    x, mesh = _partial_source()
    y = reshard(x, mesh)
    assert np.array_equal(y._local_value().numpy(), DENSE) and y.placements[0].is_replicated()
    (y * 3).sum().backward()
    assert np.array_equal(x.grad._local_value().numpy(), np.full_like(DENSE, 3))   # d(3 * sum)/dx
    return x.grad.placements[0]


@pytest.fixture(autouse=True)
def one_process():
    assert not dist.is_initialized() and dist.get_world_size() == 1


def test_paddle_ext_reshard_gives_a_partial_source_a_replicate_gradient():
    # as Paddle's own reshard does: the producer of a partial value needs its whole gradient
    assert _grad_of(lambda x, mesh: paddle_ext.reshard(x, mesh, [dist.Replicate()])).is_replicated()


def test_paddle_alone_gives_a_partial_source_a_replicate_gradient():
    # the reference the test above follows: Paddle's own dist.reshard, paddle-ext not involved
    from paddle_ext.reshard.route import original_reshard
    assert _grad_of(lambda x, mesh: original_reshard()(x, mesh, [dist.Replicate()])).is_replicated()


def test_dispatch_input_reshard_gives_a_partial_source_a_replicate_gradient():
    from paddle_ext.placements import Replicate
    assert _grad_of(lambda x, mesh: autograd.reshard(x, mesh, [Replicate()], True)).is_replicated()

