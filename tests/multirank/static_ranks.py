"""Rank functions for the static-Engine tests: dist.to_static training under TP, DP, PP.

Every model is built from numpy weights drawn from a fixed seed, so the single-process dense
reference (:func:`dense_losses`) trains the very same numbers. A config is a plain dict:

* ``model``: "mlp" (Linear+ReLU blocks) or "transformer" (pre-norm attention + MLP blocks);
* ``layer_meshes``: for PP, the stage (mesh index) of each block, e.g. [0, 0, 1, 1];
* ``schedule``, ``acc`` (micro-batches), ``vpp`` (chunks per rank), ``steps``;
* ``tp``/``dp``: tensor / data parallel degree (mesh ``[dp, tp]`` per stage);
* ``optimizer``: "sgd" (default) or "adamw"; ``zero``: 1, 2 or 3 shards it on "dp"
  (``dist.shard_optimizer`` with ``ShardingStage<zero>``; one stage only).
"""
from __future__ import annotations

import logging
import os
import time

import numpy as np

HIDDEN, IN, OUT, BATCH = 16, 8, 4, 8


def _weights(model: str, n_blocks: int):
    rng = np.random.default_rng(7)
    if model == "scale":  # only elementwise parameters: no op computes a weight gradient alone
        return {f"b{i}.{k}": (rng.standard_normal((IN,)) * 0.3 + (1.0 if k == "s" else 0.0)).astype("float32")
                for i in range(n_blocks) for k in ("s", "c")}
    w = {"w_in": rng.standard_normal((IN, HIDDEN)).astype("float32") * 0.3,
         "w_out": rng.standard_normal((HIDDEN, OUT)).astype("float32") * 0.3}
    for i in range(n_blocks):
        if model == "mlp":
            w[f"b{i}.w"] = rng.standard_normal((HIDDEN, HIDDEN)).astype("float32") * 0.3
            w[f"b{i}.b"] = rng.standard_normal((HIDDEN,)).astype("float32") * 0.1
        else:
            for name in ("q", "k", "v", "o"):
                w[f"b{i}.{name}"] = rng.standard_normal((HIDDEN, HIDDEN)).astype("float32") * 0.2
            w[f"b{i}.up"] = rng.standard_normal((HIDDEN, 2 * HIDDEN)).astype("float32") * 0.2
            w[f"b{i}.down"] = rng.standard_normal((2 * HIDDEN, HIDDEN)).astype("float32") * 0.2
            w[f"b{i}.ln"] = (1.0 + 0.1 * rng.standard_normal((HIDDEN,))).astype("float32")
    return w


def _data(steps: int, batch: int, model: str):
    rng = np.random.default_rng(11)
    shape = (steps * batch, 3, IN) if model == "transformer" else (steps * batch, IN)
    xs = rng.standard_normal(shape).astype("float32")
    ys = rng.standard_normal(shape[:-1] + (IN if model == "scale" else OUT,)).astype("float32")
    return xs, ys


def _block_forward(F, model, p, i, h, shard=None):
    """One block on tensors; ``p`` maps names to parameters. ``shard`` = (mesh, dist) for TP."""
    import paddle

    if model == "mlp":
        return F.relu(paddle.matmul(h, p[f"b{i}.w"]) + p[f"b{i}.b"])
    if model == "scale":
        return paddle.tanh(h * p[f"b{i}.s"] + p[f"b{i}.c"])
    x = F.layer_norm(h, [HIDDEN]) * p[f"b{i}.ln"]
    q, k, v = (paddle.matmul(x, p[f"b{i}.{n}"]) for n in "qkv")
    att = F.softmax(paddle.matmul(q, k, transpose_y=True) / 4.0, axis=-1)
    h = h + paddle.matmul(paddle.matmul(att, v), p[f"b{i}.o"])
    x = F.layer_norm(h, [HIDDEN]) * p[f"b{i}.ln"]
    return h + paddle.matmul(F.gelu(paddle.matmul(x, p[f"b{i}.up"])), p[f"b{i}.down"])


def _optimizer(cfg, parameters):
    import paddle

    if cfg.get("optimizer", "sgd") == "adamw":
        return paddle.optimizer.AdamW(cfg.get("lr", 0.01), parameters=parameters)
    return paddle.optimizer.SGD(cfg.get("lr", 0.1), parameters=parameters)


def _set_hidden(cfg):
    """The hidden width for this config (module-wide: one config runs at a time per process)."""
    global HIDDEN
    HIDDEN = int(cfg.get("hidden", 16))


def dense_losses(cfg):
    """Single-process reference: the full batch per step (= mean over micro-batches), the
    config's optimizer unsharded. Its per-step losses (:func:`dense_run`)."""
    return dense_run(cfg)[0]


