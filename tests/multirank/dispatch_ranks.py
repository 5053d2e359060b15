"""Rank functions for the dispatch multi-rank tests (run through paddle_ext.testing.run_ranks).

Each function loops over many checks and returns all results, so one launch covers them.
"""
import contextlib

import numpy as np

# name -> (call(paddle, F, *tensors), inputs, placements per world size)
# inputs: ("f", shape) float needing grad, ("p", shape) positive float, ("b", shape) bool mask,
#         ("i", shape, hi) int64 index in [0, hi), ("u", shape, hi) unique int64 indices in [0, hi)
# placements: {2: (mesh_shape, [text per input]), 4: (...)}
M2 = (2,)
M22 = (2, 2)
M4 = (4,)

OP_CASES = {
    "masked_fill": (lambda p, F, x, m: p.masked_fill(x, m, 0.5), [("f", (6, 5)), ("b", (6, 5))],
                    {2: (M2, ["[S(0)]", "[S(0)]"]), 4: (M22, ["[S(0),S(1)]", "[S(0),S(1)]"])}),
    "isfinite": (lambda p, F, x: p.isfinite(x), [("f", (5, 7))],
                 {2: (M2, ["[S(0)]"]), 4: (M22, ["[S(0),S(1)]"])}),
    "lerp": (lambda p, F, x, y: p.lerp(x, y, 0.3), [("f", (5, 6)), ("f", (5, 6))],
             {2: (M2, ["[S(0)]", "[R]"]), 4: (M22, ["[S(0),R]", "[R,S(1)]"])}),
    "tril": (lambda p, F, x: p.tril(x, 1), [("f", (5, 7))],
             {2: (M2, ["[S(0)]"]), 4: (M22, ["[S(0),S(1)]"])}),
    "triu": (lambda p, F, x: p.triu(x, -1), [("f", (6, 7))],
             {2: (M2, ["[S(1)]"]), 4: (M22, ["[S(1),S(0)]"])}),
    "flip": (lambda p, F, x: p.flip(x, [1]), [("f", (5, 6))],
             {2: (M2, ["[S(0)]"]), 4: (M4, ["[S(0)]"])}),
    "cumprod": (lambda p, F, x: p.cumprod(x, dim=1), [("f", (5, 4))],
                {2: (M2, ["[S(0)]"]), 4: (M22, ["[S(0),R]"])}),
    "logcumsumexp": (lambda p, F, x: p.logcumsumexp(x, axis=0), [("f", (4, 6))],
                     {2: (M2, ["[S(1)]"]), 4: (M22, ["[R,S(1)]"])}),
    "repeat_interleave": (lambda p, F, x: p.repeat_interleave(x, 2, axis=0), [("f", (4, 5))],
                          {2: (M2, ["[S(0)]"]), 4: (M4, ["[S(0)]"])}),
    "max_pool2d": (lambda p, F, x: F.max_pool2d(x, 2, 2), [("f", (4, 3, 6, 6))],
                   {2: (M2, ["[S(0)]"]), 4: (M22, ["[S(0),S(1)]"])}),
    "avg_pool2d": (lambda p, F, x: F.avg_pool2d(x, 3, 2, padding=1), [("f", (3, 4, 7, 7))],
                   {2: (M2, ["[S(1)]"]), 4: (M22, ["[S(0),S(1)]"])}),
    "max_pool1d": (lambda p, F, x: F.max_pool1d(x, 2), [("f", (4, 3, 8))],
                   {2: (M2, ["[S(0)]"]), 4: (M4, ["[S(0)]"])}),
    "avg_pool1d": (lambda p, F, x: F.avg_pool1d(x, 3, 1, padding=1), [("f", (4, 3, 8))],
                   {2: (M2, ["[S(1)]"]), 4: (M22, ["[S(0),S(1)]"])}),
    "adaptive_avg_pool2d": (lambda p, F, x: F.adaptive_avg_pool2d(x, 3), [("f", (4, 2, 7, 7))],
                            {2: (M2, ["[S(0)]"]), 4: (M22, ["[S(0),S(1)]"])}),
    "interpolate": (lambda p, F, x: F.interpolate(x, scale_factor=2, mode="bilinear"), [("f", (4, 2, 3, 3))],
                    {2: (M2, ["[S(0)]"]), 4: (M22, ["[S(0),S(1)]"])}),
    "pad": (lambda p, F, x: F.pad(x, [1, 2, 0, 1], mode="reflect"), [("f", (4, 3, 5, 5))],
            {2: (M2, ["[S(1)]"]), 4: (M22, ["[S(0),S(1)]"])}),
    "gather": (lambda p, F, x, i: p.gather(x, i, axis=1), [("f", (5, 6)), ("i", (4,), 6)],
               {2: (M2, ["[S(0)]", "[R]"]), 4: (M22, ["[S(0),R]", "[R,S(0)]"])}),
    "gather_nd": (lambda p, F, x, i: p.gather_nd(x, i), [("f", (4, 5, 6)), ("i", (6, 1), 4)],
                  {2: (M2, ["[S(2)]", "[R]"]), 4: (M22, ["[S(2),R]", "[R,S(0)]"])}),
    "index_add": (lambda p, F, x, i, v: p.index_add(x, i, 1, v), [("f", (5, 6)), ("u", (3,), 6), ("f", (5, 3))],
                  {2: (M2, ["[S(0)]", "[R]", "[S(0)]"]), 4: (M22, ["[S(0),R]", "[R,R]", "[S(0),R]"])}),
    "scatter": (lambda p, F, x, i, u: p.scatter(x, i, u), [("f", (6, 5)), ("u", (3,), 6), ("f", (3, 5))],
                {2: (M2, ["[S(1)]", "[R]", "[R]"]), 4: (M22, ["[R,S(1)]", "[R,R]", "[R,R]"])}),
    "kthvalue": (lambda p, F, x: p.kthvalue(x, 2, axis=1)[0], [("f", (5, 6))],
                 {2: (M2, ["[S(0)]"]), 4: (M22, ["[S(0),R]"])}),
    "median": (lambda p, F, x: p.median(x, axis=1), [("f", (6, 5))],
               {2: (M2, ["[S(0)]"]), 4: (M4, ["[S(0)]"])}),
    "std": (lambda p, F, x: p.std(x, axis=0), [("f", (6, 5))],
            {2: (M2, ["[S(1)]"]), 4: (M22, ["[R,S(1)]"])}),
    "var": (lambda p, F, x: p.var(x, axis=1, unbiased=False), [("f", (5, 6))],
            {2: (M2, ["[S(0)]"]), 4: (M22, ["[S(0),R]"])}),
    "mean": (lambda p, F, x: p.mean(x), [("f", (5, 7))],
             {2: (M2, ["[S(0)]"]), 4: (M22, ["[S(0),S(1)]"])}),
    "mean_axis0": (lambda p, F, x: p.mean(x, axis=0), [("f", (5, 7))],
                   {2: (M2, ["[S(0)]"]), 4: (M4, ["[S(0)]"])}),
    "addmm": (lambda p, F, a, x, y: p.addmm(a, x, y, 0.5, 2.0), [("f", (4, 6)), ("f", (4, 8)), ("f", (8, 6))],
              {2: (M2, ["[R]", "[S(1)]", "[R]"]), 4: (M22, ["[R,R]", "[S(0),S(1)]", "[R,R]"])}),
    "baddbmm": (lambda p, F, a, x, y: p.baddbmm(a, x, y, 1.0, 0.5),
                [("f", (2, 3, 4)), ("f", (2, 3, 6)), ("f", (2, 6, 4))],
                {2: (M2, ["[R]", "[S(2)]", "[R]"]), 4: (M22, ["[S(0),R]", "[R,S(2)]", "[R,R]"])}),
    "kron": (lambda p, F, x, y: p.kron(x, y), [("f", (4, 3)), ("f", (2, 2))],
             {2: (M2, ["[S(0)]", "[R]"]), 4: (M4, ["[S(0)]", "[R]"])}),
}


