"""``stage1-dense-grads``: ShardingStage1 with a parameter that is not a DistTensor.

In dygraph, ``dist.shard_optimizer(opt, dist.ShardingStage1(...))`` reshards each gradient before
the update (``_ShardOptimizer._fused_comm_before_apply_optimize``) and reads every gradient's
``process_mesh``. A model may keep a plain parameter beside its DistTensors (PaddleNLP
DeepSeek-V2's auto LM head is created with ``create_parameter`` and never sharded); its gradient
is a dense tensor, and Paddle 3.3.1 stops with "AttributeError: 'NoneType' object has no
attribute 'shape'". The fix hands Paddle only the DistTensor gradients and keeps a dense one as
it is, in its place (there is nothing to reshard on a dense tensor). A list of DistTensor
gradients goes to Paddle unchanged.

Importing this module imports no Paddle.
"""
from __future__ import annotations

from ..ports.backend import note_once
from ..version import require_paddle


def _api():
    return require_paddle("fix stage1-dense-grads").distributed.auto_parallel.api


def split_dense(params_grads: list) -> tuple[list, set]:
    """(the pairs whose gradient is a DistTensor or None, the indices of dense gradients)."""
    dense = {i for i, (_, g) in enumerate(params_grads) if g is not None and not g.is_dist()}
    return [pg for i, pg in enumerate(params_grads) if i not in dense], dense


def apply():
    api = _api()
    original = api._ShardOptimizer._fused_comm_before_apply_optimize

    def fused_comm(self, params_grads):
        kept, dense = split_dense(params_grads)
        if not dense:
            return original(self, params_grads)
        note_once("stage1-dense-grads", f"ShardingStage1: {len(dense)} parameter(s) are not DistTensors "
                  f"({params_grads[min(dense)][0].name}, ...); their gradients are kept as they are")
        done = iter(original(self, kept))
        return [params_grads[i] if i in dense else next(done) for i in range(len(params_grads))]

    fused_comm.__wrapped__ = original
    api._ShardOptimizer._fused_comm_before_apply_optimize = fused_comm
    return [(api._ShardOptimizer, "_fused_comm_before_apply_optimize", original)]


def needed() -> bool:
    """Paddle's ``_ShardOptimizer`` has the ShardingStage1 gradient reshard (Paddle 3.3.x)."""
    return hasattr(_api()._ShardOptimizer, "_fused_comm_before_apply_optimize")
