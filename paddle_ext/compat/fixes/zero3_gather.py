"""``zero3-gather-on-conflict``: a ZeRO-3 parameter that Paddle's SPMD rule cannot place is
all-gathered on its sharding dim first, as ZeRO-3 means it to be.

``dist.shard_optimizer(opt, dist.ShardingStage3("dp"))`` shards every parameter along the "dp"
mesh dim, including those the model left replicated (a linear's bias, a word embedding), and
leaves the gathering to the SPMD rules of the ops that use them. On Paddle 3.3.1 two rules refuse
such a parameter instead of gathering it: in dygraph from the second step of a dp x mp plan on,
and while ``dist.to_static`` builds its program (PaddleNLP's GPT and Qwen auto models; a rule's
refusal, not a CPU kernel, so any device):

* ``linear(x, W, b)`` with ``W`` column-parallel (``[S(0) on dp, S(1) on mp]``) and ``b``
  ``[S(0) on dp, R]``: the output axis would be sharded by two mesh dims ("Tensor Axis[c] is
  Sharded by two different mesh dimension [0] and [1]");
* ``embedding(ids, W)`` with ``ids`` batch-sharded on dp and ``W``'s vocab axis on dp
  ("Multiple Tensor Axes [a,k] is sharded by same mesh dimension [0]").

A third place does not refuse but computes on the wrong thing: a ``LocalLayer`` (an MoE gate in
PaddleNLP's DeepSeek-V2 auto model) runs on each input's local value, so a stage-3 parameter
passed in arrives as this rank's shard only (a matmul of [., 64] by [32, .]); in dygraph such a
parameter is gathered before the layer converts it.

The fix wraps those ops (:data:`OPS` of ``paddle._C_ops``, looked up at call time by Paddle's
Python API) and ``LocalLayer.__call__`` once a ShardingStage3 optimizer exists in the process
(before that nothing is wrapped): Paddle runs first, unchanged; only when its SPMD rule raises
and an input is a parameter of a ShardingStage3 optimizer (in a ``dist.to_static`` program: the
parameter's value, by name), that parameter is resharded ``Shard -> Replicate`` on its sharding
mesh dim (an all-gather; its gradient goes back through the reshard's own backward, a
reduce-scatter) and the op runs again.
The rule raises before any kernel runs, any gradient node is made or any program op is added, so
the retry is the only run. Everything else goes to Paddle unchanged.

Importing this module imports no Paddle.
"""
from __future__ import annotations

import weakref

from ..ports.backend import note_once
from ..version import require_paddle

# the ops whose inputs are parameters in the models measured (linear and embedding refused;
# the others take parameters too: a norm's weight, a bias added on its own)
OPS = ("linear", "embedding", "matmul", "add", "multiply", "layer_norm", "rms_norm")
# parameters of ShardingStage3 optimizers: id -> (weak reference, sharding mesh dim index), and
# name -> sharding mesh dim index (dist.to_static's program holds them as values of that name)
_ZERO3: dict[int, tuple] = {}
_ZERO3_NAMES: dict[str, int] = {}
_WRAPPED: list = []   # (owner, name, original) of what is wrapped so far: the ops, LocalLayer.__call__


def _record(optimizer) -> None:
    """Remember the parameters of a ShardingStage3 ``_ShardOptimizer`` and their sharding axis."""
    shard_fn = getattr(optimizer, "_shard_fn", None)
    if not isinstance(shard_fn, _api().ShardingStage3):
        return
    params = optimizer._inner_opt._parameter_list
    if params and isinstance(params[0], dict):   # parameter groups
        params = [p for group in params for p in group["params"]]
    for p in params:
        _ZERO3[id(p)] = (weakref.ref(p), shard_fn._sharding_axis)
        _ZERO3_NAMES[p.name] = shard_fn._sharding_axis
    if not _WRAPPED:
        _wrap_ops()


def _sharding_axis(tensor) -> int | None:
    entry = _ZERO3.get(id(tensor))
    if entry is not None and entry[0]() is tensor:
        return entry[1]
    if getattr(tensor, "persistable", False) and not hasattr(tensor, "_local_value"):   # a program's parameter
        return _ZERO3_NAMES.get(tensor.name)
    return None