def _make_inputs(inputs, seed):
    rng = np.random.default_rng(seed)
    out = []
    for spec in inputs:
        kind, shape = spec[0], spec[1]
        if kind == "f":
            out.append(rng.standard_normal(shape).astype("float32"))
        elif kind == "p":
            out.append((np.abs(rng.standard_normal(shape)) + 0.5).astype("float32"))
        elif kind == "b":
            out.append(rng.random(shape) < 0.5)
        elif kind == "i":
            out.append(rng.integers(0, spec[2], size=shape).astype("int64"))
        else:
            out.append(rng.permutation(spec[2])[:shape[0]].astype("int64"))
    return out


def _mesh(mesh_shape):
    import paddle.distributed as dist

    n = int(np.prod(mesh_shape))
    return dist.ProcessMesh(np.arange(n).reshape(mesh_shape).tolist(), dim_names=[f"d{i}" for i in range(len(mesh_shape))])


def _shard(a, mesh, mesh_shape, text):
    """A DistTensor holding this rank's ceil-first block of ``a`` (Paddle's shard_tensor fails for
    e.g. 5 rows over 4 ranks: its last slice starts past the end)."""
    import paddle.distributed as dist

    from paddle_ext.compat.ports.dispatch import make_dist
    from paddle_ext.placements import DistSpec, coord_of_rank

    spec = DistSpec(a.shape, mesh_shape, text)
    coord = coord_of_rank(dist.get_rank(), mesh_shape)
    box = tuple(slice(o, o + n) for o, n in spec.local_slices(coord))
    import paddle

    return make_dist(paddle.to_tensor(np.ascontiguousarray(a[box])), mesh, spec.placements, a.shape)


