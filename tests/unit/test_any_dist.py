"""``any_dist`` (the test a patched Paddle function and the dispatcher run on every call's
arguments) answers what ``any(is_dist(v) for v in values)`` answers, single process."""
import numpy as np

import paddle  # noqa: E402 - required: a broken install fails here, never skips
dist = paddle.distributed

from paddle_ext.compat.ports.dispatch import any_dist, is_dist  # noqa: E402
from paddle_ext.dispatch.core import has_dist  # noqa: E402


def _values():
    mesh = dist.ProcessMesh([0], dim_names=["x"])
    dense = paddle.ones([2, 3])
    sharded = dist.shard_tensor(paddle.ones([2, 3]), mesh, [dist.Shard(0)])
    param = paddle.create_parameter([2, 3], "float32")
    dist_param = dist.shard_tensor(paddle.create_parameter([2, 3], "float32"), mesh, [dist.Replicate()])
    return [dense, sharded, param, dist_param, 1, 2.0, True, "s", None, [sharded], (sharded,),
            {"x": sharded}, np.ones(2)]


def test_any_dist_is_any_of_is_dist_on_every_pair():
    values = _values()
    assert [is_dist(v) for v in values] == [False, True, False, True] + [False] * 9
    for a in values:
        for b in values:
            assert any_dist([a, b]) == any(is_dist(v) for v in (a, b)), (type(a), type(b))
    assert not any_dist([]) and not any_dist(iter(()))


def test_has_dist_looks_one_level_into_lists():
    dense, sharded = _values()[:2]
    assert has_dist([dense, [dense, sharded]]) and has_dist([(sharded,)]) and has_dist([None, sharded])
    assert not has_dist([dense, [dense], None, (dense,)])
    assert not has_dist([[[sharded]]])   # one level, as the slots of a rule are

    class Pair(list):
        pass

    assert has_dist([dense, Pair([dense, sharded])]) and not has_dist([Pair([dense])])   # a list subclass too
