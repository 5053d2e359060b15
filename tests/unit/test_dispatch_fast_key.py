"""The dispatcher's compiled cache key (paddle_ext.compat.native.fast_key), single process.

Ground truth for "same key" is what a plan depends on, read through Paddle's Python getters:
global shape, placements and mesh (shape, process ids, dim names). The dispatcher must give the
same results with the compiled key and with the Python key, and fall back to the Python key when
the compiled one cannot be built."""
import itertools
import os
import shutil

import numpy as np
import pytest

import paddle  # noqa: E402 - required: a broken install fails here, never skips
dist = paddle.distributed

from paddle_ext.compat.native import cpp_build, fast_key  # noqa: E402
from paddle_ext.errors import CompatError  # noqa: E402
from paddle_ext.placements import DistSpec  # noqa: E402


@pytest.fixture(scope="module")
def compiled():
    fast_key.use(True)   # builds on first use (~25 s), then cached
    yield fast_key.KEY[0]
    fast_key.use(True)


def _truth(t):
    m = t.process_mesh
    return (tuple(t.shape), t._placements_str, tuple(m.shape), tuple(m.process_ids), tuple(m.dim_names))


def _tensors():
    """DistTensors that differ in exactly one of: global shape, placements, mesh shape, dim names;
    plus equal twins built separately (another data, dtype and stop_gradient)."""
    m1 = dist.ProcessMesh([0], dim_names=["x"])
    m1y = dist.ProcessMesh([0], dim_names=["y"])
    m11 = dist.ProcessMesh([[0]], dim_names=["a", "b"])
    out = []
    for shape in ((4, 6), (6, 4), (4, 6, 1)):
        for mesh, pls in ((m1, [dist.Shard(0)]), (m1, [dist.Shard(1)]), (m1, [dist.Replicate()]),
                          (m1, [dist.Partial()]), (m1y, [dist.Shard(0)]),
                          (m11, [dist.Shard(0), dist.Replicate()]), (m11, [dist.Replicate(), dist.Shard(0)]),
                          (m11, [dist.Shard(0), dist.Shard(0)]), (m11, [dist.Shard(0), dist.Shard(1)]),
                          (m11, [dist.Partial(), dist.Shard(1)])):
            out.append(dist.shard_tensor(paddle.ones(shape), mesh, pls))
    twin = dist.shard_tensor(paddle.zeros([4, 6], dtype="float64"), dist.ProcessMesh([0], dim_names=["x"]),
                             [dist.Shard(0)])
    twin.stop_gradient = False
    out.append(twin)
    return out


def test_equal_keys_iff_equal_shape_placements_and_mesh(compiled):
    ts = _tensors()
    truths = [_truth(t) for t in ts]
    assert len(set(truths)) == len(ts) - 1          # every tensor distinct but the one twin
    keys = [compiled([t])[0] for t in ts]
    for (ka, ta), (kb, tb) in itertools.combinations(zip(keys, truths), 2):
        assert (ka == kb) == (ta == tb), (ta, tb)
    # two slots: the pair's key tells order and both tensors apart
    pairs = [(a, b) for a in ts[:6] for b in ts[:6]
             if a.process_mesh.process_ids == b.process_mesh.process_ids
             and list(a.process_mesh.dim_names) == list(b.process_mesh.dim_names)]
    pair_keys = {}
    for a, b in pairs:
        pair_keys.setdefault(compiled([a, b])[0], set()).add((_truth(a), _truth(b)))
    assert all(len(v) == 1 for v in pair_keys.values())


def test_no_grad_flag_and_what_is_not_keyed(compiled):
    mesh = dist.ProcessMesh([0], dim_names=["x"])
    x = dist.shard_tensor(paddle.ones([4, 6]), mesh, [dist.Shard(0)])
    y = dist.shard_tensor(paddle.ones([4, 6]), mesh, [dist.Shard(0)])
    assert compiled([x, y])[1] is True
    y.stop_gradient = False
    assert compiled((x, y))[1] is False                              # a tuple works too
    other = dist.shard_tensor(paddle.ones([4, 6]), dist.ProcessMesh([0], dim_names=["z"]), [dist.Shard(0)])
    for slots in ([x, other], [x, paddle.ones([4, 6])], [x, None], [x, [y]], [], [1.0]):
        assert compiled(slots) is None, slots                        # the general path decides
    assert compiled(x) is None