def _full(t, mesh):
    """The global value of DistTensor ``t`` as numpy (paddle-ext's reshard to Replicate)."""
    import paddle.distributed as dist

    from paddle_ext.reshard.dygraph import reshard

    r = reshard(t, mesh, [dist.Replicate() for _ in mesh.shape], check=False)
    return r._local_value().numpy()


def ops_fwd_bwd(names, world, key):
    """Run every op in ``names`` dense and distributed (under enable()); compare values and grads.
    ``key``: the dispatcher's plan-cache key, "compiled" or "python" (compat.native.fast_key)."""
    import paddle.distributed as dist
    import paddle_ext

    dist.init_parallel_env()  # a user's script joins the gloo world and turns paddle-ext on
    paddle_ext.install()

    import paddle
    import paddle.nn.functional as F

    import paddle_ext.dispatch as pd
    from paddle_ext.compat.native import fast_key

    fast_key.use(key == "compiled")
    pd.enable()
    results = {}
    try:
        for k, name in enumerate(names):
            print("dispatch case", name, flush=True)
            call, inputs, pls = OP_CASES[name]
            mesh_shape, texts = pls[world]
            mesh = _mesh(mesh_shape)
            arrays = _make_inputs(inputs, 100 + k)
            grads_of = [i for i, s in enumerate(inputs) if s[0] in ("f", "p")]
            # dense
            dense = [paddle.to_tensor(a) for a in arrays]
            for i in grads_of:
                dense[i].stop_gradient = False
            out_d = call(paddle, F, *dense)
            w = paddle.to_tensor(np.random.default_rng(7).standard_normal(out_d.shape).astype("float32"))
            if out_d.dtype in (paddle.float32, paddle.float64):
                (out_d * w).sum().backward()
            # distributed
            dts = [_shard(a, mesh, mesh_shape, t) for a, t in zip(arrays, texts)]
            for i in grads_of:
                dts[i].stop_gradient = False
            rec = {}
            try:
                out = call(paddle, F, *dts)
                rec["out"] = str([str(p) for p in out.placements])
                got = _full(out, mesh)
                rec["fwd_err"] = float(np.max(np.abs(got.astype("float64") - out_d.numpy().astype("float64")))) \
                    if got.size else 0.0
                rec["shape_ok"] = list(got.shape) == list(out_d.shape)
                if out_d.dtype in (paddle.float32, paddle.float64):
                    # d(sum(out * w))/d(out) = w, handed in with out's layout (a Partial out takes
                    # a replicated gradient): no Paddle op runs on the uneven result
                    from paddle_ext.compat import from_paddle_placements
                    from paddle_ext.placements import Partial, Replicate, format_placements

                    gpl = [Replicate() if isinstance(p, Partial) else p for p in from_paddle_placements(out.placements)]
                    g = _shard(w.numpy(), mesh, mesh_shape, format_placements(gpl))
                    paddle.autograd.backward([out], [g])
                    errs = {}
                    for i in grads_of:
                        g = dts[i].grad
                        errs[i] = (float(np.max(np.abs(_full(g, mesh) - dense[i].grad.numpy()))),
                                   str([str(p) for p in g.placements]))
                    rec["grad"] = errs
            except Exception as exc:  # noqa: BLE001 - recorded; the test names it
                rec["error"] = f"{type(exc).__name__}: {exc}"[:600]
            results[name] = rec
    finally:
        pd.disable()
    return results


