"""The reshard fast path's plan key: equal requests (fresh objects) meet, any difference parts them.

The key is what a repeated ``dist.reshard`` is looked up by (reshard/fast.py); two requests that
need different plans must never share it, or the second would run the first's plan. Every test
runs with the Python key and with the compiled source key (compat/native/fast_key.py, built on
first use), which replaces it once built.
"""
import itertools

import paddle
import paddle.distributed as dist
import pytest

from paddle_ext.compat.native import fast_key
from paddle_ext.compat.ports.fast_tensor import ops
from paddle_ext.reshard import fast


@pytest.fixture(autouse=True, params=["python key", "compiled key"])
def which_key(request):
    fast_key.use(request.param == "compiled key")   # the compiled one builds on first use (~25 s)
    assert (ops().compiled_key[0] is not None) == (request.param == "compiled key")
    yield request.param
    fast_key.use(True)


def _x(shape=(4, 6), mesh_ids=(0, 1), placements=None, dtype="float32", stop_gradient=True, dims=None):
    mesh = dist.ProcessMesh(list(mesh_ids), dim_names=dims or ["x"])
    t = paddle.zeros(list(shape), dtype=dtype)
    t.stop_gradient = stop_gradient
    return dist.shard_tensor(t, mesh, placements or [dist.Replicate()])


def _key(x, mesh_ids=(0, 1), target=None, dims=None):
    mesh = dist.ProcessMesh(list(mesh_ids), dim_names=dims or ["x"])
    return fast._key(ops(), True, x, mesh, target or [dist.Shard(0)])


def test_equal_requests_with_fresh_objects_share_the_key():
    assert _key(_x()) == _key(_x())
    # dim names are labels: the same ranks and shape are the same mesh to a plan
    assert _key(_x(dims=["a"]), dims=["b"]) == _key(_x())


@pytest.mark.parametrize("other", [
    lambda: _key(_x(shape=(6, 4))),                                   # global shape
    lambda: _key(_x(dtype="int32")),                                  # dtype, same item size
    lambda: _key(_x(stop_gradient=False)),                            # a gradient is needed
    lambda: _key(_x(placements=[dist.Shard(1)])),                     # source placements
    lambda: _key(_x(placements=[dist.Partial(dist.ReduceType.kRedSum)])),
    lambda: _key(_x(placements=[dist.Partial(dist.ReduceType.kRedAvg)])),
    lambda: _key(_x(), target=[dist.Shard(1)]),                       # target placements
    lambda: _key(_x(), target=[dist.Shard(0, split_factor=2)]),
    lambda: _key(_x(), target=[dist.Replicate()]),
    lambda: _key(_x(), mesh_ids=(1, 0)),                              # target mesh order
    lambda: _key(_x(mesh_ids=(1, 0)), mesh_ids=(1, 0)),               # both meshes moved
    lambda: _key(_x(mesh_ids=(1, 0))),                                # source mesh differs
], ids=["shape", "dtype", "grad", "src-S1", "src-Psum", "src-Pavg", "dst-S1", "dst-split", "dst-R",
        "dst-mesh", "both-meshes", "src-mesh"])
def test_a_request_that_differs_gets_another_key(other):
    assert other() != _key(_x())


def test_the_compiled_source_key_refuses_what_is_not_a_dist_tensor(which_key):
    if which_key == "compiled key":
        with pytest.raises(TypeError):
            ops().compiled_key[0](paddle.zeros([2]))
    key, entry = fast._lookup(ops(), True, paddle.zeros([2]), dist.ProcessMesh([0, 1]), [dist.Shard(0)])
    assert entry is None   # never a cached runner: the full path names what is wrong
    assert key is None or which_key == "python key"


def test_every_variant_is_distinct_from_every_other():
    variants = [_key(_x(placements=[p]), target=[q])
                for p, q in itertools.product(
                    [dist.Replicate(), dist.Shard(0), dist.Shard(1), dist.Partial(dist.ReduceType.kRedSum),
                     dist.Partial(dist.ReduceType.kRedMax)], [dist.Replicate(), dist.Shard(0), dist.Shard(1)])]
    assert len(set(variants)) == len(variants)