def dense_run(cfg):
    """:func:`dense_losses`' training: ``(per-step losses, {name: final weight})``, the names of
    :func:`_weights` (``w_in``, ``b0.w``, ...)."""
    import paddle

    _set_hidden(cfg)
    import paddle.nn.functional as F

    model, n = cfg.get("model", "mlp"), len(cfg["layer_meshes"])
    steps, batch = cfg["steps"], cfg.get("batch", BATCH)
    w = {k: paddle.create_parameter(v.shape, "float32", default_initializer=paddle.nn.initializer.Assign(v))
         for k, v in _weights(model, n).items()}
    opt = _optimizer(cfg, list(w.values()))
    xs, ys = _data(steps, batch, model)
    losses = []
    for s in range(steps):
        h = paddle.to_tensor(xs[s * batch:(s + 1) * batch])
        h = h if model == "scale" else paddle.matmul(h, w["w_in"])
        for i in range(n):
            h = _block_forward(F, model, w, i, h)
        out = h if model == "scale" else paddle.matmul(h, w["w_out"])
        loss = F.mse_loss(out, paddle.to_tensor(ys[s * batch:(s + 1) * batch]))
        loss.backward()
        opt.step()
        opt.clear_grad()
        losses.append(float(loss))
    return losses, {k: v.numpy() for k, v in w.items()}


def initial_weights(cfg) -> dict:
    """The weights every rank and the dense reference start from, by name."""
    _set_hidden(cfg)
    return _weights(cfg.get("model", "mlp"), len(cfg["layer_meshes"]))


def check_updates(name: str, per_rank: list, cfg, want_params: dict) -> float:
    """Parent side: each parameter's total update over the steps (final - initial weight, gathered
    from the ranks whose results hold it: ``per_rank[rank]["params"]``) against the dense model's
    (``want_params``, :func:`dense_run`), by max relative error and norm ratio
    (``scenario_ranks.grad_ok``). Asserts every parameter was reported and within bounds; returns
    the worst of the two measures. Meant for SGD, whose update is the gradient times the rate."""
    import scenario_ranks as scn

    init = initial_weights(cfg)
    worst = 0.0
    for key, want in want_params.items():
        held = {rank: r["params"][key] for rank, r in enumerate(per_rank) if key in r.get("params", {})}
        assert held, f"{name}: no rank reported parameter {key}"
        holder = next(iter(held.values()))   # assemble reads only the ranks of the parameter's mesh
        got = scn.assemble([held.get(rank, holder) for rank in range(len(per_rank))])
        rel, ratio = scn.grad_error(got.astype(np.float64) - init[key], want.astype(np.float64) - init[key])
        assert scn.grad_ok(rel, ratio), f"{name}: update of {key}: max rel err {rel:.2e}, norm ratio {ratio:.6f}"
        worst = max(worst, rel, abs(ratio - 1.0))
    return worst


def _weight_name(key: str) -> str:
    """The name :func:`_weights` gives a parameter of the distributed model's state dict
    (``blocks.3.w`` -> ``b3.w``; ``w_in`` and ``w_out`` as they are)."""
    parts = key.split(".")
    return f"b{parts[1]}.{parts[2]}" if parts[0] == "blocks" and len(parts) == 3 else key


