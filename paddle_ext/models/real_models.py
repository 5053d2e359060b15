"""PaddleNLP's auto-parallel models trained on CPU ranks, against the dense single-process model.

Used by ``tests/multirank/test_real_models.py`` and ``paddle-ext compat --models``. Each rank
function is what a user's PaddleNLP pre-training script does (the process state of
``llm/auto_parallel/*/run_pretrain_auto.py`` + ``AutoTrainer``): ``fleet.auto.create_mesh`` with
``["pp", "dp", "mp"]``, ``fleet.init(is_collective=True)`` with the hybrid degrees, the model built
under ``paddle.LazyGuard`` with the model's own placements, ``dist.shard_dataloader`` over "dp",
``dist.shard_optimizer`` (ZeRO stage on "dp"), then dygraph steps or ``dist.to_static``. The mode
decides what paddle-ext does first: ``alone`` (nothing), ``install`` or ``enable``
(``install()`` + ``enable()``).

Weights are not random draws of the ranks: after the model is built every parameter is set from
one deterministic global array per parameter name (each rank writes its own shard), so the dense
model (PaddleNLP's non-auto class, or the auto class on one process where no non-auto twin
matches) starts from the same weights.
"""
from __future__ import annotations

import re
import zlib

import numpy as np

from ..compat.ports.internals import is_initialized, local_value
from ..parallel_plan import ParallelPlan, parse_plan
from .grad_parity import StepRecorder

STEPS = 3
BATCH = 4          # global batch: divisible by dp 1, 2, 4
SEQ = 16           # divisible by mp (sequence parallel)
VOCAB = 128
LR = 1e-3          # AdamW's, as AutoTrainer trains
SGD_LR = 0.1       # SGD's in the gradient-parity runs: an update well above a weight's float32 rounding
INSTALL_HINT = 'PaddleNLP is not importable: install the test extra: pip install -e ".[cpu,test,models]"'

# the matrix's plans under the names its report uses, each a ParallelPlan (its text form on the right)
PLANS = {name: parse_plan(text, batch=BATCH) for name, text in (
    ("single", "single"), ("dp2", "dp2"), ("dp4", "dp4"), ("zero3-dp2", "zero3d2"), ("mp2", "tp2"),
    ("mp2-sp", "sp2-tp2"), ("pp2", "pp2"), ("dp2mp2", "dp2-tp2"), ("zero1-dp2mp2", "zero1d2-tp2"),
    ("zero2-dp2mp2", "zero2d2-tp2"), ("zero3-dp2mp2", "zero3d2-tp2"), ("pp2mp2", "pp2-tp2"), ("pp2dp2", "pp2-dp2"))}
MODELS = ("gpt", "qwen", "deepseek_v2", "llama")
AUTO_REFERENCE = ("qwen", "deepseek_v2", "llama")  # dense reference: the auto class on one process
MODES = ("alone", "install", "enable")
# install(pipeline_by_annotation=True): the opt-in fix that lets pipeline-by-annotation ranks run the
# stages they are not in (docs/compatibility.md, "Ranks outside a mesh"); not a matrix column
OUTSIDE_MODE = "install-outside"
# install(static_engine=True, pipeline_by_annotation=True) + enable(): every opt-in on, what pipeline
# by annotation needs (ranks outside a stage's mesh; through dist.to_static the static Engine's
# gloo send/recv between stages); the matrix's fourth column
OUTSIDE_STATIC_MODE = "enable-outside-static"
MATRIX_MODES = MODES + (OUTSIDE_STATIC_MODE,)
MODE_TITLES = {"alone": "Paddle alone", "install": "install()", "enable": "install()+enable()",
               OUTSIDE_STATIC_MODE: "install(static_engine, pipeline_by_annotation)+enable()"}
EXECS = ("dygraph", "to_static")


