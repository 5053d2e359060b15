"""Rank functions for the static (PIR) reshard tests: ``dist.to_static`` training whose forward
holds an explicit ``dist.reshard``, so Paddle's reshard pass must pick a function for it and for
its backward (the reverse transition).

Cases (each a small MLP on numpy weights; :func:`dense_losses` trains the same numbers densely):

* ``p_to_s``      -- TP: column-parallel fc1, row-parallel fc2 (output Partial), reshard P -> S(0);
                     backward S(0) -> P.
* ``s_to_s``      -- column-parallel fc1 (output S(1)), reshard S(1) -> S(0); backward S(0) -> S(1).
* ``uneven_chain`` -- row-parallel output [4, 5] -> S(1) -> tanh -> P -> R. Paddle turns the
                     uneven S(1) target of the forward into Replicate by itself, but keeps it in
                     the backward, whose uneven S(1) -> R (3 + 2 columns) crashes Paddle's own
                     function; R -> P runs twice.
* ``r_to_p_mesh1`` -- the whole model on ``ProcessMesh([1])`` (no global rank 0), R -> P -> R in
                     the forward; Paddle's R -> P writes zeros there.
"""
from __future__ import annotations

import traceback

import numpy as np

from foundation_ranks import to_static_losses

IN, HIDDEN, OUT, BATCH, LR = 8, 16, 4, 4, 0.1

CASES = {
    "p_to_s": dict(hidden=HIDDEN, out=OUT, mesh=[0, 1]),
    "s_to_s": dict(hidden=HIDDEN, out=OUT, mesh=[0, 1]),
    "uneven_chain": dict(hidden=HIDDEN, out=5, mesh=[0, 1]),
    "r_to_p_mesh1": dict(hidden=HIDDEN, out=OUT, mesh=[1]),
}


def _weights(case: str) -> dict:
    cfg = CASES[case]
    rng = np.random.default_rng(11)
    return {"w1": rng.standard_normal((IN, cfg["hidden"])).astype("float32") * 0.4,
            "b1": rng.standard_normal((cfg["hidden"],)).astype("float32") * 0.1,
            "w2": rng.standard_normal((cfg["hidden"], cfg["out"])).astype("float32") * 0.4,
            "b2": rng.standard_normal((cfg["out"],)).astype("float32") * 0.1}


def _data(case: str, steps: int):
    rng = np.random.default_rng(5)
    xs = rng.standard_normal((steps * BATCH, IN)).astype("float32")
    ys = rng.standard_normal((steps * BATCH, CASES[case]["out"])).astype("float32")
    return xs, ys


def _forward(case: str, x, p, reshard):
    """The model; ``reshard(value, placements_text)`` is dist.reshard in the sharded run and the
    identity in the dense one, so both run the very same arithmetic."""
    import paddle
    import paddle.nn.functional as F

    if case == "p_to_s":
        h = F.relu(paddle.matmul(x, p["w1"]) + p["b1"])
        y = reshard(paddle.matmul(h, p["w2"]), "S0")  # Partial -> Shard(0)
        return y + p["b2"]
    if case == "s_to_s":
        h = paddle.matmul(x, p["w1"]) + p["b1"]       # Shard(1) (column parallel)
        h = F.relu(reshard(h, "S0"))                   # Shard(1) -> Shard(0)
        return paddle.matmul(h, p["w2"]) + p["b2"]
    if case == "uneven_chain":
        h = F.relu(paddle.matmul(x, p["w1"]) + p["b1"])
        y = reshard(paddle.matmul(h, p["w2"]), "S1")  # Partial -> Shard(1), 3 + 2 columns
        z = reshard(paddle.tanh(y), "P")               # Shard(1) -> Partial
        return reshard(z, "R") + p["b2"]              # Partial -> Replicate
    if case == "r_to_p_mesh1":
        h = F.relu(paddle.matmul(x, p["w1"]) + p["b1"])
        y = reshard(paddle.matmul(h, p["w2"]), "P")   # Replicate -> Partial on mesh [1]
        return reshard(y, "R") + p["b2"]              # Partial -> Replicate
    raise ValueError(f"unknown case {case!r}; known: {sorted(CASES)}")


# parameter placements of the sharded run, per case
_PARAM_PLACEMENTS = {
    "p_to_s": {"w1": "S1", "b1": "S0", "w2": "S0"},
    "s_to_s": {"w1": "S1", "b1": "S0"},
    "uneven_chain": {"w1": "S1", "b1": "S0", "w2": "S0"},
    "r_to_p_mesh1": {},
}


def _placements(text: str):
    import paddle.distributed as dist

    return {"S0": [dist.Shard(0)], "S1": [dist.Shard(1)], "P": [dist.Partial()], "R": [dist.Replicate()]}[text]


