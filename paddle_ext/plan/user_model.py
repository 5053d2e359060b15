"""Your own model for ``paddle-ext plan --model pkg.module:factory`` (an adapter: imports Paddle).

**The factory protocol.** ``pkg.module:factory`` names a callable, importable from the current
directory or ``sys.path``, that takes no arguments and returns a 3-tuple ``(model, batch, loss)``:

* ``model`` -- a ``paddle.nn.Layer`` (dense, built on one process, as you would train it alone);
* ``batch`` -- a sample batch ``(inputs, labels)``: ``inputs`` a Tensor or a tuple of Tensors
  passed positionally as ``model(*inputs)``, ``labels`` a Tensor; dim 0 of every one of them is
  the batch (the planner plans that global batch size unless ``--batch`` says otherwise);
* ``loss`` -- a callable ``loss(model_output, labels)`` returning a scalar Tensor.

For example (``examples/plan_my_model.py``)::

    def build():
        model = Mixer(...)
        x, y = paddle.randn([8, 16, 12]), paddle.randint(0, 10, [8, 1])
        return model, (x, y), paddle.nn.functional.cross_entropy

:func:`load_factory` imports and calls it and checks what it returned; :func:`dense_step` runs one
dense step (forward, loss, backward) and returns its loss and gradients, the reference a plan's
run is checked against. A failure of either is a named error (:mod:`.user_errors`) that says which
part of the protocol failed: the import (:class:`FactoryImportError`), what the factory returned
(:class:`FactoryReturnError`), the step (:class:`TraceError`).
"""
from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from typing import Callable, Dict, Tuple

import numpy as np
import paddle

from .user_errors import FactoryImportError, FactoryReturnError, TraceError

PROTOCOL = ("a factory returns (model, batch, loss): a paddle.nn.Layer, a sample batch (inputs, labels) of "
            "Tensors whose dim 0 is the batch, and a callable loss(model(*inputs), labels) -> scalar Tensor")


@dataclass
class UserModel:
    """What a factory returned, checked: the Layer, its positional inputs, the labels, the loss."""

    spec: str
    layer: paddle.nn.Layer
    inputs: Tuple[paddle.Tensor, ...]
    labels: paddle.Tensor
    loss: Callable

    @property
    def batch_size(self) -> int:
        return int(self.labels.shape[0])

    def step_loss(self, inputs=None, labels=None):
        """The loss of one forward of ``inputs`` (default: the sample batch)."""
        inputs = self.inputs if inputs is None else inputs
        return self.loss(self.layer(*inputs), self.labels if labels is None else labels)


def split_spec(spec: str) -> Tuple[str, str]:
    """``"pkg.module:factory"`` -> ``("pkg.module", "factory")``, or :class:`FactoryImportError`."""
    module, sep, attr = str(spec).partition(":")
    if not sep or not module or not attr.isidentifier() or not all(p.isidentifier() for p in module.split(".")):
        raise FactoryImportError(f"--model {spec!r} is not pkg.module:factory (e.g. examples.plan_my_model:build, "
                                 f"a module importable from this directory and a callable in it); {PROTOCOL}")
    return module, attr


def is_factory_spec(name: str) -> bool:
    """True when ``--model`` names a factory (``pkg.module:factory``) rather than a known model."""
    return ":" in str(name)


def _import(spec: str):
    module_name, attr = split_spec(spec)
    if os.getcwd() not in sys.path and "" not in sys.path:   # as ``python -m`` does
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 -- any failure of the user's import is the protocol's first part
        raise FactoryImportError(f"--model {spec}: importing module {module_name!r} failed "
                                 f"({type(exc).__name__}: {exc}); run from the directory that holds it or put it "
                                 f"on PYTHONPATH") from exc
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise FactoryImportError(f"--model {spec}: module {module_name!r} has no callable {attr!r}"
                                 + (f" ({attr} is a {type(factory).__name__})" if factory is not None else "")
                                 + f"; {PROTOCOL}")
    return factory