def _casual_mask_switch():
    """PaddleNLP's own switch (``USE_CASUAL_MASK``), as its run scripts set it: without it Qwen's
    auto model builds a bfloat16 mask with ``paddle.where``, which has no bfloat16 CPU kernel."""
    import os

    os.environ["USE_CASUAL_MASK"] = "True"


def require_paddlenlp():
    """Import PaddleNLP or raise an ImportError that says how to install it."""
    import importlib

    try:
        importlib.import_module("paddlenlp")
    except Exception as exc:  # a broken pin shows as any import-time error
        raise ImportError(f"{INSTALL_HINT} ({type(exc).__name__}: {exc})") from exc


def config(model: str, mp: int = 1, sp: bool = False):
    """A tiny random config: hidden 64, 2 layers, vocab 128, no dropout, nothing downloaded."""
    require_paddlenlp()
    common = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  max_position_embeddings=64, tensor_parallel_degree=mp, sequence_parallel=sp,
                  seq_length=SEQ, use_flash_attention=False, use_recompute=False, recompute=False)
    if model == "gpt":
        from paddlenlp.transformers import GPTConfig

        cfg = GPTConfig(intermediate_size=128, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                        fuse_attention_qkv=False, **common)
    elif model == "qwen":
        from paddlenlp.transformers import QWenConfig

        cfg = QWenConfig(intermediate_size=256, kv_channels=16, use_fused_rms_norm=False, use_fused_rope=False,
                         **common)
    elif model == "deepseek_v2":
        from paddlenlp.transformers.deepseek_v2 import DeepseekV2Config

        cfg = DeepseekV2Config(num_key_value_heads=4, intermediate_size=128, moe_intermediate_size=32,
                               n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
                               first_k_dense_replace=1, q_lora_rank=None, kv_lora_rank=16, qk_nope_head_dim=8,
                               qk_rope_head_dim=8, v_head_dim=16, topk_method="noaux_tc", n_group=1, topk_group=1,
                               seq_aux=False, aux_loss_alpha=0.0, moe_group="dp", attention_dropout=0.0, rope_scaling=None,
                               **common)
    elif model == "llama":
        from paddlenlp.transformers import LlamaConfig

        cfg = LlamaConfig(intermediate_size=128, num_key_value_heads=4, use_fused_rms_norm=False,
                          use_fused_rope=False, fuse_attention_qkv=False, fuse_attention_ffn=False, **common)
    else:
        raise ValueError(f"unknown model {model!r}; known: {MODELS}")
    cfg.tensor_parallel_output = False
    return cfg


def classes(model: str, auto: bool):
    """(model class, criterion class or None when the model computes its own loss)."""
    if model == "gpt":
        if auto:
            from paddlenlp.transformers.gpt.modeling_auto import GPTForCausalLMAuto, GPTPretrainingCriterionAuto

            return GPTForCausalLMAuto, GPTPretrainingCriterionAuto
        from paddlenlp.transformers.gpt.modeling import GPTForCausalLM, GPTPretrainingCriterion

        return GPTForCausalLM, GPTPretrainingCriterion
    if model == "qwen":
        if auto:
            from paddlenlp.transformers.qwen.modeling_auto import QWenForCausalLM3DAuto, QWenPretrainingCriterionAuto

            return QWenForCausalLM3DAuto, QWenPretrainingCriterionAuto
        from paddlenlp.transformers.qwen.modeling import QWenForCausalLM, QWenPretrainingCriterion

        return QWenForCausalLM, QWenPretrainingCriterion
    if model == "deepseek_v2":
        # the non-auto DeepSeek-V2 MoE routes differently (capacity, token drop): the dense
        # reference is the auto class on one process (every tensor whole)
        from paddlenlp.transformers.deepseek_v2.modeling_auto import DeepseekV2ForCausalLMAuto

        return DeepseekV2ForCausalLMAuto, None
    if model == "llama":   # its reference is the auto class on one process, like Qwen's
        from paddlenlp.transformers.llama import modeling_auto as llama

        return llama.LlamaForCausalLM3DAuto, llama.LlamaPretrainingCriterion3DAuto
    raise ValueError(f"unknown model {model!r}; known: {MODELS}")


