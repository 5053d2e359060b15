"""Training scenarios of Paddle's ``test/auto_parallel``, re-written (2 ranks, CPU):
shard_optimizer with ShardingStage1/2/3 (semi_auto_parallel_sharding_stage_{1,2,3}.py, with the
multi-dim mesh, AMP O2 and ``dist.to_static`` variants), ``dist.parallelize``
(hybrid_strategy/parallel_api.py: ColWise/RowWise/SequenceParallel plans, ``dp_config`` sharding
levels, ``pp_config``), pipelining (PP_Schedules_demo.py), ``dist.to_static``
(semi_auto_parallel_dist_to_static_api.py) and checkpoint save/load
(semi_auto_save_state_dict.py / semi_auto_load_state_dict.py). Each in the process state its file
uses: only the AMP O2 variant and the pipeline schedules call ``dist.init_parallel_env()``.

Gradients, not only losses: after the file's own training (AdamW; AdamW's update does not see a
gradient's scale), each shard_optimizer and ``dist.parallelize`` scenario builds its model again
from the same seed, wrapped the same way but with SGD (``PROBE_LR``), and takes one step, on the
ranks and in one dense process: per parameter the initial weight (``init:``, bit for bit), the
gradient (``grad:``) and the weight after the step (``step1:``: its update ``-lr * grad`` is what
the wrapped optimizer applied), assembled by their placements and checked by
``scenario_ranks.classify``. ``GRAD_SCALE_ENV`` scales named gradients on the ranks (the tests of
the tests: the checks must then fail). The pipelining schedules (no optimizer) check each layer's
gradient; ``dist.to_static`` (gradients inside the static program) each parameter's first update.
"""
from __future__ import annotations

import os

import numpy as np

from scenario_ranks import Scenario, rec

STEPS = 3
PROBE_LR = 1.0   # SGD's update is -lr * grad: at lr 1 it stands well above a weight's rounding
GRAD_SCALE_ENV = "PADDLE_EXT_TEST_GRAD_SCALE"   # "<param>=<factor>,...": the tests of the tests


def _cpu():
    import paddle

    paddle.set_device("cpu")


def _grad_scales() -> dict:
    """``GRAD_SCALE_ENV="weight=2,bias=0.5@step"`` -> {"weight": (2.0, "grad"), "bias": (0.5, "step")}:
    a factor for a parameter's gradient, applied before it is recorded (``grad``, the default) or
    after, just before the optimizer's step (``@step``: only the applied update sees it)."""
    out = {}
    for item in os.environ.get(GRAD_SCALE_ENV, "").split(","):
        if item.strip():
            name, value = item.split("=")
            factor, _, when = value.partition("@")
            out[name.strip()] = (float(factor), when or "grad")
    return out


def _scale(p, factor):
    """Multiply ``p``'s global gradient by ``factor`` (every rank's local value, whatever the placement)."""
    (p.grad._local_value() if p.grad.is_dist() else p.grad).scale_(factor)


def _snap(t, distributed):
    """A copy of ``t`` as the parent needs it: :func:`rec` on the ranks, numpy in the dense run."""
    return rec(t) if distributed else np.array(t.numpy(), copy=True)


def sgd_probe(named, backward, opt, distributed, scales=None) -> dict:
    """One step of ``opt`` (SGD, wrapped as the scenario wraps its optimizer): per parameter of
    ``named`` ((name, param) pairs) its initial value, its gradient after ``backward()`` and its
    value after the step. On the ranks, the gradients named by ``scales`` (default: by
    ``GRAD_SCALE_ENV``; see :func:`_grad_scales`) are scaled before they are recorded and applied
    (or, ``@step``, applied only)."""
    named = list(named)
    out = {f"init:{n}": _snap(p, distributed) for n, p in named}
    backward()
    if scales is None:   # names of other scenarios' models: ignored
        scales = _grad_scales() if distributed else {}
    for n, p in named:
        if scales.get(n, (1.0, ""))[1] == "grad":
            _scale(p, scales[n][0])
        out[f"grad:{n}"] = _snap(p.grad, distributed)
        if scales.get(n, (1.0, ""))[1] == "step":
            _scale(p, scales[n][0])
    opt.step()
    opt.clear_grad()
    out.update({f"step1:{n}": _snap(p, distributed) for n, p in named})
    return out