def _train(case: str, steps: int) -> list:
    import paddle
    import paddle.distributed as dist

    mesh = dist.ProcessMesh(CASES[case]["mesh"], dim_names=["x"])
    weights = _weights(case)

    class Net(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            for name, value in weights.items():
                par = self.create_parameter(value.shape, default_initializer=paddle.nn.initializer.Assign(value))
                par = dist.shard_tensor(par, mesh, _placements(_PARAM_PLACEMENTS[case].get(name, "R")))
                setattr(self, name, par)

        def forward(self, x):
            params = {name: getattr(self, name) for name in weights}
            return _forward(case, x, params, lambda v, t: dist.reshard(v, mesh, _placements(t)))

    xs, ys = _data(case, steps)

    class Data(paddle.io.Dataset):
        def __getitem__(self, i):
            return xs[i], ys[i]

        def __len__(self):
            return len(xs)

    net = Net()
    opt = paddle.optimizer.SGD(LR, parameters=net.parameters())
    return to_static_losses(net, opt, Data(), BATCH, mesh, steps)


def run_cases(cases, steps: int, ours: bool) -> dict:
    """Train each case in turn; ``ours`` installs paddle-ext's static functions, else removes them.

    Returns ``{case: {"status": "ok"|"error", "losses"|"error": ..., "calls": {function: n}}}``
    where ``calls`` counts paddle-ext's functions used while the case's program was built.
    A failing case ends the list: a failed Engine build cannot be retried in this process.
    """
    import paddle.distributed as dist
    import paddle_ext

    dist.init_parallel_env()  # a user's script joins the gloo world and turns paddle-ext on
    paddle_ext.install()

    from paddle_ext.compat.ports import static_reshard as sf

    if ours:
        sf.install_static_reshard()
    else:
        sf.uninstall_static_reshard()
    out = {}
    for case in cases:
        before = dict(sf.CALLS)
        try:
            result = {"status": "ok", "losses": _train(case, steps)}
        except Exception as exc:  # noqa: BLE001 - Paddle's failure is what the run measures
            result = {"status": "error", "error": f"{type(exc).__name__}: {exc}"[:2000],
                      "traceback": traceback.format_exc()[-3000:]}
        result["calls"] = {k: v - before.get(k, 0) for k, v in sf.CALLS.items() if v != before.get(k, 0)}
        out[case] = result
        if result["status"] == "error":
            break
    return out


def dense_losses(case: str, steps: int, row_blocks: int = 1) -> list:
    """Single-process reference: same weights, data, batches and SGD, no distribution.

    With ``row_blocks = n`` each step gives ``n`` values too: the loss over each of the batch's
    ``n`` equal row blocks, from the same dense trajectory -- what rank ``k`` of a run whose
    output is sharded by rows over ``n`` ranks sees as its loss.
    """
    import paddle

    weights = _weights(case)
    p = {k: paddle.create_parameter(v.shape, "float32", default_initializer=paddle.nn.initializer.Assign(v))
         for k, v in weights.items()}
    opt = paddle.optimizer.SGD(LR, parameters=list(p.values()))
    xs, ys = _data(case, steps)
    losses = []
    for step in range(steps):
        x = paddle.to_tensor(xs[step * BATCH:(step + 1) * BATCH])
        y = paddle.to_tensor(ys[step * BATCH:(step + 1) * BATCH])
        out = _forward(case, x, p, lambda v, t: v)
        loss = paddle.nn.functional.mse_loss(out, y)
        rows = BATCH // row_blocks
        blocks = [float(paddle.nn.functional.mse_loss(out[k * rows:(k + 1) * rows], y[k * rows:(k + 1) * rows]))
                  for k in range(row_blocks)] if row_blocks > 1 else None
        loss.backward()
        opt.step()
        opt.clear_grad()
        losses.append(blocks if blocks else float(loss.numpy()))
    return losses


# -- one reshard in a hand-built PIR program, through Paddle's own reshard pass ---------------
def program_inputs(shape, n: int, src: str, rank_index: int) -> np.ndarray:
    """This rank's local input for ``src`` (of :func:`program_dense`): a shard, the whole tensor,
    or an integer-valued partial (asymmetric across ranks, so a wrong reduction shows)."""
    from paddle_ext.placements import DistSpec, Partial, Shard, parse_placement

    dense = program_dense(shape)
    p = parse_placement(src)
    if isinstance(p, Shard):
        spec = DistSpec(tuple(shape), (n,), (p,))
        return dense[tuple(slice(o, o + length) for o, length in spec.local_slices((rank_index,)))]
    if isinstance(p, Partial):
        noise = (np.arange(dense.size).reshape(shape) % 5 + rank_index).astype("float32")
        if p.op == "sum":  # rank 0 holds dense - (n-1 others' noise)
            others = sum((np.arange(dense.size).reshape(shape) % 5 + k).astype("float32") for k in range(1, n))
            return dense - others if rank_index == 0 else noise
        if p.op == "avg":
            others = sum((np.arange(dense.size).reshape(shape) % 5 + k).astype("float32") for k in range(1, n))
            return n * dense - others if rank_index == 0 else noise
        mask = (np.arange(dense.size).reshape(shape) % n) == rank_index  # who holds the extreme
        return np.where(mask, dense, dense - 7 if p.op == "max" else dense + 7).astype("float32")
    return dense


def program_dense(shape) -> np.ndarray:
    return (np.arange(int(np.prod(shape))).reshape(shape) * 0.5 + 1).astype("float32")


def program_cases(cases, ours: bool) -> list:
    """Run each ``(shape, mesh_ids, src, dst)`` reshard as a one-op PIR program on this rank.

    The program is built with a ``dist_op.reshard`` and lowered by Paddle's own
    ``ReshardPasses.apply_reshard_pass`` (so ``choose_reshard_func`` picks the function) and
    ``apply_dist2dense_pass``, then run by the static Executor on gloo. Every rank builds every
    case (process-group ids stay aligned); ranks outside the mesh do not run it. Returns, per
    case, ``("ok", local_output, function_name)``, ``("skip", None, None)`` or ``("error", msg, None)``.
    """
    import paddle.distributed as dist
    import paddle_ext

    dist.init_parallel_env()  # a user's script joins the gloo world and turns paddle-ext on
    paddle_ext.install()

    import paddle
    from paddle.distributed.auto_parallel.static import pir_pass
    from paddle.distributed.auto_parallel.static.process_group import get_all_process_groups

    from paddle_ext.compat.ports.convert import to_paddle_placements
    from paddle_ext.compat.ports import static_reshard as sf

    sf.install_static_reshard() if ours else sf.uninstall_static_reshard()
    pir = paddle.base.libpaddle.pir
    rank = dist.get_rank()
    chosen = []
    original_choose = pir_pass.choose_reshard_func

    def choose(a, b):
        func = original_choose(a, b)
        chosen.append(type(func).__name__)
        return func

    pir_pass.choose_reshard_func = choose
    paddle.enable_static()
    built = []
    try:
        for shape, mesh_ids, src, dst in cases:
            mesh = dist.ProcessMesh(list(mesh_ids), dim_names=["x"])
            main = paddle.static.Program()
            del chosen[:]
            try:
                with paddle.static.program_guard(main):
                    x = paddle.static.data("x", list(shape), "float32")
                    src_attr = _pir_attr(pir, mesh, src, len(shape), to_paddle_placements)
                    x.set_type(pir.cvt_to_dist_type(x.type(), src_attr))
                    x.get_defining_op().dist_attr = pir.create_op_dist_attribute(mesh, [], [src_attr])
                    y = paddle._C_ops.reshard_v2(x, _pir_attr(pir, mesh, dst, len(shape), to_paddle_placements))
                    pir_pass.ReshardPasses.apply_reshard_pass(main)
                    pir.apply_dist2dense_pass(main)
                    y = main.global_block().ops[-1].result(0)  # the reshard's replacement
                built.append((main, y, list(chosen), None))
            except Exception as exc:  # noqa: BLE001 - a build failure is a result
                built.append((None, None, list(chosen), f"{type(exc).__name__}: {str(exc)[:800]}"))
        for group in get_all_process_groups():
            group.instantiate()
        exe = paddle.static.Executor(paddle.CPUPlace())
        out = []
        for (shape, mesh_ids, src, dst), (main, y, names, error) in zip(cases, built):
            if error is not None:
                out.append(("error", error, names))
            elif rank not in mesh_ids:
                out.append(("skip", None, names))
            else:
                local = program_inputs(shape, len(mesh_ids), src, list(mesh_ids).index(rank))
                try:
                    (value,) = exe.run(main, feed={"x": local}, fetch_list=[y])
                    out.append(("ok", np.asarray(value), names))
                except Exception as exc:  # noqa: BLE001
                    out.append(("error", f"{type(exc).__name__}: {str(exc)[:800]}", names))
        return out
    finally:
        pir_pass.choose_reshard_func = original_choose
        paddle.disable_static()


def _pir_attr(pir, mesh, text: str, ndim: int, to_paddle_placements):
    """A PIR TensorDistAttribute for one placement text on a 1-D mesh."""
    import paddle

    from paddle_ext.placements import Partial, Shard, parse_placement

    p = parse_placement(text)
    dims = [-1] * ndim
    partial = {}
    if isinstance(p, Shard):
        dims[p.dim] = 0
    elif isinstance(p, Partial):
        names = {"sum": "kRedSum", "avg": "kRedAvg", "max": "kRedMax", "min": "kRedMin"}
        partial = {0: getattr(paddle.base.core.ReduceType, names[p.op])}
    return pir.create_tensor_dist_attribute(mesh, dims, partial)