def initialize_lazy(net) -> None:
    """Value every parameter built under ``paddle.LazyGuard`` (AutoTrainer's lazy initialisation)."""
    for p in net.parameters():
        if not is_initialized(p) and p._init_func is not None:
            p.initialize()


def rope_shim(net) -> int:
    """Work around a PaddleNLP 3.0.0b4 bug, in our code: ``DeepseekV2AttentionAuto.forward``
    indexes its rotary cache as ``cos[None, :, None, :]``, but ``DeepseekV2RotaryEmbedding``
    already returns it as ``[1, seq, 1, dim]`` (6-D after the indexing: every forward fails in
    ``concat``). The shim hands the attention the ``[seq, dim]`` it expects; the values are the
    same. Applied to the dense and to the distributed model alike; returns how many it wrapped."""
    import paddle

    class Rope2D(paddle.nn.Layer):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x, seq_len=None):
            cos, sin = self.inner(x, seq_len=seq_len)
            return ((cos.squeeze([0, 2]), sin.squeeze([0, 2])) if len(cos.shape) == 4 else (cos, sin))

    wrapped = 0
    for layer in net.sublayers():
        if type(layer).__name__ == "DeepseekV2AttentionAuto" and not isinstance(layer.rotary_emb, Rope2D):
            layer.rotary_emb = Rope2D(layer.rotary_emb)
            wrapped += 1
    return wrapped


def _canonical(name: str) -> str:
    # DeepSeek-V2 auto holds its MoE gate weight under two names
    return re.sub(r"mlp\.local_gate_(and_dispatch|part1)\.gate\.", "mlp.gate.", name)


def global_weight(name: str, shape) -> np.ndarray:
    """The one global value of parameter ``name``: same on every rank and in the dense model."""
    name = _canonical(name)
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    shape = tuple(int(s) for s in shape)
    if len(shape) == 1 and re.search(r"(norm|ln)[^.]*\.weight$", name):
        return (1.0 + 0.1 * rng.standard_normal(shape)).astype("float32")
    return (0.05 * rng.standard_normal(shape)).astype("float32")


def batches(steps: int = STEPS, batch: int = BATCH) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(1234)
    out = []
    for _ in range(steps):
        ids = rng.integers(1, VOCAB, size=(batch, SEQ + 1)).astype("int64")
        out.append((ids[:, :-1].copy(), ids[:, 1:].copy()))
    return out


def _local_slice(value: np.ndarray, mesh, placements, rank: int):
    """This rank's shard of ``value`` under ``placements`` on ``mesh``; None when not a member."""
    ids = list(mesh.process_ids)
    if rank not in ids:
        return None
    coord = np.unravel_index(ids.index(rank), tuple(mesh.shape))
    for mesh_dim, p in enumerate(placements):
        if p.is_shard():
            dim = p.get_dim()
            value = np.array_split(value, mesh.shape[mesh_dim], axis=dim)[coord[mesh_dim]]
    return np.ascontiguousarray(value)


def set_weights(model) -> int:
    """Write every parameter from :func:`global_weight`; returns how many this rank wrote."""
    import paddle
    import paddle.distributed as dist

    rank, written = dist.get_rank(), 0
    for name, p in model.named_parameters():
        full = global_weight(name, p.shape)
        if p.is_dist():
            local = _local_slice(full, p.process_mesh, p.placements, rank)
            if local is None:
                continue
            local_value(p).set_value(paddle.to_tensor(local))
        else:
            p.set_value(paddle.to_tensor(full))
        written += 1
    return written