def gradient_fix_vs_local_map():
    """Column-parallel linear with x replicated: paddle-ext dispatch vs dist.local_map vs dense."""
    import paddle
    import paddle.distributed as dist

    import paddle_ext.dispatch as pd

    mesh = _mesh(M2)
    rng = np.random.default_rng(3)
    xa, wa = rng.standard_normal((4, 6)).astype("float32"), rng.standard_normal((6, 8)).astype("float32")

    def local_linear(x, w):
        return paddle.matmul(x, w)

    # dense
    xd, wd = paddle.to_tensor(xa), paddle.to_tensor(wa)
    xd.stop_gradient = wd.stop_gradient = False
    (paddle.matmul(xd, wd) ** 2).sum().backward()
    from paddle_ext.dispatch import core, plan_cache

    out = {}
    # "dispatch": Paddle's own matmul on the DistTensors (Paddle's rule gives the same layout);
    # "dispatch_native": paddle-ext's native route, dtensor_to_local(x, [P(sum)]) as the gradient
    # placement; "dispatch_pylayer": the same call through paddle-ext's PyLayer
    for variant in ("dispatch", "dispatch_native", "dispatch_pylayer", "local_map"):
        x = dist.shard_tensor(paddle.to_tensor(xa), mesh, [dist.Replicate()])
        w = dist.shard_tensor(paddle.to_tensor(wa), mesh, [dist.Shard(1)])
        x.stop_gradient = w.stop_gradient = False
        if variant == "dispatch":
            y = pd.dispatch("matmul", [x, w], {}, lambda t, ctx: local_linear(*t))
        elif variant == "dispatch_native":
            with core.own_routes():
                y = pd.dispatch("matmul", [x, w], {}, lambda t, ctx: local_linear(*t))
        elif variant == "dispatch_pylayer":
            with core.pylayer_only():
                y = pd.dispatch("matmul", [x, w], {}, lambda t, ctx: local_linear(*t))
        else:
            y = dist.local_map(local_linear, out_placements=[[dist.Shard(1)]],
                               in_placements=[[dist.Replicate()], [dist.Shard(1)]], process_mesh=mesh)(x, w)
        node = y.grad_fn.name()
        (y ** 2).sum().backward()
        out[variant] = {
            "grad_node": node,
            "y_placements": str(y.placements),
            "dx_placements": str(x.grad.placements),
            "dx_err": float(np.max(np.abs(_full(x.grad, mesh) - xd.grad.numpy()))),
            "dw_err": float(np.max(np.abs(_full(w.grad, mesh) - wd.grad.numpy()))),
            # the plan's native gradient placements (None: this call needs the PyLayer)
            "native_hints": str(plan_cache.plan_for("matmul", [x, w], {}).native_hints),
        }
    return out


#: op -> (shapes, placements per input, Paddle's call on the tensors, the rule's attributes)
PADDLE_ROUTE_CASES = {
    "add": (((8, 6), (8, 6)), ("S0", "S0"), lambda t: t[0] + t[1], {}),
    "matmul_row": (((8, 6), (6, 4)), ("S0", "R"), lambda t: t[0] @ t[1], {}),
    "matmul_column": (((8, 6), (6, 4)), ("R", "S1"), lambda t: t[0] @ t[1], {}),
    "softmax": (((8, 6),), ("S0",), lambda t: __import__("paddle").nn.functional.softmax(t[0], -1), {"axis": -1}),
}


def paddle_route_vs_paddle_alone():
    """Per case, Paddle alone's op, the dispatched call (Paddle's op route) and paddle-ext's own
    routes on 2 ranks: their grad nodes, and whether outputs and gradients (placements and local
    values) are bit-equal to Paddle alone's."""
    import paddle
    import paddle.distributed as dist

    import paddle_ext.dispatch as pd
    from paddle_ext.dispatch import core

    mesh = _mesh(M2)
    kinds = {"S0": [dist.Shard(0)], "S1": [dist.Shard(1)], "R": [dist.Replicate()]}
    out = {}
    for name, (shapes, pls, fn, attrs) in PADDLE_ROUTE_CASES.items():
        op = name.split("_")[0]
        arrays = [np.random.default_rng(i).standard_normal(s).astype("float32") for i, s in enumerate(shapes)]
        runs = {}
        for route in ("alone", "dispatch", "own", "pylayer"):
            ts = [dist.shard_tensor(paddle.to_tensor(a), mesh, kinds[p]) for a, p in zip(arrays, pls)]
            for t in ts:
                t.stop_gradient = False
            block = {"own": core.own_routes, "pylayer": core.pylayer_only}.get(route)
            if route == "alone":
                y = fn(ts)
            else:
                with block() if block else contextlib.nullcontext():
                    y = pd.dispatch(op, ts, attrs, lambda t, c: fn(t))
            node = (y.grad_fn.name(), [n.name() for n in y.grad_fn.next_functions])
            (y * y).sum().backward()
            runs[route] = (node, [y] + [t.grad for t in ts])
        ref = runs["alone"][1]
        out[name] = {route: {"node": node,
                             "same": all(str(a.placements) == str(b.placements)
                                         and np.array_equal(a._local_value().numpy(), b._local_value().numpy())
                                         for a, b in zip(got, ref))}
                     for route, (node, got) in runs.items()}
    return out