def sharding(stage, multi_mesh=False):
    """shard_optimizer(AdamW, ShardingStage<n>("dp", mesh)) on Linear(10,10), input S0 on dp,
    5 steps of ``linear(batch).backward()``; weight and bias against the single-card run. Then
    the same with SGD for one step: gradients and update against dense (:func:`sgd_probe`)."""
    import paddle
    import paddle.distributed as dist

    _cpu()
    mesh = dist.ProcessMesh([0, 1], dim_names=["dp"])

    def build(sharded, make_opt):
        paddle.seed(2023)
        linear = paddle.nn.Linear(10, 10)
        batch = paddle.rand([10, 10])
        opt = make_opt(linear.parameters())
        if sharded:
            dist.auto_parallel.set_mesh(dist.ProcessMesh([[0, 1]], dim_names=["pp", "dp"]) if multi_mesh else mesh)
            batch = dist.shard_tensor(batch, mesh, [dist.Shard(0)])
            cls = getattr(dist, f"ShardingStage{stage}")
            opt = dist.shard_optimizer(opt, cls(sharding_mesh_dim="dp") if multi_mesh else cls("dp", mesh))
        return linear, batch, opt

    def train(sharded):
        linear, batch, opt = build(sharded, lambda ps: paddle.optimizer.AdamW(parameters=ps))
        for _ in range(5):
            linear(batch).backward()
            opt.step()
            opt.clear_grad()
        return linear

    def probe(sharded):
        linear, batch, opt = build(sharded, lambda ps: paddle.optimizer.SGD(PROBE_LR, parameters=ps))
        return sgd_probe(linear.named_parameters(), lambda: linear(batch).backward(), opt, sharded)

    dense = train(False)
    model = train(True)
    outputs = {"weight": rec(model.weight), "bias": rec(model.bias)}
    want = {"weight": dense.weight.numpy(), "bias": dense.bias.numpy()}
    want.update(probe(False))
    outputs.update(probe(True))
    return outputs, want


def sharding_amp_o2():
    """semi_auto_parallel_sharding_stage_1.py, inplace-master-grad case: init_parallel_env,
    [[0,1]] (pp, dp) mesh, ShardingStage1, paddle.amp.decorate O2 with master_grad; the last loss
    against the same AMP O2 training in one process (bfloat16: the CPU's half type)."""
    import paddle
    import paddle.distributed as dist

    _cpu()
    if not dist.is_initialized():
        dist.init_parallel_env()
    mesh = dist.ProcessMesh([0, 1], dim_names=["dp"])

    def train(sharded):
        paddle.seed(2023)
        model = paddle.nn.Linear(10, 10)
        batch = paddle.rand([10, 10])
        opt = paddle.optimizer.AdamW(parameters=model.parameters())
        if sharded:
            dist.auto_parallel.set_mesh(dist.ProcessMesh([[0, 1]], dim_names=["pp", "dp"]))
            batch = dist.shard_tensor(batch, mesh, [dist.Shard(0)])
            opt = dist.shard_optimizer(opt, dist.ShardingStage1(sharding_mesh_dim="dp"))
        model, opt = paddle.amp.decorate(model, optimizers=opt, level="O2", dtype="bfloat16", master_grad=True)
        losses = []
        for _ in range(STEPS):
            with paddle.amp.auto_cast(level="O2", dtype="bfloat16"):
                loss = model(batch).astype("float32").mean()
            loss.backward()
            opt.step()
            opt.clear_grad()
            losses.append(loss)
        return losses

    dense = train(False)
    got = train(True)
    return ({f"loss{i}": rec(x) for i, x in enumerate(got)}, {f"loss{i}": x.numpy() for i, x in enumerate(dense)})


