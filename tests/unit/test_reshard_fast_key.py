"""The reshard fast path's plan key: equal requests (fresh objects) meet, any difference parts them.

The key is what a repeated ``dist.reshard`` is looked up by (reshard/fast.py); two requests that
need different plans must never share it, or the second would run the first's plan. Every test
runs with the Python key and with the compiled request key (compat/native/fast_key.py, built on
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
    return fast._key(ops(), True, x, mesh, target or [dist.Shard(0)], None)


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


def test_the_compiled_key_refuses_what_is_not_a_dist_tensor(which_key):
    if which_key == "compiled key":
        with pytest.raises(TypeError):
            ops().compiled_key[0](paddle.zeros([2]), dist.ProcessMesh([0, 1]), [dist.Shard(0)])
    key, entry = fast._lookup(ops(), True, paddle.zeros([2]), dist.ProcessMesh([0, 1]), [dist.Shard(0)])
    assert entry is None   # never a cached runner: the full path names what is wrong
    assert key is None or which_key == "python key"


def test_every_variant_is_distinct_from_every_other():
    variants = [_key(_x(placements=[p]), target=[q])
                for p, q in itertools.product(
                    [dist.Replicate(), dist.Shard(0), dist.Shard(1), dist.Partial(dist.ReduceType.kRedSum),
                     dist.Partial(dist.ReduceType.kRedMax)],
                    [dist.Replicate(), dist.Shard(0), dist.Shard(1), dist.Partial(dist.ReduceType.kRedSum),
                     dist.Partial(dist.ReduceType.kRedMax), dist.Partial(dist.ReduceType.kRedAvg)])]
    assert len(set(variants)) == len(variants)


def test_a_2d_target_is_read_dim_by_dim():
    x = _x(mesh_ids=(0, 1, 2, 3))
    two_d = dist.ProcessMesh([[0, 1], [2, 3]], dim_names=["a", "b"])
    flat = dist.ProcessMesh([[0, 1, 2, 3]], dim_names=["a", "b"])
    keys = [fast._key(ops(), True, x, m, t, None) for m in (two_d, flat)
            for t in ([dist.Shard(0), dist.Replicate()], [dist.Replicate(), dist.Shard(0)],
                      [dist.Shard(0), dist.Shard(1)])]
    assert len(set(keys)) == len(keys)
    assert fast._key(ops(), True, x, two_d, (dist.Shard(0), dist.Replicate()), None) == keys[0]   # a tuple or a list


def test_grad_off_parts_the_key_of_a_tensor_that_needs_one():
    x = _x(stop_gradient=False)
    with paddle.no_grad():
        off = _key(x)
    assert off != _key(x)


def test_a_target_the_compiled_key_cannot_read_takes_the_python_key(which_key):
    x = _x()
    mesh = dist.ProcessMesh([0, 1], dim_names=["x"])
    if which_key == "compiled key":
        assert ops().compiled_key[0](x, mesh, [dist.Shard(0)]) is not None
        assert ops().compiled_key[0](x, mesh, ["S(0)"]) is None
        assert ops().compiled_key[0](x, "mesh", [dist.Shard(0)]) is None
    key = fast._key(ops(), True, x, mesh, ["S(0)"], None)
    assert isinstance(key[1], tuple) and key != _key(x)   # the Python key; the full path names the error


def test_a_module_that_misreads_the_target_is_not_used(caplog):
    class Misreads:
        def set_target_types(self, *classes):
            pass

        def target_key(self, mesh, placements):
            return b"\0" * 8

    assert fast_key._target_types(Misreads()) is False
    assert "keeps its Python key" in caplog.text


def test_an_installed_call_caches_under_the_key_that_names_its_request():
    """``dist.reshard`` after ``install()`` builds its key inline (no process group here: one
    process); the entry it caches is found under :func:`fast._key` of the same request."""
    from paddle_ext.reshard.install import install_reshard, uninstall_reshard

    fresh = install_reshard()
    try:
        mesh = dist.ProcessMesh([0], dim_names=["x"])
        x = dist.shard_tensor(paddle.arange(8, dtype="float32").reshape([4, 2]), mesh, [dist.Replicate()])
        y = dist.reshard(x, mesh, [dist.Shard(0)])
        assert y.placements == [dist.Shard(0)]
        assert fast._key(ops(), True, x, mesh, [dist.Shard(0)], None) in fast._CACHE
        assert fast._key(ops(), True, x, mesh, [dist.Shard(1)], None) not in fast._CACHE
    finally:
        if fresh:
            uninstall_reshard()


def test_the_compiled_mesh_compare_answers_as_paddles(which_key):
    """The no-process-group hand-back compares meshes in C++ from the DistTensor itself; it must
    answer as Paddle's ``ProcessMesh ==`` (ranks and shape; dim names are labels)."""
    same = fast_key.SAME_MESH[0]
    if which_key == "python key":
        assert same is None
        return
    x = _x(mesh_ids=(0, 1))
    for other in (dist.ProcessMesh([0, 1], dim_names=["y"]), dist.ProcessMesh([1, 0], dim_names=["x"]),
                  dist.ProcessMesh([[0, 1]], dim_names=["a", "b"]), dist.ProcessMesh([0], dim_names=["x"]),
                  x.process_mesh):
        assert same(x, other) is (x.process_mesh == other)
    assert same(paddle.zeros([2]), x.process_mesh) is False   # not a DistTensor
    assert same(x, [0, 1]) is None                            # not a mesh: the caller compares in Python