def bad_inputs():
    """The dispatcher's errors on real DistTensors: mixed meshes, missing rule."""
    import paddle
    import paddle.distributed as dist

    import paddle_ext.dispatch as pd

    out = {}
    m01 = _mesh(M2)
    m10 = dist.ProcessMesh([1, 0], dim_names=["d0"])
    x = dist.shard_tensor(paddle.ones([4, 4]), m01, [dist.Shard(0)])
    y = dist.shard_tensor(paddle.ones([4, 4]), m10, [dist.Shard(0)])
    for key, fn in (("meshes", lambda: pd.dispatch("add", [x, y], {}, lambda t, c: t[0] + t[1])),
                    ("norule", lambda: pd.dispatch("no_such_op", [x], {}, lambda t, c: t[0]))):
        try:
            fn()
            out[key] = "no error"
        except pd.DispatchError as exc:
            out[key] = str(exc)
    # the fast path's plan cache: meshes with the same process ids but another shape give the
    # same (global shape, placements) key; each needs its own plan (2x1: split in two, 1x2: whole)
    a = np.arange(16, dtype="float32").reshape(4, 4)
    pls = [dist.Shard(0), dist.Replicate()]
    inputs = {}
    for name, m in (("m21", dist.ProcessMesh([[0], [1]], dim_names=["a", "b"])),
                    ("m12", dist.ProcessMesh([[0, 1]], dim_names=["a", "b"]))):
        t = inputs[name] = dist.shard_tensor(paddle.to_tensor(a), m, pls)
        r = pd.dispatch("add", [t, t], {}, lambda v, c: v[0] + v[1])
        out[name] = {"mesh": list(r.process_mesh.shape), "local": list(r._local_value().shape),
                     "err": float(np.max(np.abs(_full(r, m) - 2 * a)))}
    try:
        pd.dispatch("add", [inputs["m21"], inputs["m12"]], {}, lambda v, c: v[0] + v[1])
        out["mesh_shapes"] = "no error"
    except pd.DispatchError as exc:
        out["mesh_shapes"] = str(exc)
    return out


def mean_uneven():
    """paddle.mean over an unevenly sharded dim: Paddle vs enable()."""
    import paddle
    import paddle.distributed as dist

    import paddle_ext.dispatch as pd

    mesh = _mesh(M2)
    a = np.arange(35, dtype="float32").reshape(5, 7)
    res = {"dense": float(a.mean()), "dense_axis0": a.mean(0).tolist()}
    x = dist.shard_tensor(paddle.to_tensor(a), mesh, [dist.Shard(0)])
    res["paddle"] = float(_full(paddle.mean(x), mesh).reshape(-1)[0])
    pd.enable(["mean"])
    try:
        m = paddle.mean(x)
        res["ext"] = float(_full(m, mesh).reshape(-1)[0])
        res["ext_placements"] = str(m.placements)
        res["ext_axis0"] = _full(paddle.mean(x, axis=0), mesh).tolist()
    finally:
        pd.disable()
    return res


