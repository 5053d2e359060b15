"""Rank functions for tests/multirank/test_outside_mesh.py (run through paddle_ext.testing.run_ranks).

A 2-stage model annotated for pipeline parallelism: every rank runs the whole forward; the
embedding, first matmul and relu live on mesh [0], the second matmul and the loss on mesh [1],
and paddle-ext's reshard moves the activation from one to the other.
"""
import numpy as np

VOCAB, HIDDEN, BATCH, SEQ = 11, 6, 2, 3


def weights():
    """The model's inputs and weights (the same on every rank and in the dense reference)."""
    rng = np.random.default_rng(0)
    emb, w1, w2 = (rng.standard_normal(s).astype("float32") for s in [(VOCAB, HIDDEN), (HIDDEN, HIDDEN), (HIDDEN, 4)])
    ids = rng.integers(0, VOCAB, (BATCH, SEQ)).astype("int64")
    return ids, emb, w1, w2


def _forward(paddle, ids, emb, w1, w2, to_stage_1=lambda h: h):
    import paddle.nn.functional as F

    h = F.relu(paddle.matmul(F.embedding(ids, emb), w1))
    out = paddle.matmul(to_stage_1(h), w2)
    return (out * out).mean()


def dense():
    """Loss and grads of the same model on one process, no DistTensor."""
    import paddle

    ids, *ws = weights()
    params = [paddle.to_tensor(w, stop_gradient=False) for w in ws]
    loss = _forward(paddle, paddle.to_tensor(ids), *params)
    loss.backward()
    return {"loss": float(loss.numpy()), **{n: p.grad.numpy() for n, p in zip(("emb", "w1", "w2"), params)}}


def gate_inputs():
    """Tokens and a gate weight for the LocalLayer case (the same on every rank and dense)."""
    rng = np.random.default_rng(1)
    return rng.standard_normal((4, HIDDEN)).astype("float32"), rng.standard_normal((HIDDEN, 3)).astype("float32")


def _gate_loss(paddle, logits):
    return (logits * logits).mean() + logits.sum(axis=0).max()


def dense_gate_grad():
    """The gate weight's gradient on one process: every token, no DistTensor."""
    import paddle

    x, w = gate_inputs()
    w = paddle.to_tensor(w, stop_gradient=False)
    _gate_loss(paddle, paddle.matmul(paddle.to_tensor(x), w)).backward()
    return w.grad.numpy()


def _local_gate_grads(paddle, dist):
    """A plain parameter that only a LocalLayer sees (PaddleNLP's MoE gate weight): its gradient
    is declared Partial(sum) over the ranks that split the tokens; two steps."""
    from paddle.distributed.auto_parallel.local_layer import LocalLayer

    mesh = dist.ProcessMesh([0, 1], dim_names=["dp"])
    x, w = gate_inputs()

    class Gate(LocalLayer):
        def __init__(self):
            super().__init__([(mesh, [dist.Shard(0)])], [None, (mesh, [dist.Partial(dist.ReduceType.kRedSum)])])

        def forward(self, tokens, weight):
            return paddle.matmul(tokens, weight)

    weight = paddle.create_parameter(list(w.shape), "float32")
    weight.set_value(paddle.to_tensor(w))
    grads = []
    for _ in range(2):
        tokens = dist.shard_tensor(paddle.to_tensor(x), mesh, [dist.Shard(0)])
        _gate_loss(paddle, Gate()(tokens, weight)).backward()
        grads.append(weight.grad.numpy())
        weight.clear_gradient()
    return {"grads": grads, "is_dist": weight.is_dist(), "is_leaf": weight.is_leaf}


def _matmul_on_mesh_0(paddle, dist):
    mesh = dist.ProcessMesh([0], dim_names=["x"])
    a = dist.shard_tensor(paddle.full([2, 3], 2.0), mesh, [dist.Replicate()])
    b = dist.shard_tensor(paddle.ones([3, 4]), mesh, [dist.Replicate()])
    return paddle.matmul(a, b)


