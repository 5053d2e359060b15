"""Op scenarios of Paddle's ``test/auto_parallel`` (semi_auto_parallel_for_<op>.py,
semi_auto_parallel_simple_net.py, semi_auto_parallel_recompute.py), re-written: 2 ranks on mesh
[0,1], no ``dist.init_parallel_env()`` (as those files), forward and backward against dense.
"""
from __future__ import annotations

import numpy as np

from scenario_ranks import Scenario, rec


def _rand(shape, seed, dtype="float32"):
    rng = np.random.default_rng(seed)
    if dtype == "int64":
        return rng.integers(0, 16, size=shape).astype("int64")
    return rng.standard_normal(shape).astype(dtype)


def _op_case(fn, specs, backward=True):
    """``specs``: [(numpy value, placements spec or None for a dense tensor)]. Runs ``fn`` on
    DistTensors and on dense tensors; outputs: out, and each float input's grad."""
    import paddle
    import paddle.distributed as dist

    paddle.set_device("cpu")
    mesh = dist.ProcessMesh([0, 1], dim_names=["x"])

    def place(spec):
        return [dist.Replicate() if s == "R" else dist.Partial() if s == "P" else dist.Shard(int(s[1:]))
                for s in spec]

    dist_in, dense_in = [], []
    for value, spec in specs:
        grad = backward and value.dtype.kind == "f"
        d = paddle.to_tensor(value, stop_gradient=not grad)
        t = dist.shard_tensor(paddle.to_tensor(value), mesh, place(spec)) if spec else paddle.to_tensor(value)
        t.stop_gradient = not grad
        dist_in.append(t)
        dense_in.append(d)
    outs, want = {}, {}
    for label, ins in (("dist", dist_in), ("dense", dense_in)):
        out = fn(*ins)
        if isinstance(out, (list, tuple)):
            out = out[0]
        if backward:
            (out.astype("float32") * out.astype("float32")).sum().backward()
        target = outs if label == "dist" else want
        target["out"] = rec(out) if label == "dist" else out.numpy()
        for i, t in enumerate(ins):
            if not t.stop_gradient:
                target[f"grad{i}"] = rec(t.grad) if label == "dist" else t.grad.numpy()
    return outs, want


SIZE = 64  # the files use 784; the scenario is the same at a size that runs in a second


def simple_net(kind):
    """semi_auto_parallel_simple_net.py: two matmuls + MSE, dp (input S0) / mp (w0 S1, w1 S0) /
    recompute (mp, inner forward under fleet.utils.recompute); loss and weight grads."""
    import paddle
    import paddle.distributed as dist
    from paddle.distributed.fleet.utils import recompute

    paddle.set_device("cpu")
    mesh = dist.ProcessMesh([0, 1], dim_names=["x"])
    image, label = _rand([16, SIZE], 1), _rand([16, 10], 2)
    w0, w1 = _rand([SIZE, SIZE], 3) * 0.1, _rand([SIZE, 10], 4) * 0.1

    class Net(paddle.nn.Layer):
        def __init__(self, dist_mode):
            super().__init__()
            init = paddle.nn.initializer.Assign
            self.w0 = self.create_parameter([SIZE, SIZE], default_initializer=init(w0))
            self.w1 = self.create_parameter([SIZE, 10], default_initializer=init(w1))
            if dist_mode in ("mp", "recompute"):
                self.w0 = dist.shard_tensor(self.w0, mesh, [dist.Shard(1)])
                self.w1 = dist.shard_tensor(self.w1, mesh, [dist.Shard(0)])
            self.dist_mode = dist_mode

        def body(self, x):
            return paddle.matmul(paddle.matmul(x, self.w0), self.w1)

        def forward(self, x):
            if self.dist_mode == "dp":
                x = dist.shard_tensor(x, mesh, [dist.Shard(0)])
            return recompute(self.body, x) if self.dist_mode == "recompute" else self.body(x)

    def run(dist_mode):
        net = Net(dist_mode)
        # recompute's PyLayer needs an input that requires grad, or no grad flows to the weights
        x = paddle.to_tensor(image, stop_gradient=dist_mode != "recompute")
        loss = paddle.nn.MSELoss()(net(x), paddle.to_tensor(label))
        loss.backward()
        return loss, net.w0.grad, net.w1.grad

    loss, g0, g1 = run(kind)
    dl, dg0, dg1 = run(None)
    return ({"loss": rec(loss), "w0.grad": rec(g0), "w1.grad": rec(g1)},
            {"loss": dl.numpy(), "w0.grad": dg0.numpy(), "w1.grad": dg1.numpy()})


