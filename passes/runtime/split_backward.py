"""Split backward for Paddle dygraph: ``I`` (input gradients) now, ``W`` (weight gradients) later.

Paddle 3.3.1 has no split backward (``stage_backward_input``/``stage_backward_weight`` raise
``NotImplementedError``). Two strategies are provided; both give exactly the gradients of one
full backward (``B``).

``"deferred-linear"`` (default, :class:`DeferredLinearSplit`)
    During the forward of a microbatch that the schedule splits, every ``paddle.nn.Linear`` of
    the stage runs through a PyLayer that hides the weight and bias from autograd. ``I`` is one
    ordinary autograd pass: each Linear's backward computes only ``dx = dy @ W^T`` and records
    ``(x, dy)``; every other parameter (LayerNorm, embeddings, custom layers) gets its gradient
    in this same pass. ``W`` then computes ``dW = x^T @ dy`` and ``db = sum(dy)`` for the
    recorded Linears and accumulates them into ``param.grad``. Nothing runs twice and the
    forward is not recomputed: measured ``I + W`` ~= ``B``. What ``W`` defers is the Linear
    weight work, which is most of a transformer's weight-gradient FLOPs; other layers' weight
    gradients stay in ``I``.

``"regrad"`` (:class:`RegradSplit`)
    For any layer: ``I = paddle.grad(outputs, inputs, grad_outputs, retain_graph=True)`` (Paddle
    prunes the parameter branches, so this is cheap) and ``W = paddle.grad(outputs, params,
    grad_outputs)``, which walks the graph again from the outputs: it recomputes the
    input-gradient chain, so ``I + W`` costs about ``1.4-1.6 B`` (measured in
    ``docs/pipeline_dygraph.md``).

Caveat of both: ``W`` writes ``param.grad`` directly, so gradient hooks registered on a
parameter (``param.register_hook``) do not see the deferred part.

>>> import paddle
>>> lin = paddle.nn.Linear(4, 3)
>>> x = paddle.randn([2, 4])
>>> split = DeferredLinearSplit()
>>> with split.forward(lin) as record:
...     y = lin(x)
>>> paddle.autograd.backward([y.sum()])       # I: no weight gradient yet
>>> lin.weight.grad is None, len(record)
(True, 1)
>>> split.weight(record)                      # W
>>> bool(paddle.allclose(lin.weight.grad, x.t() @ paddle.ones([2, 3])))
True
"""
from __future__ import annotations

import contextlib
from typing import Iterator, List, Sequence

import paddle

import paddle.distributed as dist

from paddle_ext.compat.ports.pipelining import pylayer_class
from paddle_ext.errors import ScheduleError

__all__ = ["SplitStrategy", "DeferredLinearSplit", "RegradSplit", "get_split_strategy",
           "SPLIT_STRATEGIES", "accumulate_grad"]


def accumulate_grad(param, grad) -> None:
    """``param.grad += grad`` outside autograd; placements follow the parameter's."""

    with paddle.no_grad():
        grad = grad.detach()
        if param.is_dist() and grad.is_dist() and list(grad.placements) != list(param.placements):

            grad = dist.reshard(grad, param.process_mesh, param.placements)
        if param.grad is None:
            param.grad = grad
        else:  # in place, as autograd accumulates: `param.grad = param.grad + grad` costs a third more W
            param.grad.add_(grad)


class SplitStrategy:
    """How a stage's backward is split. ``forward`` wraps the forward of a split microbatch and
    yields a record; ``input`` runs I and returns the input gradients; ``weight`` runs W."""

    name = "base"

    def forward(self, layer) -> contextlib.AbstractContextManager:
        raise NotImplementedError

    def input(self, record, outputs: Sequence, grad_outputs: Sequence, inputs: Sequence) -> List:
        raise NotImplementedError

    def weight(self, record) -> None:
        raise NotImplementedError


# ------------------------------------------------------------------------- deferred Linear
def _deferred_linear_fn():
    cls = getattr(_deferred_linear_fn, "cls", None)
    if cls is not None:
        return cls
    PyLayer = pylayer_class()

    class _DeferredLinear(PyLayer):
        """y = x @ W + b whose backward returns only dx and records (x, dy) for W."""

        @staticmethod
        def forward(ctx, x, weight, bias, layer, record):

            ctx.layer, ctx.record = layer, record
            ctx.need_dx = not x.stop_gradient
            ctx.has_bias = bias is not None
            ctx.save_for_backward(x)
            y = paddle.matmul(x, weight)
            return y + bias if bias is not None else y

        @staticmethod
        def backward(ctx, dy):

            (x,) = ctx.saved_tensor()
            ctx.record.append((ctx.layer, x.detach(), dy.detach()))
            dx = paddle.matmul(dy, ctx.layer.weight, transpose_y=True) if ctx.need_dx else None
            # weight and bias are inputs so that y needs a gradient even when x does not (the
            # first Linear of stage 0); their gradient is None here and computed in W
            return (dx, None, None) if ctx.has_bias else (dx, None)

    _deferred_linear_fn.cls = _DeferredLinear
    return _DeferredLinear