class _Data:
    """16 samples of (x[8], y[4]), the same on every rank."""

    def __init__(self):
        rng = np.random.default_rng(7)
        self.x = rng.standard_normal((16, 8)).astype("float32")
        self.y = rng.standard_normal((16, 4)).astype("float32")

    def loader(self):
        import paddle

        class DS(paddle.io.Dataset):
            def __getitem__(_, i):
                return self.x[i], self.y[i]

            def __len__(_):
                return 16
        return paddle.io.DataLoader(DS(), batch_size=4, shuffle=False)


def _mlp(mesh=None, mp=False):
    import paddle
    import paddle.distributed as dist

    paddle.seed(5)
    net = paddle.nn.Sequential(paddle.nn.Linear(8, 16), paddle.nn.ReLU(), paddle.nn.Linear(16, 4))
    if mp:
        net[0].weight = dist.shard_tensor(net[0].weight, mesh, [dist.Shard(1)])
        net[0].bias = dist.shard_tensor(net[0].bias, mesh, [dist.Shard(0)])
        net[2].weight = dist.shard_tensor(net[2].weight, mesh, [dist.Shard(0)])
    return net


def _dense_losses(data, steps):
    import paddle

    net = _mlp()
    opt = paddle.optimizer.SGD(0.1, parameters=net.parameters())
    out = []
    for i, (x, y) in enumerate(data.loader()):
        if i == steps:
            break
        loss = paddle.nn.MSELoss()(net(x), y)
        loss.backward()
        opt.step()
        opt.clear_grad()
        out.append(float(loss))
    return out


def _dense_first_step(data) -> dict:
    """The dense MLP's weights before and after its first SGD step (``init:``/``step1:``)."""
    import paddle

    net = _mlp()
    opt = paddle.optimizer.SGD(0.1, parameters=net.parameters())
    out = {f"init:{n}": np.array(q.numpy(), copy=True) for n, q in net.named_parameters()}
    x, y = next(iter(data.loader()))
    paddle.nn.MSELoss()(net(x), y).backward()
    opt.step()
    out.update({f"step1:{n}": np.array(q.numpy(), copy=True) for n, q in net.named_parameters()})
    return out


def to_static(kind):
    """dist.to_static(layer, shard_dataloader(...), MSELoss, SGD) trained for 4 steps: "dp"
    (data S0), "mp" (weights Shard), "stage1" (ShardingStage1 optimizer, as in
    semi_auto_parallel_sharding_stage_1.py's to_static case); losses against dense. The gradient
    lives in the static program: each parameter's update of the first step (the DistModel's
    ``state_dict()`` before and after it; SGD: ``-0.1 * grad``) against the dense step's."""
    import paddle
    import paddle.distributed as dist

    _cpu()
    mesh = dist.ProcessMesh([0, 1], dim_names=["dp" if kind != "mp" else "mp"])
    dist.auto_parallel.set_mesh(mesh)
    data = _Data()
    dense = _dense_losses(data, 4)
    want = _dense_first_step(data)
    net = _mlp(mesh, mp=kind == "mp")
    names = [n for n, _ in net.named_parameters()]
    opt = paddle.optimizer.SGD(0.1, parameters=net.parameters())
    if kind == "stage1":
        opt = dist.shard_optimizer(opt, dist.ShardingStage1("dp", mesh))
    loader = dist.shard_dataloader(data.loader(), meshes=[mesh], shard_dims=0 if kind != "mp" else None)
    model = dist.to_static(net, loader, paddle.nn.MSELoss(), opt)
    model.train()
    params = {}
    params.update({f"init:{n}": rec(v) for n, v in model.state_dict().items() if n in names})
    losses = []
    for x, y in loader():
        losses.append(np.asarray(model(x, y), dtype="float32").reshape(()))
        if len(losses) == 1:
            params.update({f"step1:{n}": rec(v) for n, v in model.state_dict().items() if n in names})
    local = np.stack(losses[:4])
    # each rank's returned loss: its own micro-batch's (dp) or the whole batch's (mp): average
    got = ("T", local, [("P", "avg")], [2], [0, 1], [4])
    want["losses"] = np.array(dense, dtype="float32")
    return dict(params, losses=got), want


