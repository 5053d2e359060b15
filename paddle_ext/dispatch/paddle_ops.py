"""The Paddle ops ``enable()`` routes through paddle-ext's rules: how to read each call.

Every entry says which public functions to patch, which arguments are tensors (in the rule's
order), how to turn the call's arguments into the rule's attributes, and how to run the op on
local shards (by default Paddle's original function with the local tensors substituted). A call
form an entry does not cover (``return_mask=True``, a tensor ``axis``, string paddings, ...)
returns ``None`` from ``attrs`` and goes to Paddle's original unchanged -- that is Paddle's own
behaviour, not a paddle-ext decision, and ``paddle_ext.dispatch.audit()`` lists it when it
replicates.
"""
from __future__ import annotations

import inspect
import logging
import math
from dataclasses import dataclass
from typing import Callable

from ..compat.ports.dispatch import any_dist, is_tensor
from .binding import Binder
from .core import HandBack, dispatch


@dataclass(frozen=True)
class PaddleOp:
    """One public Paddle op made rule-aware by ``enable()``."""

    name: str                      # public name (also the audit's op name)
    rule: str                      # the paddle-ext rule
    targets: tuple                 # "paddle.flip", "paddle.Tensor.flip", "paddle.nn.functional.pad"
    tensors: tuple                 # argument names holding tensors, in the rule's order
    attrs: Callable                # (bound arguments dict) -> rule attrs, or None: not covered
    local: Callable | None = None  # (original, arguments, local tensors, ctx) -> output(s)
    note: str = ""


def _ints(v, n: int):
    """``v`` (int or sequence) as a list of ``n`` ints, or None when it is something else."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return [v] * n
    if isinstance(v, (list, tuple)) and len(v) == n and all(isinstance(i, int) and not isinstance(i, bool) for i in v):
        return list(v)
    return None


def _axis_list(v):
    if isinstance(v, int) and not isinstance(v, bool):
        return [v]
    if isinstance(v, (list, tuple)) and all(isinstance(i, int) for i in v):
        return list(v)
    return None


def _opt_axis(v):
    """None, an int, or a list of ints -> the rule's ``object`` attribute (None = all)."""
    if v is None or (isinstance(v, int) and not isinstance(v, bool)):
        return v
    return _axis_list(v)


# -- attrs builders -----------------------------------------------------------------------------------
def _masked_fill(a):
    return None if is_tensor(a["value"]) else {"value": a["value"]}


def _tri(a):
    return {"diagonal": int(a.get("diagonal", 0))} if not a.get("out") else None


def _tri_local(orig, a, t, ctx):
    x = t[0]
    nd = len(x.shape)
    diag = int(a.get("diagonal", 0))
    if ctx is not None:
        diag += ctx.offset(0, nd - 2) - ctx.offset(0, nd - 1)
    return orig(x, diag)


def _flip(a):
    ax = _axis_list(a["axis"])
    return None if ax is None else {"axis": ax}


def _cumprod(a):
    if a.get("dtype") is not None or a.get("out") is not None:
        return None
    return {"dim": a.get("dim")}


def _logcumsumexp(a):
    if a.get("dtype") is not None:
        return None
    return {"axis": a.get("axis")}


def _repeat_interleave(a):
    r = a["repeats"]
    if not isinstance(r, int) or isinstance(r, bool) or a.get("output_size") is not None:
        return None
    return {"repeats": r, "axis": a.get("axis")}


def _pool_attrs(nd: int, fmt_default: str):
    def build(a):
        if a.get("return_mask") or a.get("divisor_override") is not None and nd == 1:
            return None
        k = _ints(a["kernel_size"], nd)
        s = _ints(a["stride"] if a.get("stride") is not None else a["kernel_size"], nd)
        p = a.get("padding", 0)
        if isinstance(p, str):
            return None
        if isinstance(p, int) and not isinstance(p, bool):
            pad = [p] * (2 * nd)
        elif _ints(p, nd) is not None:
            pad = [v for v in _ints(p, nd) for _ in (0, 1)]
        elif _ints(p, 2 * nd) is not None:
            pad = _ints(p, 2 * nd)
        else:
            return None
        if k is None or s is None:
            return None
        return {"kernel_size": k, "stride": s, "padding": pad, "ceil_mode": bool(a.get("ceil_mode", False)),
                "data_format": a.get("data_format", fmt_default)}
    return build