def _tensors(value, what: str, spec: str) -> Tuple[paddle.Tensor, ...]:
    items = value if isinstance(value, (tuple, list)) else (value,)
    if not items or not all(isinstance(t, paddle.Tensor) for t in items):
        raise FactoryReturnError(f"--model {spec}: the batch's {what} must be a Tensor or a tuple of Tensors, "
                                 f"got {type(value).__name__}; {PROTOCOL}")
    return tuple(items)


def check_returned(spec: str, returned) -> UserModel:
    """``returned`` (what the factory gave) as a :class:`UserModel`, or :class:`FactoryReturnError`
    naming the part that is wrong."""
    if not isinstance(returned, (tuple, list)) or len(returned) != 3:
        raise FactoryReturnError(f"--model {spec}: the factory returned {type(returned).__name__}"
                                 + (f" of {len(returned)} items" if isinstance(returned, (tuple, list)) else "")
                                 + f", not (model, batch, loss); {PROTOCOL}")
    layer, batch, loss = returned
    if not isinstance(layer, paddle.nn.Layer):
        raise FactoryReturnError(f"--model {spec}: the factory returned no paddle.nn.Layer as its model (got "
                                 f"{type(layer).__name__}); {PROTOCOL}")
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise FactoryReturnError(f"--model {spec}: the batch must be (inputs, labels), got "
                                 f"{type(batch).__name__}; {PROTOCOL}")
    inputs = _tensors(batch[0], "inputs", spec)
    labels = _tensors(batch[1], "labels", spec)
    if len(labels) != 1:
        raise FactoryReturnError(f"--model {spec}: the labels must be one Tensor, got {len(labels)}; {PROTOCOL}")
    sizes = {int(t.shape[0]) if len(t.shape) else None for t in inputs + labels}
    if len(sizes) != 1 or None in sizes:
        raise FactoryReturnError(f"--model {spec}: dim 0 of every input and of the labels must be the batch, got "
                                 f"shapes {[list(t.shape) for t in inputs + labels]}; {PROTOCOL}")
    if not callable(loss):
        raise FactoryReturnError(f"--model {spec}: the loss must be callable, got {type(loss).__name__}; {PROTOCOL}")
    return UserModel(spec, layer, inputs, labels[0], loss)


def load_factory(spec: str) -> UserModel:
    """Import ``pkg.module:factory``, call it and check what it returned (module docstring)."""
    factory = _import(spec)
    try:
        returned = factory()
    except Exception as exc:  # noqa: BLE001 -- the factory's own failure, reported as such
        raise FactoryReturnError(f"--model {spec}: calling the factory raised {type(exc).__name__}: {exc}; it must "
                                 f"take no arguments and return (model, batch, loss)") from exc
    return check_returned(spec, returned)


def dense_step(um: UserModel) -> Tuple[float, Dict[str, np.ndarray]]:
    """One dense step of the sample batch on this process: ``(loss, {parameter path: gradient})``.
    The gradients are cleared afterwards. :class:`TraceError` names the part that failed."""
    um.layer.clear_gradients()
    try:
        out = um.layer(*um.inputs)
    except Exception as exc:  # noqa: BLE001
        raise TraceError(f"--model {um.spec}: the forward model(*inputs) failed on the sample batch "
                         f"({type(exc).__name__}: {exc})") from exc
    try:
        loss = um.loss(out, um.labels)
        if int(np.prod(loss.shape)) != 1:
            raise ValueError(f"it has shape {list(loss.shape)}")
    except Exception as exc:  # noqa: BLE001
        raise TraceError(f"--model {um.spec}: loss(model output, labels) did not give a scalar Tensor "
                         f"({type(exc).__name__}: {exc})") from exc
    try:
        loss.backward()
    except Exception as exc:  # noqa: BLE001
        raise TraceError(f"--model {um.spec}: the backward of the loss failed ({type(exc).__name__}: {exc})") from exc
    grads = {n: p.grad.numpy().copy() for n, p in um.layer.named_parameters() if p.grad is not None}
    if not grads:
        raise TraceError(f"--model {um.spec}: the backward reached no parameter of the model (is the loss "
                         f"computed from model(*inputs)?)")
    um.layer.clear_gradients()
    return float(loss), grads


__all__ = ["PROTOCOL", "UserModel", "check_returned", "dense_step", "is_factory_spec", "load_factory", "split_spec"]