def _lm(paddle, vocab=32, hidden=16):
    nn = paddle.nn

    class MLP(nn.Layer):
        def __init__(self):
            super().__init__()
            self.up = nn.Linear(hidden, 2 * hidden)
            self.down = nn.Linear(2 * hidden, hidden)

        def forward(self, x):
            return self.down(paddle.nn.functional.relu(self.up(x)))

    class Layer(nn.Layer):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(hidden)
            self.mlp = MLP()

        def forward(self, x):
            return x + self.mlp(self.norm(x))

    class LM(nn.Layer):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, hidden)
            self.layers = nn.LayerList([Layer() for _ in range(2)])
            self.lm_head = nn.Linear(hidden, vocab)

        def forward(self, ids):
            h = self.embed(ids)
            for layer in self.layers:
                h = layer(h)
            return self.lm_head(h)

    paddle.seed(11)
    return LM()


def parallelize(plan):
    """hybrid_strategy/parallel_api.py: dist.parallelize(model, optimizer, mesh, config) with an
    mp plan (ColWise/RowWise), a sequence-parallel plan, dp_config sharding levels 0..3 or
    pp_config; 3 AdamW steps of a 2-layer LM; losses against the same model dense. Then the same
    with SGD for one step: gradients and update against dense (:func:`sgd_probe`)."""
    import paddle
    import paddle.distributed as dist

    _cpu()
    rng = np.random.default_rng(3)
    ids = rng.integers(0, 32, size=(STEPS, 4, 8)).astype("int64")
    labels = rng.integers(0, 32, size=(STEPS, 4, 8)).astype("int64")

    def loss_of(model, s, shard=None):
        x, y = paddle.to_tensor(ids[s]), paddle.to_tensor(labels[s])
        if shard:
            x, y = shard(x), shard(y)
        return paddle.nn.functional.cross_entropy(model(x), y.unsqueeze(-1)).mean()

    def train(model, opt, shard=None):
        out = []
        for s in range(STEPS):
            loss = loss_of(model, s, shard)
            loss.backward()
            opt.step()
            opt.clear_grad()
            out.append(loss)
        return out

    dense_model = _lm(paddle)
    dense = train(dense_model, paddle.optimizer.AdamW(0.01, parameters=dense_model.parameters()))
    kind = plan.split(":")[0]
    # the file's mesh: ("dp", "pp", "mp"), or only "dp" when pp * mp == 1
    shape = {"mp": [1, 1, 2], "sp": [1, 1, 2], "pp": [1, 2, 1]}.get(kind)
    mesh = dist.ProcessMesh(np.arange(2).reshape(shape).tolist(), dim_names=["dp", "pp", "mp"]) if shape \
        else dist.ProcessMesh([0, 1], dim_names=["dp"])
    dist.auto_parallel.set_mesh(mesh)
    config, shard = {}, None
    if kind == "mp":
        config["mp_config"] = {"parallelize_plan": {
            "embed": dist.ColWiseParallel(gather_output=True),
            "layers.*.mlp.up": dist.ColWiseParallel(),
            "layers.*.mlp.down": dist.RowWiseParallel(),
            "lm_head": dist.ColWiseParallel(gather_output=True)}}
    elif kind == "sp":
        config["mp_config"] = {"parallelize_plan": {
            "embed": [dist.ColWiseParallel(), dist.SequenceParallelBegin()],
            "layers.*.mlp.up": dist.ColWiseParallel(),
            "layers.*.mlp.down": dist.RowWiseParallel(),
            "layers.*.mlp": dist.SequenceParallelDisable(need_transpose=False),
            "lm_head": [dist.ColWiseParallel(gather_output=True), dist.SequenceParallelEnd()]}}
    elif kind == "dp":
        config["dp_config"] = {"sharding_level": int(plan.split(":")[1])}

        def shard(t):
            return dist.shard_tensor(t, mesh, [dist.Shard(0)])
    else:
        config["pp_config"] = {"split_spec": "layers"}
    model = _lm(paddle)
    model, opt = dist.parallelize(model, paddle.optimizer.AdamW(0.01, parameters=model.parameters()),
                                  config=config)
    got = train(model, opt, shard)
    outputs = {f"loss{i}": rec(x) for i, x in enumerate(got)}
    want = {f"loss{i}": x.numpy() for i, x in enumerate(dense)}

    dense_model = _lm(paddle)
    want.update(sgd_probe(dense_model.named_parameters(), lambda: loss_of(dense_model, 0).backward(),
                          paddle.optimizer.SGD(PROBE_LR, parameters=dense_model.parameters()), False))
    model = _lm(paddle)
    names = {id(p): n for n, p in model.named_parameters()}   # the dense model's names
    model, opt = dist.parallelize(model, paddle.optimizer.SGD(PROBE_LR, parameters=model.parameters()),
                                  config=config)
    named = [(names.get(id(p), n), p) for n, p in model.named_parameters()]
    outputs.update(sgd_probe(named, lambda: loss_of(model, 0, shard).backward(), opt, True))
    return outputs, want


