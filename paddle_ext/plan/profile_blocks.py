"""Time one decoder layer of a PaddleNLP auto model under tensor parallelism (an adapter).

For ``paddlenlp-gpt`` and ``paddlenlp-qwen``, what tensor parallelism costs is not only the two
all-reduces per block a Megatron-style layer needs: PaddleNLP's auto layers run through Paddle's
semi-automatic path, whose SPMD rules add reshards of their own (replicated biases added to
sharded activations, their gradients gathered back, the layer norms' gradients; measured 2.2x the
formula's collectives at ``tp = 4``). So the profile times the model's own layer: on every rank at
once (all ranks busy, as in a plan), the auto class's decoder layer built on a ``[dp, mp]`` mesh
with ``mp = g``, its input replicated over ``dp`` (no gradient sync: the data-parallel collectives
are the model's ``dp`` terms) and, with sequence parallelism, split over ``mp`` on the sequence as
PaddleNLP lays it out; and at ``g = 1`` (data parallelism alone) its input split over every rank
on the batch, which costs PaddleNLP's layer 10x the demo block's dispatch per op (measured 29 ms
a layer on 4 ranks); each against the dense layer on the same samples, alternated. Its extra time,
forward and backward, per ``(g, sp, samples)`` is what :mod:`.stage_cost` charges a block of that
model in place of the formula's tensor-parallel collectives and dispatch.
"""
from __future__ import annotations

import statistics
import time

import paddle
import paddle.distributed as dist

from ..models import real_models as rm
from .trace_paddlenlp import auto_mesh

# PaddleNLP 3.0.0b4's QWen auto model has no sequence parallelism (it never reads the config's
# flag): its "sp" plans run the plain layer, timed once for both
SEQUENCE_PARALLEL = {"gpt": True, "qwen": False}
SAMPLES = (1, 8)   # samples per microbatch timed (a batch of 8's range); others off the line through them


def block_key(tp: int, sp: bool, samples: int) -> str:
    return f"tp={tp},sp={int(bool(sp))},b={samples}"


def _classes(model: str):
    if model == "gpt":
        from paddlenlp.transformers.gpt.modeling import GPTDecoderLayer
        from paddlenlp.transformers.gpt.modeling_auto import GPTDecoderLayerAuto

        return GPTDecoderLayerAuto, GPTDecoderLayer
    from paddlenlp.transformers.qwen.modeling import QWenBlock
    from paddlenlp.transformers.qwen.modeling_auto import QWenBlockAuto

    return QWenBlockAuto, QWenBlock


def _first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def timed_in_turns(fns, repeats: int) -> list:
    """The median seconds of each function, every rank at once after a barrier. The functions
    take turns, ``repeats`` rounds of all of them after one warm-up round, so a slow spell of a
    shared machine falls on each alike instead of bending the one being timed (collectives timed
    one after another gave fitted slopes 7x apart from one profile to the next)."""
    for fn in fns:
        fn()
    times: list = [[] for _ in fns]
    for _ in range(repeats):
        for fn, acc in zip(fns, times):
            dist.barrier()
            t = time.perf_counter()
            fn()
            acc.append(time.perf_counter() - t)
    return [statistics.median(t) for t in times]


def measure_block_extra(model: str, repeats: int = 15) -> dict:
    """Run on every rank (gloo world initialised, paddle-ext installed and enabled):
    ``{block_key(g, sp, b): {"fwd_s", "bwd_s"}}`` for each ``g`` dividing the world, with and
    without sequence parallelism, at each of :data:`SAMPLES`; ``g = 1`` is data parallelism alone
    (the input's batch split over every rank, the weights replicated: each op's SPMD rule and
    distributed kernel path, the gradients left partial for the optimizer's sync)."""
    world = dist.get_world_size()
    auto_cls, dense_cls = _classes(model)
    rm._casual_mask_switch()
    dense = dense_cls(rm.config(model))
    out = {}
    for g in [g for g in range(1, world + 1) if world % g == 0]:
        for sp in ((False, True) if g > 1 and SEQUENCE_PARALLEL[model] else (False,)):
            cfg = rm.config(model, mp=g, sp=sp)
            paddle.seed(0)
            with auto_mesh(world // g, g) as global_mesh:
                with paddle.LazyGuard():
                    layer = auto_cls(cfg, ipp=0)
                rm.initialize_lazy(layer)
                mesh = global_mesh.get_mesh_with_dim("pp")[0]
                for b in SAMPLES:
                    x = paddle.rand([b, cfg.seq_length, cfg.hidden_size])
                    x.stop_gradient = False
                    if sp:   # PaddleNLP's layout: [b * seq, hidden], the rows split over mp
                        xd = dist.shard_tensor(x.reshape([-1, cfg.hidden_size]), mesh,
                                               [dist.Replicate(), dist.Shard(0)])
                    elif g > 1:
                        xd = dist.shard_tensor(x, mesh, [dist.Replicate(), dist.Replicate()])
                    else:    # data parallel alone: each rank its b samples of the batch
                        whole = paddle.concat([x] * world)
                        xd = dist.shard_tensor(whole, mesh, [dist.Shard(0), dist.Replicate()])
                    t = timed_in_turns([lambda: _first(dense(x)), lambda: _first(dense(x)).sum().backward(),
                                        lambda: _first(layer(xd)), lambda: _first(layer(xd)).sum().backward()],
                                       repeats)
                    fwd_extra = max(t[2] - t[0], 0.0)
                    bwd_extra = max((t[3] - t[2]) - (t[1] - t[0]), 0.0)
                    out[block_key(g, sp, b)] = {"fwd_s": fwd_extra, "bwd_s": bwd_extra}
                    if g > 1 and not SEQUENCE_PARALLEL[model]:
                        out[block_key(g, True, b)] = dict(out[block_key(g, False, b)])
    return out


__all__ = ["SAMPLES", "block_key", "measure_block_extra", "timed_in_turns"]
