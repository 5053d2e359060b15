"""``enable()`` / ``disable()``: Paddle's public ops that lack a usable rule keep their sharding.

``enable()`` patches the public functions of :data:`~paddle_ext.dispatch.paddle_ops.OPS`
(``paddle.flip``, ``paddle.Tensor.flip``, ``paddle.nn.functional.max_pool2d``, ...): a call with
a DistTensor argument goes through paddle-ext's rule (``spmd_rules/gaps``), every other call
goes straight to Paddle's original function. ``disable()`` puts back the exact original
objects. Both are idempotent.

>>> import paddle
>>> import paddle.distributed as dist
>>> import paddle_ext.dispatch as d
>>> x_sharded = dist.shard_tensor(paddle.ones([4, 3]), dist.ProcessMesh([0], dim_names=["x"]), [dist.Shard(0)])
>>> "flip" in d.enable()   # the names of the ops it routes
True
>>> paddle.flip(x_sharded, [1]).placements
[Shard(dim=0)]
>>> d.disable(); paddle.flip(x_sharded, [1]).placements   # Paddle's own flip: computed replicated
[Replicate()]
"""
from __future__ import annotations

import importlib
from typing import Iterable

from ..compat.ports.dispatch import Patcher, ignore_in_dy2static
from ..compat.version import require_paddle
from ..errors import ShardingRuleError
from ..spmd.registry import load_builtin_rules
from .paddle_ops import BY_NAME, OPS, make_wrapper

_PATCHER = Patcher()
_ENABLED: list[str] = []


def _resolve(target: str):
    """``"paddle.nn.functional.pad"`` -> (owner object, attribute name), or None if absent."""
    mod_path, _, attr = target.rpartition(".")
    parts = mod_path.split(".")
    obj = None
    for k in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ImportError:
            continue
        for p in parts[k:]:
            obj = getattr(obj, p, None)
            if obj is None:
                return None
        break
    if obj is None or not hasattr(obj, attr):
        return None
    return obj, attr


def enable(ops: Iterable[str] | None = None) -> list[str]:
    """Route the listed Paddle ops (default: all of :data:`OPS`) through paddle-ext's rules.

    Returns the names enabled by this call. Unknown names raise with the list of known ones.
    """
    require_paddle("paddle_ext.enable")
    load_builtin_rules(gaps=True)
    ignore_in_dy2static()
    names = [o.name for o in OPS] if ops is None else list(ops)
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise ShardingRuleError(f"enable(): unknown op(s) {unknown}; known: {', '.join(sorted(BY_NAME))}")
    done = []
    for name in names:
        if name in _ENABLED:
            continue
        op = BY_NAME[name]
        for target in op.targets:
            where = _resolve(target)
            if where is None:
                continue
            owner, attr = where
            original = getattr(owner, attr)
            _PATCHER.patch(owner, attr, make_wrapper(op, original))
        _ENABLED.append(name)
        done.append(name)
    return done


def disable() -> None:
    """Restore every patched Paddle function to the exact original object."""
    _PATCHER.restore()
    _ENABLED.clear()


def enabled_ops() -> list[str]:
    """Names of the ops currently routed through paddle-ext's rules."""
    return list(_ENABLED)


def is_enabled() -> bool:
    return bool(_ENABLED)


__all__ = ["disable", "enable", "enabled_ops", "is_enabled"]