def _spatial_fmt(a, x, default_by_rank):
    fmt = a.get("data_format")
    return fmt if fmt is not None else default_by_rank.get(len(x.shape))


_FMT = {3: "NCL", 4: "NCHW", 5: "NCDHW"}


def _adaptive_attrs(a):
    x = a["x"]
    fmt = a.get("data_format", "NCHW")
    if len(x.shape) != 4:
        return None
    spatial = [d for d in range(1, 4) if d != fmt.index("C")]
    osz = a["output_size"]
    if isinstance(osz, int) and not isinstance(osz, bool):
        osz = [osz, osz]
    if not isinstance(osz, (list, tuple)) or len(osz) != 2 or any(is_tensor(v) for v in osz):
        return None
    osz = [int(x.shape[d]) if v is None else int(v) for v, d in zip(osz, spatial)]
    return {"output_size": osz, "data_format": fmt}


def _interp_attrs(a):
    x = a["x"]
    fmt = _spatial_fmt(a, x, _FMT)
    if fmt is None or len(fmt) != len(x.shape) or a.get("antialias"):
        return None
    spatial = [d for d in range(1, len(x.shape)) if d != fmt.index("C")]
    size, scale = a.get("size"), a.get("scale_factor")
    if size is not None:
        if is_tensor(size) or (isinstance(size, (list, tuple)) and any(is_tensor(v) for v in size)):
            return None
        out = _ints(size, len(spatial))
    elif scale is not None:
        if is_tensor(scale):
            return None
        sc = [scale] * len(spatial) if isinstance(scale, (int, float)) else list(scale)
        if len(sc) != len(spatial):
            return None
        out = [int(x.shape[d] * float(f)) for d, f in zip(spatial, sc)]
    else:
        return None
    if out is None:
        return None
    return {"out_size": out, "mode": str(a.get("mode", "nearest")), "data_format": fmt}


def _pad_attrs(a):
    x = a["x"]
    pad = a["pad"]
    if is_tensor(pad) or not isinstance(pad, (list, tuple)) or any(is_tensor(v) for v in pad):
        return None
    nd = len(x.shape)
    if nd not in _FMT or len(pad) != 2 * (nd - 2):
        return None
    fmt = _spatial_fmt(a, x, _FMT)
    if fmt is None or len(fmt) != nd:
        return None
    return {"pad": [int(v) for v in pad], "mode": str(a.get("mode", "constant")), "data_format": fmt}


def _gather(a):
    axis = a.get("axis")
    if is_tensor(axis) or a.get("out") is not None or len(a["index"].shape) != 1:
        return None
    return {"axis": 0 if axis is None else int(axis)}


def _index_add(a):
    return None if a.get("out") is not None else {"axis": int(a["axis"])}


def _index_add_local(orig, a, t, ctx):
    return orig(t[0], t[1], a["axis"], t[2], a.get("alpha", 1))


def _scatter(a):
    return None if a.get("out") is not None else {"overwrite": bool(a.get("overwrite", True))}


def _kthvalue(a):
    axis = a.get("axis")
    return {"k": int(a["k"]), "axis": -1 if axis is None else int(axis), "keepdim": bool(a.get("keepdim", False))}


def _median(a):
    if a.get("mode", "avg") != "avg" or a.get("out") is not None:
        return None
    ax = _opt_axis(a.get("axis"))
    if ax is None and a.get("axis") is not None:
        return None
    return {"axis": ax, "keepdim": bool(a.get("keepdim", False))}


def _moment(a):
    if a.get("out") is not None or a.get("correction", 1) != 1:
        return None
    ax = _opt_axis(a.get("axis"))
    if ax is None and a.get("axis") is not None:
        return None
    unbiased = a.get("unbiased")
    return {"axis": ax, "unbiased": True if unbiased is None else bool(unbiased),
            "keepdim": bool(a.get("keepdim", False))}


def _mean(a):
    if a.get("dtype") is not None or a.get("out") is not None:
        return None
    ax = _opt_axis(a.get("axis"))
    if ax is None and a.get("axis") is not None:
        return None
    return {"axis": ax, "keepdim": bool(a.get("keepdim", False))}