def dense_losses(model: str, steps: int = STEPS, batch: int = BATCH) -> list[float]:
    """The dense single-process run: same weights, same batches, same optimizer.

    GPT's reference is its non-auto class (``GPTForCausalLM``: same parameter names and shapes).
    DeepSeek-V2 and Qwen have no matching non-auto twin (DeepSeek-V2's MoE routes differently;
    Qwen's non-auto class gives other losses from the same weights, 4.906 vs 4.986 at step 0, on
    one process too, where no parallelism is involved): their reference is the auto class trained
    on one process by Paddle alone (every tensor whole), i.e. the plan "single" in mode "alone"."""
    if model in AUTO_REFERENCE:
        return train_layout(model, parse_plan("single", batch=batch), "alone", "dygraph", steps)["losses"]
    import faulthandler
    import sys

    import paddle

    _casual_mask_switch()
    paddle.seed(0)
    cfg = config(model)
    cls, crit_cls = classes(model, auto=False)
    # after every import (Paddle's own handler would replace it): a crash names its Python line
    faulthandler.enable(file=sys.stderr, all_threads=False)
    net = cls(cfg)
    rope_shim(net)
    set_weights(net)
    criterion = crit_cls(cfg) if crit_cls else None
    opt = paddle.optimizer.AdamW(learning_rate=LR, parameters=net.parameters())
    losses = []
    for ids, labels in batches(steps, batch):
        ids, labels = paddle.to_tensor(ids), paddle.to_tensor(labels)
        loss = _forward_loss(net, criterion, ids, labels)
        loss.backward()
        opt.step()
        opt.clear_grad()
        losses.append(float(loss.numpy()))
    return losses


def make_optimizer(name: str, params):
    """``adamw`` (lr :data:`LR`) or ``sgd`` (lr :data:`SGD_LR`: it applies a gradient's scale, so a
    gradient off by a factor is an update off by it; AdamW normalises the scale away)."""
    import paddle

    if name == "adamw":
        return paddle.optimizer.AdamW(learning_rate=LR, parameters=params)
    if name == "sgd":
        return paddle.optimizer.SGD(learning_rate=SGD_LR, parameters=params)
    raise ValueError(f"optimizer {name!r}: expected 'adamw' or 'sgd'")


def _forward_loss(net, criterion, ids, labels):
    if criterion is None:  # the model computes its own loss from labels
        out = net(ids, labels=labels)
        return out[0] if isinstance(out, (tuple, list)) else out
    logits = net(ids)
    if isinstance(logits, (tuple, list)):
        logits = logits[0]
    return criterion(logits, labels)


def _loss_value(loss, rank: int):
    """The global loss as a float on the ranks of its mesh, None elsewhere."""
    import paddle.distributed as dist

    if isinstance(loss, np.ndarray) or not hasattr(loss, "is_dist"):
        return None if loss is None else float(np.asarray(loss).reshape(-1)[0])
    if not loss.is_dist():
        return float(loss.numpy())
    mesh = loss.process_mesh
    if rank not in list(mesh.process_ids):
        return None
    whole = dist.reshard(loss, mesh, [dist.Replicate()] * len(mesh.shape))
    return float(local_value(whole).numpy())


class _Rows:
    """Map-style dataset of the :func:`batches` rows (a plain DataLoader over it gives them back).
    ``labels_as_input``: (ids, labels, labels), for ``dist.to_static`` of a model that computes its
    own loss (the Engine takes the last field as the loss's label and the others as the model's
    inputs)."""

    def __init__(self, labels_as_input: bool = False, steps: int = STEPS, batch: int = BATCH):
        rows = batches(steps, batch)
        self.ids = np.concatenate([b[0] for b in rows])
        self.labels = np.concatenate([b[1] for b in rows])
        self.labels_as_input = labels_as_input

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        row = [self.ids[i], self.labels[i]]
        return row + [self.labels[i]] if self.labels_as_input else row


class _LossOf:
    """A model that computes its own loss from labels, as a module of (input_ids, labels), and
    the loss layer ``dist.to_static`` then needs: (loss, labels) -> loss."""

    def __new__(cls, net):
        import paddle

        class LossOf(paddle.nn.Layer):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, ids, labels):
                return _forward_loss(self.inner, None, ids, labels)

        class PassLoss(paddle.nn.Layer):
            def forward(self, loss, labels):
                return loss

        return LossOf(net), PassLoss()


