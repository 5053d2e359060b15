"""ShardingStage1's gradient reshard (``_ShardOptimizer._fused_comm_before_apply_optimize``) on a
gradient list with a plain parameter's dense gradient beside DistTensor ones, as PaddleNLP
DeepSeek-V2's auto LM head gives on 4 ranks (the real-model matrix's ZeRO-1 row): Paddle alone
fails on it; with the ``stage1-dense-grads`` fix the dense pair comes back as it was, in its
place, and the DistTensor pairs get Paddle's own treatment."""
import types

import paddle
import paddle.distributed as dist
import pytest

from paddle_ext.compat.fixes.table import FIXES


@pytest.fixture
def pairs():
    mesh = dist.ProcessMesh([[0]], dim_names=["dp", "mp"])
    w = dist.shard_tensor(paddle.ones([4, 6]), mesh, [dist.Replicate(), dist.Replicate()])
    g = dist.shard_tensor(paddle.full([4, 6], 2.0), mesh, [dist.Partial(), dist.Replicate()])
    head, head_grad = paddle.ones([6, 3]), paddle.full([6, 3], 3.0)   # a plain parameter
    fix = FIXES["stage1-dense-grads"]
    was = fix.is_applied()
    yield [(w, g), (head, head_grad)]
    (fix.apply if was else fix.revert)()


def _reshard_grads(params_grads):
    from paddle.distributed.auto_parallel import api

    stage1 = types.SimpleNamespace(_sharding_axis=0)   # what the method reads of the optimizer
    return api._ShardOptimizer._fused_comm_before_apply_optimize(stage1, params_grads)


def test_paddle_alone_fails_on_the_dense_gradient(pairs):
    FIXES["stage1-dense-grads"].revert()
    with pytest.raises(AttributeError, match="has no attribute 'shape'"):
        _reshard_grads(pairs)


def test_the_dense_pair_is_kept_in_its_place(pairs):
    FIXES["stage1-dense-grads"].apply()
    out = _reshard_grads(pairs)
    assert len(out) == 2
    assert out[1][0] is pairs[1][0] and out[1][1] is pairs[1][1]
    param, grad = out[0]
    assert param is pairs[0][0] and grad.is_dist() and not any(p.is_partial() for p in grad.placements)
    assert float(grad._local_value().sum()) == 2.0 * 24
