"""The dense reference of a PaddleNLP model: one process, no distributed code path, recorded per
parameter (initial weights, first-step gradients and update) for :mod:`.grad_parity`.

GPT's reference is its non-auto class (``GPTForCausalLM``: the auto class's parameter names and
shapes). Qwen and DeepSeek-V2 have no matching non-auto twin (DeepSeek-V2's non-auto MoE routes
differently; Qwen's non-auto class computes other losses from the same weights), so theirs is the
auto class run inside :func:`paddle_ext.compat.ports.dense_api.identity_parallel_api`: every
``shard_tensor``, ``reshard`` and ``LocalLayer`` conversion is an identity and the model is plain
dense tensors. The one-process auto run (DistTensors on a one-rank mesh) is then a cross-check
of this reference, not the reference itself.

The reference computes true gradients: the compat fix ``bool-cast-grad`` is applied (Paddle 3.3.1
passes a gradient through a cast to bool, which MoE gates use for their dispatch masks; the
fix's own test proves the corrected gradient by hand).

The optimizer is SGD (``real_models.SGD_LR``): it applies the gradient's scale, so a gradient that is off by
a factor is an update that is off by it.
"""
from __future__ import annotations

from . import grad_parity
from . import real_models as rm

def _true_gradients() -> None:
    from ..compat.fixes import table as fixes

    fixes.FIXES["bool-cast-grad"].apply()


def dense_run(model: str, optimizer: str = "sgd", steps: int = rm.STEPS, batch: int = rm.BATCH) -> dict:
    """{"rank": 0, "losses", "weights0", "grads", "updates"} of the dense model (global arrays)."""
    import contextlib
    import faulthandler
    import sys

    import paddle
    from paddle.distributed import fleet

    from ..compat.ports.dense_api import identity_parallel_api

    rm._casual_mask_switch()
    _true_gradients()
    paddle.seed(0)
    auto = model in rm.AUTO_REFERENCE
    scope = identity_parallel_api() if auto else contextlib.nullcontext()
    if auto:   # the auto classes read their mesh from fleet.auto: one process on every dim
        fleet.auto.create_mesh([("pp", 1), ("dp", 1), ("mp", 1)])
    faulthandler.enable(file=sys.stderr, all_threads=False)
    with scope:
        cfg = rm.config(model)
        cls, crit_cls = rm.classes(model, auto=auto)
        net = cls(cfg)
        criterion = crit_cls(cfg) if crit_cls else None
        rm.rope_shim(net)
        rm.set_weights(net)
        opt = rm.make_optimizer(optimizer, net.parameters())
        record = grad_parity.StepRecorder(net, 0, rm._canonical)
        losses = []
        for step, (ids, labels) in enumerate(rm.batches(steps, batch)):
            loss = rm._forward_loss(net, criterion, paddle.to_tensor(ids), paddle.to_tensor(labels))
            loss.backward()
            if step == 0:
                record.before_step()
            opt.step()
            if step == 0:
                record.after_step()
            opt.clear_grad()
            losses.append(float(loss.numpy()))
    recorded = [{"rank": 0, **record.result()}]
    out = {"rank": 0, "losses": losses, "updates": grad_parity.assembled_updates(recorded)}
    for key in ("weights0", "grads"):
        out[key] = grad_parity.assemble_all(recorded, key)
    return out