def _program_weights(net, dm):
    """The (parameter name, value) pairs of a ``dist.to_static`` model's state: its keys are the
    Layer's state-dict keys, where a tied weight may stand under its other name (GPT's LM head
    is the word embedding: ``lm_head.weight``); each is named as ``named_parameters`` names it."""
    by_id = {id(p): n for n, p in net.named_parameters()}
    alias = {k: by_id[id(v)] for k, v in net.state_dict().items() if id(v) in by_id}

    def pairs():
        seen, out = set(), []
        for key, value in dm.state_dict().items():
            name = alias.get(key)
            if name is not None and name not in seen:
                seen.add(name)
                out.append((name, value))
        return out

    return pairs


def train_rank(model: str, plan: str, mode: str, exec_mode: str, optimizer: str = "adamw", record: bool = False,
               mutate: dict | None = None) -> dict:
    """One rank of a PaddleNLP auto-parallel training run of ``plan`` (a :data:`PLANS` name);
    returns {"rank", "losses", ...} (and the first step's records, see :func:`train_layout`)."""
    return train_layout(model, PLANS[plan], mode, exec_mode, optimizer=optimizer, record=record, mutate=mutate)


def mesh_degrees(plan: ParallelPlan) -> list:
    """``fleet.auto.create_mesh``'s dims for ``plan``: every dim, pp outermost, tp named "mp"."""
    return [("pp", plan.pp), ("dp", plan.dp), ("mp", plan.tp)]