def _build(cfg):
    """The distributed model, loader and strategy for ``cfg`` on this rank."""
    import paddle

    _set_hidden(cfg)
    import paddle.distributed as dist
    import paddle.nn.functional as F

    model, meshes_of = cfg.get("model", "mlp"), cfg["layer_meshes"]
    n, tp, dp = len(meshes_of), cfg.get("tp", 1), cfg.get("dp", 1)
    n_stages = max(meshes_of) + 1
    per = tp * dp
    one_d = cfg.get("mesh_1d", False)  # 1-D stage meshes [s] (only without TP/DP)
    meshes = [dist.ProcessMesh([s], dim_names=["dp"]) if one_d else
              dist.ProcessMesh(np.arange(s * per, (s + 1) * per).reshape(dp, tp).tolist(), dim_names=["dp", "mp"])
              for s in range(n_stages)]
    R, S = dist.Replicate(), dist.Shard

    def fit(placements):  # placements written for a [dp, mp] mesh, cut to the mesh's rank
        return placements[:1] if one_d else placements
    weights = _weights(model, n)

    def col(name):  # column parallel: output dim sharded on mp
        return [R, S(1)] if tp > 1 else [R, R]

    def row(name):
        return [R, S(0)] if tp > 1 else [R, R]

    def place(name):
        if name in ("w_in",):
            return meshes[meshes_of[0]], [R, R]
        if name == "w_out":
            return meshes[meshes_of[-1]], [R, R]
        i, kind = name[1:].split(".")
        mesh = meshes[meshes_of[int(i)]]
        if kind in ("q", "k", "v", "up") or (kind == "w" and int(i) % 2 == 0):
            return mesh, col(name)  # Megatron pairs: column-parallel, then row-parallel
        if kind in ("o", "down", "w"):
            return mesh, row(name)
        if kind == "b" and int(i) % 2 == 0:
            return mesh, [R, S(0)] if tp > 1 else [R, R]
        return mesh, [R, R]

    class Block(paddle.nn.Layer):
        def __init__(self, i):
            super().__init__()
            self.i = i
            self.p = {}
            for k in weights:
                if k.startswith(f"b{i}."):
                    mesh, pl = place(k)
                    par = self.create_parameter(weights[k].shape, default_initializer=paddle.nn.initializer.Assign(weights[k]))
                    par = dist.shard_tensor(par, mesh, fit(pl))
                    setattr(self, k.split(".")[1], par)
                    self.p[k] = par

        def forward(self, h):
            p = {k: getattr(self, k.split(".")[1]) for k in self.p}
            return _block_forward(F, model, p, self.i, h)

    class Net(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            for k in ("w_in", "w_out") if model != "scale" else ():
                mesh, pl = place(k)
                par = self.create_parameter(weights[k].shape, default_initializer=paddle.nn.initializer.Assign(weights[k]))
                setattr(self, k, dist.shard_tensor(par, mesh, fit(pl)))
            self.blocks = paddle.nn.LayerList([Block(i) for i in range(n)])

        def forward(self, x):
            h = x if model == "scale" else paddle.matmul(x, self.w_in)
            for i, block in enumerate(self.blocks):
                if i and meshes_of[i] != meshes_of[i - 1]:
                    h = dist.reshard(h, meshes[meshes_of[i]], fit([R, R]))
                    if cfg.get("r_to_p"):  # R -> P -> R on a stage without global rank 0: the identity
                        h = dist.reshard(dist.reshard(h, meshes[meshes_of[i]], fit([dist.Partial(), R])),
                                         meshes[meshes_of[i]], fit([R, R]))
                h = block(h)
            return h if model == "scale" else paddle.matmul(h, self.w_out)

    class Data(paddle.io.Dataset):
        def __init__(self):
            self.x, self.y = _data(cfg["steps"], cfg.get("batch", BATCH), model)

        def __getitem__(self, i):
            return self.x[i], self.y[i]

        def __len__(self):
            return len(self.x)

    net = Net()
    opt = _optimizer(cfg, net.parameters())
    if cfg.get("zero"):
        opt = dist.shard_optimizer(opt, getattr(dist, f"ShardingStage{cfg['zero']}")("dp", meshes[0]))
    loader = paddle.io.DataLoader(Data(), batch_size=cfg.get("batch", BATCH), shuffle=False)
    first, last = meshes[meshes_of[0]], meshes[meshes_of[-1]]
    shard_dims = "dp"  # also for dp == 1: a rank outside the data meshes needs a named dim (ShardDataloader)
    dist_loader = dist.shard_dataloader(loader, meshes=[first, last] if first != last else [first],
                                        shard_dims=shard_dims)

    def loss_fn(out, y):
        if cfg.get("label_to_loss_mesh") and y.process_mesh != out.process_mesh:
            y = dist.reshard(y, out.process_mesh, fit([R, R]))
        return F.mse_loss(out, y)

    strategy = dist.Strategy()
    if n_stages > 1:
        strategy.pipeline.enable = True
        strategy.pipeline.schedule_mode = cfg["schedule"]
        strategy.pipeline.accumulate_steps = cfg["acc"]
        strategy.pipeline.micro_batch_size = cfg.get("batch", BATCH) // cfg["acc"]
        strategy.pipeline.pp_degree = n_stages if cfg.get("vpp", 1) == 1 else n_stages
        strategy.pipeline.vpp_degree = cfg.get("vpp", 1)
        if cfg.get("vpp", 1) > 1:
            strategy.pipeline.vpp_seg_method = "Block"
        strategy.pipeline.split_backward = cfg.get("split_backward", False)
    return net, opt, dist_loader, loss_fn, strategy


def train_losses(cfg):
    """``dist.to_static`` training for ``cfg``; returns this rank's per-step losses (None where
    the rank computes no loss) and the job types of its plan."""
    import paddle.distributed as dist

    from paddle_ext.passes.static.passes import install_static
    from paddle_ext.testing import record_action

    if not cfg.get("no_static"):
        install_static()
    if cfg.get("paddle_r_to_p"):  # show Paddle's own R->P (zeros on a mesh without global rank 0)
        from paddle_ext.compat.ports.static_reshard import uninstall_static_reshard

        uninstall_static_reshard()
    logger = logging.getLogger("paddle_ext")
    logger.setLevel(logging.INFO)
    records = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(f"{record.levelname}: {record.getMessage()}")
    logger.addHandler(handler)
    if cfg.get("name_prefix"):  # the way out of a name clash with an earlier model (static-name-clash)
        import paddle

        with paddle.utils.unique_name.guard(cfg["name_prefix"]):
            net, opt, loader, loss_fn, strategy = _build(cfg)
    else:
        net, opt, loader, loss_fn, strategy = _build(cfg)
    dist.barrier()  # ranks arrive unevenly (op library load); fleet's group rendezvous follows
    record_action(f"building {cfg.get('schedule', 'no-pp')}")
    ahead_before = os.environ.get("PADDLE_EXT_RECV_AHEAD")
    if "recv_ahead" in cfg:  # read when the Engine lowers its receives, in the first step
        os.environ["PADDLE_EXT_RECV_AHEAD"] = "1" if cfg["recv_ahead"] else "0"
    dm = dist.to_static(net, loader, loss_fn, opt, strategy=strategy)
    dm.train()
    losses, times = [], []
    for step, (x, y) in enumerate(loader()):
        if step >= cfg["steps"]:
            break
        record_action(f"step {step}")
        start = time.perf_counter()
        loss = dm(x, y)
        times.append(time.perf_counter() - start)
        losses.append(None if loss is None else np.asarray(loss, dtype="float64").reshape(-1).tolist())
    if cfg.get("paddle_r_to_p"):
        from paddle_ext.compat.ports.static_reshard import install_static_reshard

        install_static_reshard()
    if "recv_ahead" in cfg:
        os.environ.pop("PADDLE_EXT_RECV_AHEAD", None)
        if ahead_before is not None:
            os.environ["PADDLE_EXT_RECV_AHEAD"] = ahead_before
    plan = dm._engine._job_plan
    jobs = [] if plan is None else [(j.type(), j.micro_batch_id()) for j in plan.job_list()]
    recv_plans = {}  # per channel into this rank, the byte sizes its receive ops were given
    for t in ([] if plan is None else plan.job_types()):
        for op in plan.ir_program(t).global_block().ops:
            if op.name() == "custom_op.pe_gloo_recv":
                recv_plans.setdefault(op.attrs()["ring"], set()).add(tuple(op.attrs()["plan"]))
    logger.removeHandler(handler)
    from scenario_ranks import rec

    params = {_weight_name(k): rec(v) for k, v in dm.state_dict("param").items()}   # this rank's, after training
    return {"losses": losses, "jobs": jobs, "log": records, "step_seconds": times, "params": params,
            "recv_plans": {ring: sorted(p) for ring, p in recv_plans.items()}, "comm_threads": _comm_threads()}


def _comm_threads() -> list:
    """The names of this rank's paddle-ext communication threads (``pe_gloo_*``), sorted."""
    names = []
    for tid in os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else []:
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue
        if name.startswith("pe_gloo_") and name != "pe_gloo_io":
            names.append(name)
    return sorted(names)


def world_group_again(cfg):
    """A new gloo group of all ranks, built while the world group's rendezvous keys "0".."n-1"
    are still in the global store (Paddle's ProcessGroupGloo writes and reads them un-prefixed,
    as fleet.init's group does in every dist.to_static). Returns the all_reduce of the ranks over
    the new group and whether those shared keys still hold the world group's values after it."""
    import paddle
    import paddle.distributed as dist
    from paddle.base import core

    from paddle_ext.compat.fixes.table import install as install_fixes

    install_fixes()
    store = core.create_or_get_global_tcp_store()
    world = dist.get_world_size()
    dist.barrier()
    before = [bytes(store.get(str(i))) for i in range(world)]
    dist.barrier()
    group = dist.new_group(list(range(world)))
    x = paddle.to_tensor([float(dist.get_rank())])
    dist.all_reduce(x, group=group)  # every member is past the group's rendezvous
    after = [bytes(store.get(str(i))) for i in range(world)]
    return {"sum": x.numpy().tolist(), "shared_keys_untouched": before == after}


def train_many(cfgs):
    """:func:`train_losses` for several configs in one process (one Engine after another);
    a config that raises records ``{"error": ...}`` and the rest still run. A config
    ``{"check": "world_group_again"}`` runs :func:`world_group_again` instead."""
    import paddle.distributed as dist
    import paddle_ext

    dist.init_parallel_env()  # a user's script joins the gloo world and turns paddle-ext on
    paddle_ext.install()

    out = []
    for cfg in cfgs:
        try:
            out.append(world_group_again(cfg) if cfg.get("check") == "world_group_again" else train_losses(cfg))
        except Exception as exc:  # noqa: BLE001 - the failure is the measurement
            import traceback

            traceback.print_exc()  # into workerlog.N as well
            out.append({"error": f"{type(exc).__name__}: {exc}"[:2000]})
    return out