def pipeline(schedule):
    """PP_Schedules_demo.py: init_parallel_env, set_mesh(pp), a 4-layer MLP split 2+2 into
    PipelineStage's, 4 micro-batches, MSE; the last stage's summed loss against dense, and each
    layer's initial weights (bit for bit) and gradients, from the rank of its stage, against the
    same MLP's backward of the summed micro-batch losses in one process."""
    import paddle
    import paddle.distributed as dist
    from paddle.distributed.auto_parallel.pipelining import schedules
    from paddle.distributed.auto_parallel.pipelining.stage import PipelineStage

    _cpu()
    if not dist.is_initialized():
        dist.init_parallel_env()
    rank = dist.get_rank()
    mesh = dist.ProcessMesh([0, 1], dim_names=["pp"])
    dist.auto_parallel.set_mesh(mesh)
    paddle.seed(9)
    dense_layers = [paddle.nn.Linear(8, 8) for _ in range(4)]
    paddle.seed(9)
    layers = [paddle.nn.Linear(8, 8) for _ in range(4)]
    x_np = np.random.default_rng(1).standard_normal((8, 8)).astype("float32")
    y_np = np.random.default_rng(2).standard_normal((8, 8)).astype("float32")
    ref = paddle.to_tensor(x_np)
    dense = 0.0
    for mb in range(4):
        h = ref[mb * 2:(mb + 1) * 2]
        for layer in layers:
            h = layer(h)
        dense += float(paddle.nn.functional.mse_loss(h, paddle.to_tensor(y_np[mb * 2:(mb + 1) * 2])))
    want = {f"init:{i}.{n}": np.array(q.numpy(), copy=True) for i, lay in enumerate(dense_layers)
            for n, q in lay.named_parameters()}
    total = 0.0
    for mb in range(4):
        h = paddle.to_tensor(x_np[mb * 2:(mb + 1) * 2])
        for layer in dense_layers:
            h = layer(h)
        total = total + paddle.nn.functional.mse_loss(h, paddle.to_tensor(y_np[mb * 2:(mb + 1) * 2]))
    total.backward()
    want.update({f"grad:{i}.{n}": np.array(q.grad.numpy(), copy=True) for i, lay in enumerate(dense_layers)
                 for n, q in lay.named_parameters()})

    def held(i, t):   # layer i's tensor as the rank of its stage holds it: a 1-rank mesh
        return ("T", np.array(t.numpy(), copy=True) if i // 2 == rank else None, [("R",)], [1], [i // 2],
                list(t.shape))
    got = {f"init:{i}.{n}": held(i, q) for i, lay in enumerate(layers) for n, q in lay.named_parameters()}
    stage_layer = paddle.nn.Sequential(*layers[rank * 2:rank * 2 + 2])
    stage = PipelineStage(stage_layer, stage_index=rank, num_stages=2)
    cls = {"FThenB": schedules.ScheduleFThenB, "1F1B": schedules.Schedule1F1B}[schedule]
    sched = cls(stage, n_microbatches=4, loss_fn=lambda out, y: paddle.nn.functional.mse_loss(out, y))
    if rank == 0:
        sched.step(paddle.to_tensor(x_np))
        local = np.zeros((), "float32")
    else:
        losses = []
        sched.step(target=paddle.to_tensor(y_np), losses=losses)
        local = np.asarray(sum(float(v) for v in losses), dtype="float32")
    got.update({f"grad:{i}.{n}": held(i, q.grad) if i // 2 == rank else held(i, q)
                for i, lay in enumerate(layers) for n, q in lay.named_parameters()})
    got["loss"] = ("T", local if rank == 1 else None, [("R",)], [1], [1], [])
    want["loss"] = np.asarray(dense, dtype="float32")
    return got, want