def train_layout(model: str, plan: ParallelPlan, mode: str, exec_mode: str, steps: int = STEPS,
                 optimizer: str = "adamw", record: bool = False, mutate: dict | None = None) -> dict:
    """One rank of a training run of ``plan`` (mesh, ZeRO level, sequence parallelism; a pipeline
    by annotation), ``steps`` steps of its global batch; returns {"rank", "losses", "params_written",
    "step_ends" (``perf_counter`` after each step), "peak_memory" (this process's peak RSS in bytes)}.
    ``optimizer``: "adamw" or "sgd" (:func:`make_optimizer`). ``record``: also the first step's
    "weights0", "grads" (dygraph only: under ``dist.to_static`` the gradient stays in the program)
    and "updates" as this rank's :mod:`.grad_parity` records; ``mutate`` ({name fragment: factor})
    scales those gradients before the step, for the tests that show a wrong gradient is caught."""
    import faulthandler
    import resource
    import sys
    import time

    import paddle
    import paddle.distributed as dist
    from paddle.distributed import fleet

    known = MATRIX_MODES + (OUTSIDE_MODE,)
    if mode not in known or exec_mode not in EXECS:
        raise ValueError(f"mode {mode!r} / exec {exec_mode!r}: expected one of {known} / {EXECS}")
    import paddle_ext

    if mode in ("install", "enable"):
        paddle_ext.install()
    if mode == OUTSIDE_MODE:
        paddle_ext.install(pipeline_by_annotation=True)
    if mode == OUTSIDE_STATIC_MODE:
        paddle_ext.install(static_engine=True, pipeline_by_annotation=True)
    if mode in ("enable", OUTSIDE_STATIC_MODE):
        paddle_ext.enable()
    require_paddlenlp()
    _casual_mask_switch()
    pp, dp, mp, batch = plan.pp, plan.dp, plan.tp, plan.batch
    # the process state of PaddleNLP's auto-parallel path (training_args + run_pretrain_auto)
    fleet.auto.create_mesh(mesh_degrees(plan))
    strategy = fleet.DistributedStrategy()
    strategy.hybrid_configs = {"dp_degree": dp, "mp_degree": mp, "pp_degree": pp,
                               "order": ["pp", "dp", "sharding", "sep", "mp"]}
    fleet.init(is_collective=True, strategy=strategy)
    if dist.get_world_size() > 1:
        dist.init_parallel_env()
    rank = dist.get_rank()
    # after every import and init (Paddle's own handler would replace it): a crash in libphi
    # names the Python line it came from in the worker log
    faulthandler.enable(file=sys.stderr, all_threads=False)
    paddle.seed(0)
    cfg = config(model, mp=mp, sp=plan.sp)
    cls, crit_cls = classes(model, auto=True)
    with paddle.LazyGuard():
        net = cls(cfg)
        criterion = crit_cls(cfg) if crit_cls else None
    rope_shim(net)
    initialize_lazy(net)
    written = set_weights(net)
    opt = make_optimizer(optimizer, net.parameters())
    stage = {1: dist.ShardingStage1, 2: dist.ShardingStage2, 3: dist.ShardingStage3}.get(plan.zero)
    opt = dist.shard_optimizer(opt, stage(sharding_mesh_dim="dp") if stage else None)
    global_mesh = fleet.auto.get_mesh()
    meshes = [global_mesh.get_mesh_with_dim("pp")[0]]
    if pp > 1:
        meshes.append(global_mesh.get_mesh_with_dim("pp")[pp - 1])

    def loader(labels_as_input=False):
        plain = paddle.io.DataLoader(_Rows(labels_as_input, steps, batch), batch_size=batch, shuffle=False,
                                     drop_last=True)
        return dist.shard_dataloader(plain, meshes=meshes, shard_dims="dp")

    losses, step_ends = [], []
    if mutate and exec_mode != "dygraph":
        raise ValueError("mutate scales a gradient between backward and step: dygraph only")
    recorder = StepRecorder(net, rank, _canonical) if record else None
    if exec_mode == "dygraph":
        net.train()
        for step, (ids, labels) in enumerate(loader()):
            loss = _forward_loss(net, criterion, ids, labels)
            loss.backward()
            if recorder is not None and step == 0:
                recorder.before_step(mutate)
            opt.step()
            if recorder is not None and step == 0:
                recorder.after_step()
            opt.clear_grad()
            losses.append(_loss_value(loss, rank))
            step_ends.append(time.perf_counter())
    else:
        own_loss = criterion is None
        if own_loss:
            net, criterion = _LossOf(net)
        dm = dist.to_static(net, loader(own_loss), criterion, opt)
        dm.train()
        if recorder is not None:   # the gradient stays in the program: weights before and after
            recorder = StepRecorder(_program_weights(net, dm), rank, lambda n: _canonical(n.removeprefix("inner.")))
            recorder.before_step()
        for fields in loader(own_loss):
            losses.append(_loss_value(dm(*fields), rank))
            if recorder is not None and len(losses) == 1:
                recorder.after_step()
            step_ends.append(time.perf_counter())
    if all(v is None for v in losses):
        losses = None
    return {"rank": rank, "losses": losses, "params_written": written, "step_ends": step_ends,
            "peak_memory": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            **(recorder.result() if recorder is not None else {})}


def compare(dense: list[float], per_rank: list[dict], tol: float = 1e-5) -> tuple[bool, str]:
    """Every rank that holds the loss matches dense to ``tol`` relative; at least one holds it."""
    held = [r for r in per_rank if r.get("losses") is not None]
    if not held:
        return False, "no rank returned a loss"
    worst = 0.0
    for r in held:
        got = np.asarray(r["losses"], dtype="float64")
        want = np.asarray(dense, dtype="float64")
        if got.shape != want.shape:
            return False, f"rank {r['rank']}: {len(got)} losses, dense has {len(want)}"
        worst = max(worst, float(np.max(np.abs(got - want) / np.maximum(np.abs(want), 1e-12))))
    if worst > tol:
        return False, f"max relative difference {worst:.3g} > {tol:g} (dense {dense}, got {held[0]['losses']})"
    return True, f"max relative difference {worst:.2g}"