def with_fix():
    """(a) a matmul on mesh [0] on both ranks; (b) the pp-by-annotation model, forward and backward."""
    import paddle
    import paddle.distributed as dist

    import paddle_ext

    dist.init_parallel_env()
    names = paddle_ext.install(pipeline_by_annotation=True)
    rank = dist.get_rank()
    res = {"names": names, "device_types": paddle.device.get_all_custom_device_type(),
           "env_device_type": dist.ParallelEnv().device_type}

    c = _matmul_on_mesh_0(paddle, dist)
    local = c._local_value()
    res["matmul"] = {"shape": list(c.shape), "mesh": c.process_mesh.process_ids,
                     "placements": [str(p) for p in c.placements], "local_numel": int(local.numel()),
                     "local": local.numpy() if rank == 0 else None}

    ids, emb, w1, w2 = weights()
    stage0, stage1 = dist.ProcessMesh([0], dim_names=["pp"]), dist.ProcessMesh([1], dim_names=["pp"])
    rep = [dist.Replicate()]

    def param(value, mesh):
        t = dist.shard_tensor(paddle.to_tensor(value), mesh, rep)
        t.stop_gradient = False
        return t

    params = {"emb": param(emb, stage0), "w1": param(w1, stage0), "w2": param(w2, stage1)}
    x = dist.shard_tensor(paddle.to_tensor(ids), stage0, rep)
    loss = _forward(paddle, x, params["emb"], params["w1"], params["w2"],
                    to_stage_1=lambda h: dist.reshard(h, stage1, rep))
    loss.backward()   # on rank 0 the loss's mesh excludes it: the seed patch supplies the ones
    res["loss_mesh"] = loss.process_mesh.process_ids
    res["loss"] = float(loss._local_value().numpy()) if rank in loss.process_mesh.process_ids else None
    res["grads"] = {n: p.grad._local_value().numpy() for n, p in params.items()
                    if rank in p.process_mesh.process_ids}

    # a comparison with a number on a tensor of stage 1 (the causal-LM loss: labels.unsqueeze(2),
    # then cross_entropy's `label != ignore_index`; a non-member's unsqueeze output sits at CPU)
    labels = dist.shard_tensor(paddle.to_tensor(np.array([0, 1, 2, 0])), stage1, rep).unsqueeze(1)
    kept = labels != 0
    res["compare"] = {"mesh": kept.process_mesh.process_ids, "shape": list(kept.shape), "dtype": str(kept.dtype),
                      "local": kept._local_value().numpy() if rank == 1 else None}

    # set_value / set_state_dict into a layer of stage 1 (loading a checkpoint into a pipeline)
    lin = paddle.nn.Linear(3, 2)
    lin.weight = dist.shard_tensor(lin.weight, stage1, rep)
    lin.bias = dist.shard_tensor(lin.bias, stage1, rep)
    w = np.arange(6, dtype="float32").reshape(3, 2)
    lin.weight.set_value(w)
    lin.set_state_dict({"weight": paddle.to_tensor(w + 1), "bias": paddle.to_tensor(np.ones(2, "float32"))})
    res["loaded"] = [lin.weight._local_value().numpy(), lin.bias._local_value().numpy()] if rank == 1 else None
    try:
        lin.weight.set_value(np.zeros((2, 3), "float32"))   # the wrong shape: every rank refuses alike
        res["wrong_shape"] = "accepted"
    except AssertionError as exc:
        res["wrong_shape"] = f"{type(exc).__name__}: {exc}"

    res["local_gate"] = _local_gate_grads(paddle, dist)

    # uninstall_opt_in() restores Tensor.backward, set_value and the comparisons (the device stays):
    # a non-member's backward, set_value and comparison with a number fail again
    from paddle_ext.compat.fixes.table import uninstall_opt_in

    uninstall_opt_in()
    try:
        lin.weight.set_value(w)
        res["unpatched_set_value"] = "ok"
    except RuntimeError as exc:
        res["unpatched_set_value"] = str(exc)
    try:
        res["unpatched_compare"] = str(list((labels != 0).shape))
    except RuntimeError as exc:
        res["unpatched_compare"] = str(exc)
    other = dist.shard_tensor(paddle.ones([2, 2]), dist.ProcessMesh([1 - rank], dim_names=["x"]), rep)
    other.stop_gradient = False
    try:
        (other * other).mean().backward()
        res["unpatched_backward"] = "ran"
    except RuntimeError as exc:
        res["unpatched_backward"] = str(exc)
    return res


def without_fix():
    """(c) the same matmul with paddle-ext's default install: Paddle alone's failure on rank 1."""
    import paddle
    import paddle.distributed as dist

    import paddle_ext

    dist.init_parallel_env()
    paddle_ext.install()
    # a stage-1 tensor first: rank 0 holds one whose mesh excludes it (and runs no op on it)
    dist.shard_tensor(paddle.ones([2]), dist.ProcessMesh([1], dim_names=["x"]), [dist.Replicate()])
    c = _matmul_on_mesh_0(paddle, dist)
    return {"shape": list(c.shape)}
