"""``enable()`` / ``disable()``: Paddle's public ops that lack a usable rule keep their sharding.

``enable()`` patches the public functions of :data:`~paddle_ext.dispatch.paddle_ops.OPS`
(``paddle.flip``, ``paddle.Tensor.flip``, ``paddle.nn.functional.max_pool2d``, ...): a call with
a DistTensor argument goes through paddle-ext's rule (``spmd_rules/gaps``), every other call
goes straight to Paddle's original function. ``disable()`` puts back the exact original
objects. Both are idempotent.

**Your own rules for Paddle's ops.** A rule you register (``paddle_ext.register_spmd_rule(name)``)
under the name of a public Paddle function (``paddle.<name>``, ``paddle.Tensor.<name>``,
``paddle.nn.functional.<name>``) is enabled too, by ``enable()`` and by ``enable([name])``:
the rule's tensor parameters are the function's tensor arguments of the same names, its
attributes the function's other arguments of the same names, and each rank runs Paddle's own
function on its local tensors. Register before calling ``enable()`` (a later ``enable()``
adds what was registered since).

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
import inspect
from typing import Iterable

from ..compat.ports.dispatch import Patcher, ignore_in_dy2static
from ..compat.version import require_paddle
from ..errors import ShardingRuleError
from ..spmd.lookup import load_builtin_rules
from ..spmd.registry import REGISTRY
from .paddle_ops import BY_NAME, OPS, PaddleOp, make_wrapper

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


_FACES = ("paddle.{}", "paddle.Tensor.{}", "paddle.nn.functional.{}")


def _user_op(name: str, rule) -> PaddleOp | None:
    """The :class:`PaddleOp` of a rule the user registered under a public Paddle function's name
    (None when no such function exists). Raises when the rule's parameter names are not the
    function's: the call could not be read."""
    found = [(face.format(name), _resolve(face.format(name))) for face in _FACES]
    found = [(target, where) for target, where in found if where is not None]
    if not found:
        return None
    targets = tuple(target for target, _ in found)
    tensors = tuple(p.name for p in rule.params if p.kind != "attr")
    attrs = tuple(p.name for p in rule.params if p.kind == "attr")
    owner, attr = found[0][1]
    try:
        signature = inspect.signature(getattr(owner, attr))
    except (TypeError, ValueError):
        signature = None
    missing = [n for n in tensors + attrs if signature is not None and n not in signature.parameters]
    if missing:
        raise ShardingRuleError(
            f"enable(): your SPMD rule {name!r} has parameter(s) {missing} that {targets[0]}{signature} "
            f"does not; name the rule's tensors and attributes as the function's arguments so each call "
            f"can be read")

    def read_attrs(arguments):
        return {n: arguments[n] for n in attrs if n in arguments}

    return PaddleOp(name, name, targets, tensors, read_attrs, None, "a rule you registered")


def user_ops() -> dict[str, PaddleOp]:
    """The rules registered outside paddle-ext under a public Paddle function's name."""
    found = {}
    for name, rule in REGISTRY.rules.items():
        if name in BY_NAME or getattr(rule.fn, "__module__", "").split(".")[0] == "paddle_ext":
            continue
        op = _user_op(name, rule)
        if op is not None:
            found[name] = op
    return found


def enable(ops: Iterable[str] | None = None) -> list[str]:
    """Route the listed Paddle ops (default: all of :data:`OPS` and the rules you registered for
    Paddle's functions, :func:`user_ops`) through paddle-ext's rules.

    Returns the names enabled by this call. Unknown names raise with the list of known ones.
    """
    require_paddle("paddle_ext.enable")
    load_builtin_rules(gaps=True)
    ignore_in_dy2static()
    yours = user_ops()
    names = [o.name for o in OPS] + list(yours) if ops is None else list(ops)
    unknown = [n for n in names if n not in BY_NAME and n not in yours]
    if unknown:
        raise ShardingRuleError(
            f"enable(): unknown op(s) {unknown}; known: {', '.join(sorted(set(BY_NAME) | set(yours)))}. "
            f"A rule of your own is enabled when it is registered (paddle_ext.register_spmd_rule) under "
            f"the name of a public Paddle function (paddle.<name>); for a function of your own, decorate "
            f"it with @paddle_ext.spmd_op")
    done = []
    for name in names:
        if name in _ENABLED:
            continue
        op = BY_NAME.get(name) or yours[name]
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


__all__ = ["disable", "enable", "enabled_ops", "is_enabled", "user_ops"]