def checkpoint(src, dst):
    """semi_auto_save_state_dict.py / semi_auto_load_state_dict.py: dist.save_state_dict of a
    Linear's state with ``src`` placements, dist.load_state_dict into ``dst`` placements."""
    import paddle
    import paddle.distributed as dist

    _cpu()
    mesh = dist.ProcessMesh([0, 1], dim_names=["x"])
    path = os.path.join(os.environ["SCENARIO_WORK_DIR"], f"ckpt_{src}_{dst}")
    w = np.random.default_rng(4).standard_normal((6, 8)).astype("float32")

    def pl(s):
        return [dist.Replicate() if s == "R" else dist.Shard(int(s[1:]))]
    saved = dist.shard_tensor(paddle.to_tensor(w), mesh, pl(src))
    dist.save_state_dict({"w": saved}, path)
    target = dist.shard_tensor(paddle.zeros([6, 8]), mesh, pl(dst))
    state = {"w": target}
    dist.load_state_dict(state, path)
    return {"loaded": rec(state["w"])}, {"loaded": w}


SCENARIOS = {}
for _s in (1, 2, 3):
    SCENARIOS[f"shard_optimizer[ShardingStage{_s}]"] = Scenario(
        lambda s=_s: sharding(s), f"semi_auto_parallel_sharding_stage_{_s}.py")
    SCENARIOS[f"shard_optimizer[ShardingStage{_s}, mesh [[0,1]] (pp,dp)]"] = Scenario(
        lambda s=_s: sharding(s, True), f"semi_auto_parallel_sharding_stage_{_s}.py")
SCENARIOS["shard_optimizer[ShardingStage1, AMP O2 master_grad]"] = Scenario(
    sharding_amp_o2, "semi_auto_parallel_sharding_stage_1.py", group="init", rtol=2e-2, atol=2e-2)
for _k in ("dp", "mp", "stage1"):
    SCENARIOS[f"dist.to_static[{_k}]"] = Scenario(
        lambda k=_k: to_static(k), "semi_auto_parallel_dist_to_static_api.py" if _k != "stage1"
        else "semi_auto_parallel_sharding_stage_1.py (to_static)", group="to_static", timeout=120,
        isolated_in=("alone",))   # Paddle alone's failed Engine poisons the next to_static
for _p in ("mp", "sp", "dp:0", "dp:1", "dp:2", "dp:3", "pp"):
    SCENARIOS[f"dist.parallelize[{_p}]"] = Scenario(
        lambda p=_p: parallelize(p), "hybrid_strategy/parallel_api.py",
        group="isolated" if _p == "pp" else "noinit", timeout=60)
# FThenB with the AMP O2 case in the launch that calls init_parallel_env; 1F1B in a launch of its
# own, beside the others (Paddle hangs in it until gloo's 30 s timeout, after which the ranks'
# groups are spent)
SCENARIOS["pipelining[FThenB]"] = Scenario(lambda: pipeline("FThenB"), "PP_Schedules_demo.py", group="init")
SCENARIOS["pipelining[1F1B]"] = Scenario(lambda: pipeline("1F1B"), "PP_Schedules_demo.py", group="isolated",
                                         timeout=120, background=True)
for _a, _b in (("S0", "S0"), ("S0", "S1"), ("S1", "R"), ("R", "S0")):
    SCENARIOS[f"checkpoint[save {_a}, load {_b}]"] = Scenario(
        lambda a=_a, b=_b: checkpoint(a, b), "semi_auto_save_state_dict.py / semi_auto_load_state_dict.py")