def _calls(mesh, made):
    """(name, function) pairs covering: no reshard, a reshard, an attribute, a list attribute,
    a Partial output (the PyLayer), each with and without grad. Inputs are appended to ``made``."""
    import paddle_ext.dispatch as pd

    F = paddle.nn.functional
    a = np.arange(24, dtype="float32").reshape(4, 6) / 10

    def mk(arr, pls, grad):
        t = dist.shard_tensor(paddle.to_tensor(arr), mesh, pls)
        t.stop_gradient = not grad
        made.append(t)
        return t

    calls = []
    for g in (False, True):
        calls += [
            (f"add grad={g}", lambda g=g: pd.dispatch(
                "add", [mk(a, [dist.Shard(0)], g), mk(a, [dist.Shard(0)], g)], {}, lambda t, c: t[0] + t[1])),
            (f"softmax grad={g}", lambda g=g: pd.dispatch(
                "softmax", [mk(a, [dist.Shard(0)], g)], {"axis": -1}, lambda t, c: F.softmax(t[0], -1))),
            (f"softmax reshard grad={g}", lambda g=g: pd.dispatch(
                "softmax", [mk(a, [dist.Shard(1)], g)], {"axis": -1}, lambda t, c: F.softmax(t[0], -1))),
            (f"flip list attr grad={g}", lambda g=g: pd.dispatch(
                "flip", [mk(a, [dist.Shard(0)], g)], {"axis": [1]}, lambda t, c: paddle.flip(t[0], [1]))),
            (f"matmul partial out grad={g}", lambda g=g: pd.dispatch(
                "matmul", [mk(a, [dist.Shard(1)], g), mk(a.T.copy(), [dist.Shard(0)], g)], {},
                lambda t, c: paddle.matmul(t[0], t[1]))),
        ]
    return calls


def test_dispatch_agrees_with_either_key(compiled):
    """Same placements, shapes, values and gradients through the Python and the compiled key; each
    call is new to the plan cache the first time under each key form, so both are filled and then hit."""
    from paddle_ext.dispatch import plan_cache

    mesh = dist.ProcessMesh([0], dim_names=["x"])
    results = {}
    for use_compiled in (False, True, False, True):
        fast_key.use(use_compiled)
        assert (fast_key.KEY[0] is not None) == use_compiled
        made = []
        for name, call in _calls(mesh, made):
            del made[:]
            out = call()
            grads = []
            if not out.stop_gradient:
                (out * out).sum().backward()
                grads = [t.grad._local_value().numpy() for t in made]
                assert len(grads) in (1, 2), name
            results.setdefault(name, []).append(
                (str(out.placements), list(out.shape), [out._local_value().numpy()] + grads))
    for name, runs in results.items():
        for run in runs[1:]:
            assert run[:2] == runs[0][:2], name
            assert len(run[2]) == len(runs[0][2]), name
            for got, want in zip(run[2], runs[0][2]):
                np.testing.assert_array_equal(got, want, err_msg=name)
    assert any(p.op == "matmul" for p in plan_cache.cached_plans())


def test_unhashable_attribute_dispatches_uncached(compiled):
    import paddle_ext.dispatch as pd
    from paddle_ext.dispatch import plan_cache
    from paddle_ext.spmd.registry import REGISTRY

    if "key_test_scale" not in REGISTRY.rules:
        @REGISTRY.register("key_test_scale")
        def key_test_scale(x: DistSpec, table: object = None):
            """... -> ..."""
            return "... -> ..."

    mesh = dist.ProcessMesh([0], dim_names=["x"])
    x = dist.shard_tensor(paddle.ones([4, 6]), mesh, [dist.Shard(0)])
    for use_compiled in (False, True):
        fast_key.use(use_compiled)
        before = len(plan_cache.cached_plans())
        out = pd.dispatch("key_test_scale", [x], {"table": [[3.0]]}, lambda t, c: t[0] * 3.0)
        assert str(out.placements) == "[Shard(dim=0)]"
        np.testing.assert_array_equal(out._local_value().numpy(), np.full((4, 6), 3.0, "float32"))
        assert len(plan_cache.cached_plans()) == before   # not cached


_REPLICATED_BY = {3, 2.5, "t", (1, 3), False, 2 ** 70 + 1}