def _ops():
    import paddle
    import paddle.nn.functional as F

    x86, x86b, x8_6_4 = _rand([8, 6], 10), _rand([8, 6], 11), _rand([8, 6, 4], 12)
    w64 = _rand([6, 4], 13)
    cases = {
        "matmul[x S0, y R]": (lambda x, y: paddle.matmul(x, y), [(x86, ["S0"]), (w64, ["R"])]),
        "matmul[x S1, y S0 -> partial]": (lambda x, y: paddle.matmul(x, y), [(x86, ["S1"]), (w64, ["S0"])]),
        "matmul[x R, y S1]": (lambda x, y: paddle.matmul(x, y), [(x86, ["R"]), (w64, ["S1"])]),
        "elementwise[add S0+S0]": (lambda a, b: a + b, [(x86, ["S0"]), (x86b, ["S0"])]),
        "elementwise[multiply S0*R]": (lambda a, b: a * b, [(x86, ["S0"]), (x86b, ["R"])]),
        "elementwise[unary gelu S1]": (F.gelu, [(x86, ["S1"])]),
        "softmax[axis -1, S0]": (lambda x: F.softmax(x, axis=-1), [(x86, ["S0"])]),
        "softmax[axis 0 (sharded), S0]": (lambda x: F.softmax(x, axis=0), [(x86, ["S0"])]),
        "layernorm[S0]": (lambda x: F.layer_norm(x, [4]), [(x8_6_4, ["S0"])]),
        "reduction[sum axis 0, S0]": (lambda x: paddle.sum(x, axis=0), [(x86, ["S0"])]),
        "reduction[mean axis 1, S0]": (lambda x: paddle.mean(x, axis=1), [(x86, ["S0"])]),
        "reduction[max axis 1, S0]": (lambda x: paddle.max(x, axis=1), [(x86, ["S0"])]),
        "concat[axis 1, S0]": (lambda a, b: paddle.concat([a, b], axis=1), [(x86, ["S0"]), (x86b, ["S0"])]),
        "split[axis 1, S0]": (lambda x: paddle.split(x, 2, axis=1)[1], [(x86, ["S0"])]),
        "reshape[S0]": (lambda x: paddle.reshape(x, [8, 24]), [(x8_6_4, ["S0"])]),
        "transpose[S0]": (lambda x: paddle.transpose(x, [1, 0, 2]), [(x8_6_4, ["S0"])]),
        "embedding[ids S0, W R]": (lambda i, w: F.embedding(i, w), [(_rand([8, 3], 14, "int64"), ["S0"]),
                                                                     (_rand([16, 4], 15), ["R"])]),
        "embedding[ids R, W S0 (vocab)]": (lambda i, w: F.embedding(i, w), [(_rand([8, 3], 14, "int64"), ["R"]),
                                                                             (_rand([16, 4], 15), ["S0"])]),
        "cross_entropy[logits S0]": (lambda x, y: F.cross_entropy(x, y, reduction="none"),
                                     [(x86, ["S0"]), (_rand([8, 1], 16, "int64") % 6, ["S0"])]),
        "flip[axis 1, S0]": (lambda x: paddle.flip(x, axis=[1]), [(x86, ["S0"])]),
        "max_pool2d[batch S0]": (lambda x: F.max_pool2d(x, 2), [(_rand([4, 2, 4, 4], 17), ["S0"])]),
        "triu[S0]": (lambda x: paddle.triu(x), [(x86, ["S0"])]),
        "cumsum[axis 1, S0]": (lambda x: paddle.cumsum(x, axis=1), [(x86, ["S0"])]),
        "where[S0]": (lambda a, b: paddle.where(a > 0, a, b), [(x86, ["S0"]), (x86b, ["S0"])]),
        "unsqueeze/squeeze[S0]": (lambda x: paddle.squeeze(paddle.unsqueeze(x, 1), 1), [(x86, ["S0"])]),
    }
    return cases


SCENARIOS = {}
for _kind in ("dp", "mp", "recompute"):
    SCENARIOS[f"simple_net[{_kind}]"] = Scenario(
        lambda k=_kind: simple_net(k),
        "semi_auto_parallel_recompute.py" if _kind == "recompute" else "semi_auto_parallel_simple_net.py")
_FILES = {"matmul": "semi_auto_parallel_for_matmul.py", "elementwise": "semi_auto_parallel_for_elementwise.py",
          "softmax": "semi_auto_parallel_for_softmax.py", "layernorm": "semi_auto_parallel_for_layernorm.py",
          "reduction": "semi_auto_parallel_for_reduction.py", "concat": "semi_auto_parallel_for_concat.py",
          "split": "semi_auto_parallel_for_split.py", "reshape": "semi_auto_parallel_for_reshape.py",
          "transpose": "semi_auto_parallel_for_transpose.py", "embedding": "semi_auto_parallel_for_embedding.py",
          "cross_entropy": "semi_auto_parallel_for_cross_entropy_with_softmax.py",
          "flip": "semi_auto_parallel_for_flip.py", "max_pool2d": "semi_auto_parallel_for_pool2d.py",
          "triu": "semi_auto_parallel_for_triu.py", "cumsum": "semi_auto_parallel_for_cumsum.py",
          "where": "semi_auto_parallel_for_where.py", "unsqueeze/squeeze": "semi_auto_parallel_for_squeeze.py"}


def _make(name):
    def run():
        fn, specs = _ops()[name]
        return _op_case(fn, specs)
    return run


SCENARIOS.update({f"op {n}": Scenario(_make(n), _FILES[n.split("[")[0]]) for n in (
    "matmul[x S0, y R]", "matmul[x S1, y S0 -> partial]", "matmul[x R, y S1]", "elementwise[add S0+S0]",
    "elementwise[multiply S0*R]", "elementwise[unary gelu S1]", "softmax[axis -1, S0]",
    "softmax[axis 0 (sharded), S0]", "layernorm[S0]", "reduction[sum axis 0, S0]", "reduction[mean axis 1, S0]",
    "reduction[max axis 1, S0]", "concat[axis 1, S0]", "split[axis 1, S0]", "reshape[S0]", "transpose[S0]",
    "embedding[ids S0, W R]", "embedding[ids R, W S0 (vocab)]", "cross_entropy[logits S0]", "flip[axis 1, S0]",
    "max_pool2d[batch S0]", "triu[S0]", "cumsum[axis 1, S0]", "where[S0]", "unsqueeze/squeeze[S0]")})