def audit_before_after():
    """The audit lists replicated fallbacks; the same calls under enable() disappear from it."""
    import paddle
    import paddle.distributed as dist
    import paddle.nn.functional as F

    import paddle_ext.dispatch as pd

    mesh = _mesh(M2)
    x = dist.shard_tensor(paddle.rand([4, 3, 6, 6]), mesh, [dist.Shard(0)])
    y = dist.shard_tensor(paddle.rand([8, 6]), mesh, [dist.Shard(0)])

    def program():
        F.max_pool2d(x, 2)
        paddle.flip(y, [1])
        paddle.cumprod(y, dim=1)
        paddle.tril(y)

    with pd.audit() as before:
        program()
    pd.enable()
    try:
        with pd.audit() as after:
            program()
    finally:
        pd.disable()
    return {"before": before.as_dict(), "before_text": before.text(), "after": after.as_dict(),
            "after_text": after.text()}


def misc_checks():
    """One launch for the small checks: gradient fix, bad inputs (with either plan-cache key),
    uneven mean, audit."""
    import paddle.distributed as dist
    import paddle_ext

    dist.init_parallel_env()  # a user's script joins the gloo world and turns paddle-ext on
    paddle_ext.install()

    from paddle_ext.compat.native import fast_key

    fast_key.use(False)
    bad_python = bad_inputs()
    fast_key.use(True)
    return {"grad": gradient_fix_vs_local_map(), "bad": bad_inputs(), "bad_python_key": bad_python,
            "mean": mean_uneven(), "audit": audit_before_after(), "route": paddle_route_vs_paddle_alone()}


def _static_data():
    rng = np.random.default_rng(0)
    return rng.standard_normal((16, 6)).astype("float32"), rng.standard_normal((16, 6)).astype("float32")


def to_static_losses(dense, steps=3):
    """A data-parallel model using enable()'d ops and an @spmd_op with a replicated weight
    consumed locally, trained under dist.to_static (or dense); returns the losses."""
    import paddle.distributed as dist
    import paddle_ext

    dist.init_parallel_env()  # a user's script joins the gloo world and turns paddle-ext on
    paddle_ext.install()

    import paddle

    import paddle_ext.dispatch as pd

    paddle.seed(1)
    mesh = _mesh(M2)
    X, Y = _static_data()

    @pd.spmd_op("matmul")
    def local_matmul(x, y, trans_x=False, trans_y=False):
        return paddle.matmul(x, y)

    class M(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.fc = paddle.nn.Linear(6, 6)
            self.w2 = self.create_parameter([6, 6])
            if not dense:
                self.fc.weight = dist.shard_tensor(self.fc.weight, mesh, [dist.Replicate()])
                self.fc.bias = dist.shard_tensor(self.fc.bias, mesh, [dist.Replicate()])
                self.w2 = dist.shard_tensor(self.w2, mesh, [dist.Replicate()])

        def forward(self, x):
            h = local_matmul(self.fc(x), self.w2)     # w2 replicated, consumed locally: P(sum) grad
            h = paddle.flip(h, [1])
            return paddle.tril(h, 1) + h

    model = M()
    opt = paddle.optimizer.SGD(0.05, parameters=model.parameters())
    losses = []
    if dense:
        for s in range(steps):
            b = slice((s % 2) * 8, (s % 2) * 8 + 8)
            loss = paddle.nn.functional.mse_loss(model(paddle.to_tensor(X[b])), paddle.to_tensor(Y[b]))
            loss.backward()
            opt.step()
            opt.clear_grad()
            losses.append(float(loss))
        return losses

    class D(paddle.io.Dataset):
        def __getitem__(self, i):
            return X[i], Y[i]

        def __len__(self):
            return 16

    loader = dist.shard_dataloader(paddle.io.DataLoader(D(), batch_size=8, shuffle=False), meshes=[mesh],
                                   shard_dims="d0")
    pd.enable(["flip", "tril", "mean"])
    try:
        dm = dist.to_static(model, loader, paddle.nn.MSELoss(), opt)
        dm.train()
        batches = list(loader())
        for s in range(steps):
            x, y = batches[s % 2]
            losses.append(float(np.asarray(dm(x, y)).reshape(-1)[0]))
    finally:
        pd.disable()
    return losses


def custom_ops():
    """The two examples: a Python op and a C++ custom op, each with a Python SPMD rule."""
    import paddle.distributed as dist
    import paddle_ext

    dist.init_parallel_env()  # a user's script joins the gloo world and turns paddle-ext on
    paddle_ext.install()

    import os
    import sys

    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples")
    for p in (root, os.path.join(root, "custom_op_cpp")):
        if p not in sys.path:
            sys.path.insert(0, p)
    import custom_op_python
    import op as custom_op_cpp

    return {"python": custom_op_python.check(), "cpp": custom_op_cpp.check()}