def test_calls_differing_in_one_attribute_value_keep_their_own_plans(compiled):
    """The compiled route remembers the plan cache's answers by op, layout and attribute values:
    calls alternating between two values of one attribute (of each kind the route's memo writes,
    and an int too large for it) get each value's own plan, with and without autograd."""
    import paddle_ext.dispatch as pd
    from paddle_ext.spmd.registry import REGISTRY

    if "key_test_pick" not in REGISTRY.rules:
        @REGISTRY.register("key_test_pick")
        def key_test_pick(x: DistSpec, a: object = None):
            """i j -> i j, or replicated when ``a`` is one of _REPLICATED_BY"""
            return "i j -> i j | replicate: i" if a in _REPLICATED_BY else "i j -> i j"

    fast_key.use(True)
    mesh = dist.ProcessMesh([0], dim_names=["x"])
    x = dist.shard_tensor(paddle.arange(24, dtype="float32").reshape([4, 6]), mesh, [dist.Shard(0)])
    pairs = ((2, 3), (2.0, 2.5), ("s", "t"), ((1, 2), (1, 3)), (None, False), (2 ** 70, 2 ** 70 + 1))
    for grad in (True, False, True):
        x.stop_gradient = not grad
        for first, second in pairs:
            for value in (first, second, first, second):
                out = pd.dispatch("key_test_pick", [x], {"a": value}, lambda t, c: t[0] * 2.0)
                want = "[Replicate()]" if value in _REPLICATED_BY else "[Shard(dim=0)]"
                assert str(out.placements) == want, (value, grad)
                np.testing.assert_array_equal(out._local_value().numpy(), 2 * np.arange(24).reshape(4, 6))


@pytest.fixture
def fresh_state(monkeypatch):
    """fast_key's state as before any call; restored (and the compiled key back) afterwards."""
    saved = dict(fast_key._STATE)
    saved_entries = (fast_key.PLAN_OF[0], fast_key.ROUTE[0])
    fast_key._STATE.clear()
    fast_key._STATE["status"] = "not started"
    fast_key._STATE["route_state"] = saved.get("route_state")   # bound once, at the dispatcher's import
    fast_key.KEY[0] = fast_key.PLAN_OF[0] = fast_key.ROUTE[0] = None
    yield
    fast_key._STATE.clear()
    fast_key._STATE.update(saved)
    fast_key.KEY[0] = saved.get("fn") if not saved.get("python_key") else None
    fast_key.PLAN_OF[0], fast_key.ROUTE[0] = saved_entries


def test_off_by_environment(fresh_state, monkeypatch):
    monkeypatch.setenv("PADDLE_EXT_FAST_KEY", "0")
    assert fast_key.start(wait=True).startswith("off")
    assert fast_key.KEY[0] is None
    with pytest.raises(CompatError, match="not available: off"):
        fast_key.use(True)


def test_build_failure_falls_back_to_python_key(fresh_state, monkeypatch, caplog):
    import paddle_ext.dispatch as pd

    def no_compiler(*args, **kwargs):
        raise CompatError("building paddle-ext's dispatch key failed (no g++)")

    monkeypatch.setattr(cpp_build, "build_and_load", no_compiler)
    assert fast_key.start(wait=True).startswith("unavailable: building paddle-ext's dispatch key failed")
    assert fast_key.KEY[0] is None
    assert "keeps its Python cache key" in caplog.text
    mesh = dist.ProcessMesh([0], dim_names=["x"])
    x = dist.shard_tensor(paddle.ones([4, 6]), mesh, [dist.Shard(0)])
    out = pd.dispatch("add", [x, x], {}, lambda t, c: t[0] + t[1])
    np.testing.assert_array_equal(out._local_value().numpy(), np.full((4, 6), 2.0, "float32"))


class _FakeBuilder:
    """Stands in for the 25 s builder process: copies the library built for this machine."""

    def __init__(self, built, calls):
        self.built, self.calls, self.returncode = built, calls, None

    def __call__(self, kind, log):
        library = cpp_build.paths(kind)[1]
        self.calls.append(library)
        os.makedirs(os.path.dirname(library), exist_ok=True)
        shutil.copy(self.built, library)
        self.returncode = 0
        return self

    def wait(self, timeout=None):
        return 0


