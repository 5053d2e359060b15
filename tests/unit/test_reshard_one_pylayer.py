"""One PyLayer for differentiable reshards (one process, a mesh of rank 0, no launch).

``paddle_ext.reshard`` and dispatch's required input reshards both run through
``reshard/dygraph.py``'s ``differentiable``; the gradient's target placements are its parameter:
the source's own (``x.grad`` keeps ``x``'s placements) or, for dispatch, the source's with a
Partial dim given Replicate. Values are checked against the dense computation.
"""
import numpy as np
import pytest

import paddle
import paddle.distributed as dist

import paddle_ext
from paddle_ext.dispatch import autograd
from paddle_ext.reshard import dygraph

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


def test_paddle_ext_reshard_gives_the_gradient_the_sources_placements():
    assert _grad_of(lambda x, mesh: paddle_ext.reshard(x, mesh, [dist.Replicate()])).is_partial()


def test_dispatch_input_reshard_gives_a_partial_source_a_replicate_gradient():
    from paddle_ext.placements import Replicate
    assert _grad_of(lambda x, mesh: autograd.reshard(x, mesh, [Replicate()], True)).is_replicated()


@pytest.mark.parametrize("replicate_partial", [False, True])
def test_the_gradients_target_is_the_pylayers_parameter(replicate_partial):
    def through_pylayer(x, mesh):
        values = lambda x, mesh: paddle_ext.reshard(x, mesh, [dist.Replicate()])
        return dygraph.differentiable(x, mesh, values, replicate_partial=replicate_partial)

    placement = _grad_of(through_pylayer)
    assert placement.is_replicated() if replicate_partial else placement.is_partial()