def _mean_local(orig, a, t, ctx):
    """Local sum divided by the *global* count of the reduced elements (exact for uneven shards)."""
    import paddle

    x = t[0]
    ax = _opt_axis(a.get("axis"))
    shape = ctx.specs[0].shape if ctx is not None else tuple(x.shape)
    nd = len(shape)
    axes = list(range(nd)) if ax is None or ax == [] else [int(v) % max(nd, 1) for v in
                                                           ([ax] if isinstance(ax, int) else ax)]
    count = math.prod(shape[d] for d in set(axes)) if nd else 1
    s = paddle.sum(x, axis=axes if ax is not None else None, keepdim=bool(a.get("keepdim", False)))
    return s / float(count)


def _lerp(a):
    return {}


def _lerp_local(orig, a, t, ctx):
    w = t[2] if t[2] is not None else a["weight"]
    return orig(t[0], t[1], w)


def _none(a):
    return {}


def _scalar_attrs(*names):
    def build(a):
        return {n: a[n] for n in names if n in a}
    return build


OPS: tuple[PaddleOp, ...] = (
    PaddleOp("masked_fill", "masked_fill", ("paddle.masked_fill", "paddle.Tensor.masked_fill"), ("x", "mask"),
             _masked_fill),
    PaddleOp("isfinite", "isfinite", ("paddle.isfinite", "paddle.Tensor.isfinite"), ("x",), _none),
    PaddleOp("lerp", "lerp", ("paddle.lerp", "paddle.Tensor.lerp"), ("x", "y", "weight"), _lerp, _lerp_local),
    PaddleOp("tril", "tril", ("paddle.tril", "paddle.Tensor.tril"), ("x",), _tri, _tri_local,
             "keeps every dim sharded: the diagonal is shifted by the block offsets"),
    PaddleOp("triu", "triu", ("paddle.triu", "paddle.Tensor.triu"), ("x",), _tri, _tri_local,
             "keeps every dim sharded: the diagonal is shifted by the block offsets"),
    PaddleOp("flip", "flip", ("paddle.flip", "paddle.Tensor.flip"), ("x",), _flip),
    PaddleOp("cumprod", "cumprod", ("paddle.cumprod", "paddle.Tensor.cumprod"), ("x",), _cumprod),
    PaddleOp("logcumsumexp", "logcumsumexp", ("paddle.logcumsumexp", "paddle.Tensor.logcumsumexp"), ("x",),
             _logcumsumexp),
    PaddleOp("repeat_interleave", "repeat_interleave",
             ("paddle.repeat_interleave", "paddle.Tensor.repeat_interleave"), ("x",), _repeat_interleave),
    PaddleOp("max_pool2d", "max_pool2d", ("paddle.nn.functional.max_pool2d",), ("x",), _pool_attrs(2, "NCHW")),
    PaddleOp("avg_pool2d", "avg_pool2d", ("paddle.nn.functional.avg_pool2d",), ("x",), _pool_attrs(2, "NCHW")),
    PaddleOp("max_pool1d", "max_pool1d", ("paddle.nn.functional.max_pool1d",), ("x",), _pool_attrs(1, "NCL")),
    PaddleOp("avg_pool1d", "avg_pool1d", ("paddle.nn.functional.avg_pool1d",), ("x",), _pool_attrs(1, "NCL")),
    PaddleOp("adaptive_avg_pool2d", "adaptive_avg_pool2d", ("paddle.nn.functional.adaptive_avg_pool2d",), ("x",),
             _adaptive_attrs),
    PaddleOp("interpolate", "interpolate", ("paddle.nn.functional.interpolate",), ("x",), _interp_attrs),
    PaddleOp("pad", "pad_nd", ("paddle.nn.functional.pad",), ("x",), _pad_attrs, None,
             "spatial paddings only (len(pad) == 2 * spatial dims)"),
    PaddleOp("gather", "gather", ("paddle.gather", "paddle.Tensor.gather"), ("x", "index"), _gather),
    PaddleOp("gather_nd", "gather_nd", ("paddle.gather_nd", "paddle.Tensor.gather_nd"), ("x", "index"), _none),
    PaddleOp("index_add", "index_add", ("paddle.index_add", "paddle.Tensor.index_add"), ("x", "index", "value"),
             _index_add, _index_add_local),
    PaddleOp("scatter", "scatter", ("paddle.scatter", "paddle.Tensor.scatter"), ("x", "index", "updates"), _scatter),
    PaddleOp("kthvalue", "kthvalue", ("paddle.kthvalue", "paddle.Tensor.kthvalue"), ("x",), _kthvalue),
    PaddleOp("median", "median", ("paddle.median", "paddle.Tensor.median"), ("x",), _median),
    PaddleOp("std", "std", ("paddle.std", "paddle.Tensor.std"), ("x",), _moment),
    PaddleOp("var", "var", ("paddle.var", "paddle.Tensor.var"), ("x",), _moment),
    PaddleOp("mean", "mean_as_sum", ("paddle.mean", "paddle.Tensor.mean"), ("x",), _mean, _mean_local,
             "local sum / global count, P(sum): right for uneven shards (Paddle's P(avg) of local means is not)"),
    PaddleOp("addmm", "addmm", ("paddle.addmm", "paddle.Tensor.addmm"), ("input", "x", "y"),
             _scalar_attrs("beta", "alpha")),
    PaddleOp("baddbmm", "baddbmm", ("paddle.baddbmm", "paddle.Tensor.baddbmm"), ("input", "x", "y"),
             _scalar_attrs("beta", "alpha")),
    PaddleOp("kron", "kron", ("paddle.kron", "paddle.Tensor.kron"), ("x", "y"), _none),
)