def _splittable_linears(layer) -> list:
    """The plain ``nn.Linear`` sublayers (subclasses with their own forward keep autograd)."""

    base = paddle.nn.Linear
    found = [m for m in [layer, *layer.sublayers()] if isinstance(m, base) and type(m).forward is base.forward]
    return [m for m in found if not m.weight.stop_gradient]


class DeferredLinearSplit(SplitStrategy):
    """Defer ``nn.Linear`` weight/bias gradients to W; everything else is done in I (see module doc)."""

    name = "deferred-linear"

    @contextlib.contextmanager
    def forward(self, layer) -> Iterator[list]:
        fn = _deferred_linear_fn()
        record: list = []
        patched = []
        for lin in _splittable_linears(layer):
            def split_forward(x, _lin=lin):
                return fn.apply(x, _lin.weight, _lin.bias, _lin, record)
            had = "forward" in lin.__dict__
            patched.append((lin, had, lin.__dict__.get("forward")))
            lin.forward = split_forward
        try:
            yield record
        finally:
            for lin, had, old in patched:
                if had:
                    lin.forward = old
                else:
                    del lin.forward

    def input(self, record, outputs, grad_outputs, inputs):

        if outputs:
            paddle.autograd.backward(list(outputs), grad_tensors=list(grad_outputs) if grad_outputs else None)
        return [x.grad if x is not None else None for x in inputs]

    def weight(self, record) -> None:

        with paddle.no_grad():
            for lin, x, dy in record:
                x2 = x.reshape([-1, x.shape[-1]]) if len(x.shape) != 2 else x
                dy2 = dy.reshape([-1, dy.shape[-1]]) if len(dy.shape) != 2 else dy
                accumulate_grad(lin.weight, paddle.matmul(x2, dy2, transpose_x=True))
                if lin.bias is not None and not lin.bias.stop_gradient:
                    accumulate_grad(lin.bias, dy2.sum(axis=0))
        record.clear()


# ---------------------------------------------------------------------------------- regrad
class _RegradRecord:
    __slots__ = ("layer", "outputs", "grad_outputs")

    def __init__(self, layer):
        self.layer, self.outputs, self.grad_outputs = layer, None, None


class RegradSplit(SplitStrategy):
    """I = ``paddle.grad`` for the inputs (graph kept), W = ``paddle.grad`` for the parameters."""

    name = "regrad"

    @contextlib.contextmanager
    def forward(self, layer) -> Iterator[_RegradRecord]:
        yield _RegradRecord(layer)

    def input(self, record, outputs, grad_outputs, inputs):

        record.outputs, record.grad_outputs = list(outputs), (list(grad_outputs) if grad_outputs else None)
        wanted = [x for x in inputs if x is not None and not x.stop_gradient]
        grads = iter(paddle.grad(record.outputs, wanted, record.grad_outputs, retain_graph=True,
                                 allow_unused=True) if wanted and outputs else [])
        return [next(grads) if x is not None and not x.stop_gradient else None for x in inputs]

    def weight(self, record) -> None:

        params = [p for p in record.layer.parameters() if not p.stop_gradient]
        if params and record.outputs:
            grads = paddle.grad(record.outputs, params, record.grad_outputs, allow_unused=True)
            for p, g in zip(params, grads):
                if g is not None:
                    accumulate_grad(p, g)
        record.outputs = record.grad_outputs = None


SPLIT_STRATEGIES = {"deferred-linear": DeferredLinearSplit, "regrad": RegradSplit}


def get_split_strategy(name_or_strategy) -> SplitStrategy:
    """A strategy by name (``"deferred-linear"``, ``"regrad"``) or an instance, as is."""
    if isinstance(name_or_strategy, SplitStrategy):
        return name_or_strategy
    key = str(name_or_strategy).lower()
    if key not in SPLIT_STRATEGIES:
        raise ScheduleError(f"unknown split backward {name_or_strategy!r}; use one of {sorted(SPLIT_STRATEGIES)}")
    return SPLIT_STRATEGIES[key]()