def gathered(value, dist):
    """``value`` with a ZeRO-3 parameter resharded to Replicate on its sharding dim, or None when
    ``value`` is not such a parameter sharded there."""
    axis = _sharding_axis(value)
    if axis is None or not value.is_dist() or not isinstance(value.placements[axis], dist.Shard):
        return None
    placements = list(value.placements)
    placements[axis] = dist.Replicate()
    return dist.reshard(value, value.process_mesh, placements)


def _gathered_or_same(x, dist, tensors):
    """``x`` gathered when it is a ZeRO-3 parameter sharded on its dim (:func:`gathered`), else ``x``."""
    g = gathered(x, dist) if isinstance(x, tensors) else None
    return x if g is None else g


def _rule_refused(exc: Exception) -> bool:
    return "spmd_rules" in str(exc)


def _wrap(original, name: str, paddle):
    dist = paddle.distributed
    tensors = (paddle.Tensor, paddle.pir.Value)   # dygraph, and dist.to_static's program building

    def op(*args, **kwargs):
        try:
            return original(*args, **kwargs)
        except Exception as exc:   # Paddle raises NotImplementedError or RuntimeError from a rule
            if not _ZERO3 or not _rule_refused(exc):
                raise
            args2 = [_gathered_or_same(a, dist, tensors) for a in args]
            kwargs2 = {k: _gathered_or_same(v, dist, tensors) for k, v in kwargs.items()}
            if all(b is a for a, b in zip(args, args2)) and all(kwargs2[k] is v for k, v in kwargs.items()):
                raise
            note_once(f"zero3-gather-{name}", f"{name}: Paddle's SPMD rule refused a ShardingStage3 parameter "
                      f"({str(exc).splitlines()[0][:160]}); gathering it on its sharding dim first")
            return original(*args2, **kwargs2)

    op.__name__ = name
    op.__doc__ = original.__doc__
    op.__wrapped__ = original
    return op


def _wrap_ops() -> None:
    paddle = require_paddle("fix zero3-gather-on-conflict")
    for name in OPS:
        original = getattr(paddle._C_ops, name, None)
        if original is not None:
            setattr(paddle._C_ops, name, _wrap(original, name, paddle))
            _WRAPPED.append((paddle._C_ops, name, original))
    local_layer = paddle.distributed.LocalLayer
    original_call = local_layer.__call__

    def call(self, *inputs, **kwargs):
        # a LocalLayer computes on each input's local value: a stage-3 parameter passed in (an
        # MoE gate's weight) is gathered first, or the layer sees only this rank's shard of it
        if paddle.in_dynamic_mode():
            inputs = [_gathered_or_same(x, paddle.distributed, paddle.Tensor) for x in inputs]
        return original_call(self, *inputs, **kwargs)

    call.__wrapped__ = original_call
    local_layer.__call__ = call
    _WRAPPED.append((local_layer, "__call__", original_call))


def unwrap_ops() -> None:
    """Put Paddle's ops and ``LocalLayer.__call__`` back and forget the recorded parameters (the
    fix's revert)."""
    while _WRAPPED:
        owner, name, original = _WRAPPED.pop()
        setattr(owner, name, original)
    _ZERO3.clear()
    _ZERO3_NAMES.clear()


def _api():
    """Paddle's ``paddle.distributed.auto_parallel.api`` (loaded by ``import paddle``)."""
    return require_paddle("fix zero3-gather-on-conflict").distributed.auto_parallel.api


def apply():
    """Patch ``_ShardOptimizer.__init__`` to record ZeRO-3 parameters (and wrap :data:`OPS` and
    ``LocalLayer.__call__`` at the first ShardingStage3 optimizer)."""
    api = _api()

    init = api._ShardOptimizer.__init__

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        _record(self)

    __init__.__wrapped__ = init
    api._ShardOptimizer.__init__ = __init__
    return [(api._ShardOptimizer, "__init__", init)]


def needed() -> bool:
    """Paddle's dygraph ``_ShardOptimizer`` with ShardingStage3 exists (every Paddle 3.x)."""
    api = _api()
    return hasattr(api, "_ShardOptimizer") and hasattr(api, "ShardingStage3")
