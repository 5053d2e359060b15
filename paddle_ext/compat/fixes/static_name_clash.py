"""``static-name-clash``: ``dist.to_static`` refuses a model whose parameters carry the names of another model's.

Paddle's static Engine keeps a model's state in the global scope under its parameters' names (a
parameter's ``<name>.dist``, its gradient-merge buffer ``<name>.dist@GRAD@MERGE``, the
optimizer's state) and takes over a variable of that name that is already initialised. The names
come from Paddle's unique-name generator, which ``paddle.disable_static()`` -- run inside every
``dist.to_static`` -- starts afresh (Paddle 3.3.1: ``enable_dygraph`` enters a new
``unique_name.guard()``). So a model built after a ``dist.to_static`` gets the names of the model
before it (``block_0.w_0``, ...). Where the model merges gradients over micro-batches (a
pipeline with ``accumulate_steps`` > 1, or ``gradient_merge``) and a clashing name has another
shape, its training reads the other model's merge buffer: it fails or diverges (an MLP, then a
transformer, 2-stage FThenB: losses wrong from the second step, inf from the third). Without a
merge (DP, TP) such a model trains exactly (measured), and with equal shapes the two share the
buffers, which SGD leaves at zero between steps.

With this fix ``dist.to_static`` refuses, before Paddle builds anything, a layer whose strategy
merges gradients and which has a parameter whose name an earlier call's layer had for a
parameter of another shape (:class:`~paddle_ext.errors.StaticNameClashError`, naming the
parameters and the fix: build the model inside ``paddle.utils.unique_name.guard("<prefix>_")``);
every other clash gets one log line saying the same. The same parameter objects given again (one
model converted twice) are no clash. ``needed`` is true on every supported Paddle: the clash
itself is checked on every call.

Importing this module imports no Paddle.
"""
from __future__ import annotations

import inspect
import logging
import weakref

from ...errors import StaticNameClashError
from ..fix import always_needed
from ..version import require_paddle

LOG = logging.getLogger("paddle_ext")
#: parameter name -> (a weak reference to the parameter an earlier dist.to_static was given, its shape)
_SEEN: dict = {}
FIX = 'build each model inside paddle.utils.unique_name.guard("<prefix>_") with its own prefix'


def clashes(params) -> tuple[list, list]:
    """``(other shape, same shape)``: the ``(name, shape, earlier shape)`` of each parameter of
    ``params`` whose name an earlier, different parameter had (see the module docstring)."""
    other, same = [], []
    for p in params:
        seen = _SEEN.get(p.name)
        if seen is None or seen[0]() is p:
            continue
        shape = tuple(p.shape)
        (same if shape == seen[1] else other).append((p.name, shape, seen[1]))
    return other, same


def remember(params) -> None:
    for p in params:
        _SEEN[p.name] = (weakref.ref(p), tuple(p.shape))


def _names(found) -> str:
    shown = ", ".join(f"{name} {list(shape)} (earlier {list(before)})" for name, shape, before in found[:5])
    return shown + (f" and {len(found) - 5} more" if len(found) > 5 else "")


def merges(strategy) -> bool:
    """Whether ``strategy`` (a ``dist.Strategy`` or None) merges gradients over micro-batches."""
    pipeline, merge = getattr(strategy, "pipeline", None), getattr(strategy, "gradient_merge", None)
    return bool((getattr(pipeline, "enable", False) and (getattr(pipeline, "accumulate_steps", 1) or 1) > 1)
                or (getattr(merge, "enable", False) and (getattr(merge, "k_steps", 1) or 1) > 1))


def check(layer, strategy=None) -> None:
    """Refuse or note ``layer``'s clashes (refused: another shape under a strategy that
    :func:`merges`), then remember its parameters."""
    params = list(layer.parameters()) if hasattr(layer, "parameters") else []
    other, same = clashes(params)
    if other and merges(strategy):
        raise StaticNameClashError(
            f"dist.to_static: parameters {_names(other)} have the names of another model's parameters of another "
            f"shape; Paddle's static Engine keeps one global-scope variable per name and would merge this model's "
            f"gradients in the other's buffers (Paddle's disable_static(), run inside every dist.to_static, "
            f"restarts parameter names). {FIX}, or convert it in a process of its own")
    if other or same:
        LOG.warning("dist.to_static: parameters %s have the names of another model's parameters: Paddle's static "
                    "Engine shares their global-scope variables (gradient-merge buffers, optimizer state); %s",
                    _names(other + same), FIX)
    remember(params)


def apply():
    paddle = require_paddle("fix static-name-clash")
    dist = paddle.distributed
    api = dist.auto_parallel.api
    original = api.to_static
    signature = inspect.signature(original)   # where its strategy is, whichever way it is passed

    def to_static(layer, *args, **kwargs):
        try:
            strategy = signature.bind(layer, *args, **kwargs).arguments.get("strategy")
        except TypeError:   # a call that does not fit: Paddle's own function names the problem
            strategy = None
        check(layer, strategy)
        return original(layer, *args, **kwargs)

    to_static.__doc__ = original.__doc__
    to_static.__wrapped__ = original
    saved = [(api, "to_static", original)]
    for owner in (dist, dist.auto_parallel):
        if getattr(owner, "to_static", None) is original:
            saved.append((owner, "to_static", original))
            owner.to_static = to_static
    api.to_static = to_static
    return saved


needed = always_needed("fix static-name-clash")