def test_a_broken_cached_library_is_rebuilt(compiled, tmp_path, monkeypatch):
    """A library that does not load must not disable the key for good."""
    built = cpp_build.paths("fast_key")[1]
    monkeypatch.setenv("PADDLE_EXT_CACHE", str(tmp_path))
    broken = cpp_build.paths("fast_key")[1]
    assert broken.startswith(str(tmp_path))
    os.makedirs(os.path.dirname(broken))
    with open(broken, "wb") as f:
        f.write(b"\x7fELF cut short")
    calls = []
    monkeypatch.setattr(cpp_build, "_builder", _FakeBuilder(built, calls))
    module = cpp_build.build_and_load("fast_key")
    assert calls == [broken]
    mesh = dist.ProcessMesh([0], dim_names=["x"])
    x = dist.shard_tensor(paddle.ones([4, 6]), mesh, [dist.Shard(0)])
    assert module.fast_key([x]) == compiled([x])


def test_first_use_builds_in_a_detached_process_and_loads_when_done(compiled, fresh_state, tmp_path, monkeypatch):
    """Not built yet: start() returns at once ("building", the Python key serves) and the key is
    loaded when the builder is done."""
    built = cpp_build.paths("fast_key")[1]
    monkeypatch.setenv("PADDLE_EXT_CACHE", str(tmp_path))
    assert not fast_key.is_built()
    release = __import__("threading").Event()
    calls = []
    fake = _FakeBuilder(built, calls)

    def slow_builder(kind, log):
        release.wait(60)
        return fake(kind, log)

    monkeypatch.setattr(cpp_build, "_builder", slow_builder)
    assert fast_key.start() == "building" and fast_key.KEY[0] is None and fast_key.ROUTE[0] is None
    release.set()
    assert fast_key.start(wait=True) == "ready" and fast_key.KEY[0] is not None
    assert fast_key.ROUTE[0] is not None   # checked, and bound to the dispatcher's state
    assert calls == [cpp_build.paths("fast_key")[1]]


def test_the_builder_process_is_detached_and_not_a_harness_rank(monkeypatch, tmp_path):
    """The builder must outlive a rank that ends early, and a test's leftover-process check must
    not take it for one of its ranks."""
    seen = {}

    def fake_popen(cmd, **kwargs):
        seen.update(kwargs, cmd=cmd)
        return object()

    monkeypatch.setenv("PADDLE_EXT_HARNESS_TAG", "some-run")
    monkeypatch.setenv("PADDLE_EXT_CACHE", str(tmp_path))
    monkeypatch.setattr(cpp_build.subprocess, "Popen", fake_popen)
    cpp_build.start_build("fast_key")
    assert seen["cmd"][1:] == ["-m", "paddle_ext.compat.native.cpp_build", "fast_key"]
    assert seen["start_new_session"] is True
    assert "PADDLE_EXT_HARNESS_TAG" not in seen["env"]


def test_a_failed_build_says_what_is_needed(monkeypatch, tmp_path):
    class Failed:
        returncode = 1

        def wait(self, timeout=None):
            return 1

    monkeypatch.setenv("PADDLE_EXT_CACHE", str(tmp_path))
    log = tmp_path / "build.log"
    log.write_text("g++: command not found")
    with pytest.raises(CompatError, match=r"(?s)dispatch key failed \(builder exit 1\); it needs g\+\+.*command not found"):
        cpp_build.wait_build("fast_key", Failed(), str(log))


def test_an_unwritable_cache_leaves_the_python_key(fresh_state, monkeypatch, tmp_path):
    import paddle_ext.dispatch as pd

    blocked = tmp_path / "not_a_dir"
    blocked.write_text("a file where the cache directory should be")
    monkeypatch.setenv("PADDLE_EXT_CACHE", str(blocked))
    status = fast_key.start(wait=True)
    assert status.startswith("unavailable:") and "PADDLE_EXT_CACHE" in status, status
    assert fast_key.KEY[0] is None
    mesh = dist.ProcessMesh([0], dim_names=["x"])
    x = dist.shard_tensor(paddle.ones([4, 6]), mesh, [dist.Shard(0)])
    np.testing.assert_array_equal(pd.dispatch("add", [x, x], {}, lambda t, c: t[0] + t[1])._local_value().numpy(),
                                  np.full((4, 6), 2.0, "float32"))