BY_NAME = {o.name: o for o in OPS}


_HANDED_BACK: set = set()


def _note_hand_back(name: str, why: str) -> None:
    """One log line per op and reason (the reason's first clause), not one per call."""
    key = (name, why.split(";")[0])
    if key not in _HANDED_BACK:
        _HANDED_BACK.add(key)
        logging.getLogger("paddle_ext.dispatch").warning("paddle-ext hands %s back to Paddle: %s", name, why)


def make_wrapper(op: PaddleOp, original: Callable) -> Callable:
    """The patched public function: DistTensor calls through the rule, the rest to ``original``."""
    try:
        sig = inspect.signature(original)
    except (TypeError, ValueError):
        sig = None
    binder = Binder.of(sig) if sig is not None else None
    names = op.tensors

    def wrapper(*args, **kwargs):
        if not any_dist(args) and not (kwargs and any_dist(kwargs.values())):
            return original(*args, **kwargs)
        if sig is None:
            return original(*args, **kwargs)
        a = binder.bind(args, kwargs) if binder is not None else None
        if a is None:   # Signature.bind, with Python's check of the call
            try:
                bound = sig.bind(*args, **kwargs)
            except TypeError:
                return original(*args, **kwargs)   # Paddle reports the bad call itself
            bound.apply_defaults()
            a = dict(bound.arguments)
        attrs = op.attrs(a)
        if attrs is None:
            return original(*args, **kwargs)
        slots = [a.get(n) if is_tensor(a.get(n)) else None for n in names]

        def run_local(local_slots, ctx):
            if op.local is not None:
                return op.local(original, a, local_slots, ctx)
            given = a.copy()
            for n, v in zip(names, local_slots):
                if v is not None:
                    given[n] = v
            if binder is not None:
                return binder.call(original, given)
            b = sig.bind_partial()
            b.arguments.update(given)
            return original(*b.args, **b.kwargs)

        try:
            return dispatch(op.rule, slots, attrs, run_local)
        except HandBack as why:   # raised before anything ran: Paddle's own op serves the call
            _note_hand_back(op.name, str(why))
            return original(*args, **kwargs)

    wrapper.__name__ = getattr(original, "__name__", op.name)
    wrapper.__qualname__ = getattr(original, "__qualname__", op.name)
    wrapper.__doc__ = getattr(original, "__doc__", None)
    wrapper.__wrapped__ = original
    wrapper._paddle_ext_op = op
    return wrapper


__all__ = ["BY_NAME", "OPS", "PaddleOp", "make_wrapper"]
