"""Ground truth for the gap rules: numpy semantics and example instances for the validator.

Importing this module adds one :class:`~paddle_ext.spmd.opcases.OpCase` per gap rule to
``paddle_ext.spmd.opcases.CASES`` (names another family already registered are left alone), so
``paddle_ext.spmd.validator.check_op(op)`` and ``paddle-ext rules check`` cover them. Index and
mask inputs are generated as exact small integers / 0-1 floats; the local functions cast them.
"""
from __future__ import annotations

import math

import numpy as np

from paddle_ext.spmd.opcases import CASES, OpCase

ADDED: list[str] = []


def _add(case: OpCase) -> None:
    if case.op not in CASES:
        CASES[case.op] = case
        ADDED.append(case.op)


def _first(examples):
    return lambda rng: examples[0]


def _std(rng, shapes, attrs):
    return [rng.standard_normal(s) for s in shapes]


def _with(kinds):
    """inputs builder: per input 'f' normal, 'm' 0/1 mask, ('i', hi) index, ('u', hi) unique index."""
    def make(rng, shapes, attrs):
        out = []
        for k, s in zip(kinds, shapes):
            if k == "f":
                out.append(rng.standard_normal(s))
            elif k == "m":
                out.append((rng.random(s) < 0.5).astype(np.float64))
            elif k[0] == "i":
                out.append(rng.integers(0, k[1], size=s).astype(np.float64))
            else:
                out.append(rng.permutation(k[1])[:s[0]].astype(np.float64))
        return out
    return make


def _case(op, dense, examples, inputs=None, needs_ctx=False, partial_ok=("sum", "avg", "max", "min")):
    _add(OpCase(op, dense, tuple(examples), _first(examples), None, None, inputs, needs_ctx, partial_ok,
                ("gaps",)))


def _ax(axis, nd):
    return None if axis is None else int(axis) % nd


# -- pointwise ------------------------------------------------------------------------------------------
_case("masked_fill", lambda a: (lambda x, m: np.where(m > 0.5, a.get("value", 0.0), x)),
      [([(4, 6), (4, 6)], {"value": 0.5}), ([(5, 7), (7,)], {"value": -1.0})], _with(["f", "m"]))
_case("isfinite", lambda a: np.isfinite, [([(5, 7)], {})])
_case("lerp", lambda a: (lambda x, y, w: x + w * (y - x)),
      [([(4, 6), (4, 6), (4, 6)], {}), ([(5, 7), (5, 7), (7,)], {})])


def _tri(fn):
    def make(a):
        def f(ctx, x):
            d = int(a.get("diagonal", 0))
            if ctx is not None:
                d += ctx.offset(0, x.ndim - 2) - ctx.offset(0, x.ndim - 1)
            return fn(x, d)
        return f
    return make


_case("tril", _tri(np.tril), [([(5, 7)], {"diagonal": 1}), ([(2, 4, 5)], {"diagonal": -1})], needs_ctx=True)
_case("triu", _tri(np.triu), [([(6, 5)], {"diagonal": 0}), ([(5, 7)], {"diagonal": 2})], needs_ctx=True)
_case("flip", lambda a: (lambda x: np.flip(x, tuple(a["axis"]))),
      [([(5, 6)], {"axis": [1]}), ([(4, 5, 3)], {"axis": [0, 2]})])


def _scan(fn, key):
    def make(a):
        def f(x):
            axis = a.get(key)
            if axis is None:
                return fn(x.reshape(-1), 0)
            return fn(x, int(axis) % x.ndim)
        return f
    return make


_case("cumprod", _scan(lambda x, ax: np.cumprod(x, axis=ax), "dim"),
      [([(5, 4)], {"dim": 1}), ([(4, 6)], {"dim": 0}), ([(3, 4)], {"dim": None})])
_case("logcumsumexp", _scan(lambda x, ax: np.logaddexp.accumulate(x, axis=ax), "axis"),
      [([(4, 6)], {"axis": 0}), ([(5, 7)], {"axis": -1})])
_case("repeat_interleave",
      lambda a: (lambda x: np.repeat(x.reshape(-1) if a.get("axis") is None else x, a["repeats"],
                                     axis=0 if a.get("axis") is None else int(a["axis"]) % x.ndim)),
      [([(4, 5)], {"repeats": 2, "axis": 0}), ([(5, 3)], {"repeats": 3, "axis": 1}),
       ([(5, 3)], {"repeats": 2, "axis": 0})])


# -- spatial -------------------------------------------------------------------------------------------
def _spatial(fmt, nd):
    c = fmt.index("C")
    return [d for d in range(1, nd) if d != c]


def _pool(kind):
    def make(a):
        def f(x):
            sp = _spatial(a.get("data_format", "NCHW" if x.ndim == 4 else "NCL"), x.ndim)
            k, s, p = a["kernel_size"], a["stride"], a["padding"]
            outs = []
            for j, d in enumerate(sp):
                span = x.shape[d] + p[2 * j] + p[2 * j + 1] - k[j]
                outs.append((-(-span // s[j]) if a.get("ceil_mode") else span // s[j]) + 1)
            width = [(0, 0)] * x.ndim
            for j, d in enumerate(sp):
                extra = max(0, (outs[j] - 1) * s[j] + k[j] - (x.shape[d] + p[2 * j] + p[2 * j + 1]))
                width[d] = (p[2 * j], p[2 * j + 1] + extra)
            xp = np.pad(x.astype(np.float64), width, constant_values=np.nan)
            shape = list(x.shape)
            for j, d in enumerate(sp):
                shape[d] = outs[j]
            out = np.empty(shape)
            for idx in np.ndindex(*[outs[j] for j in range(len(sp))]):
                sl = [slice(None)] * x.ndim
                for j, d in enumerate(sp):
                    sl[d] = slice(idx[j] * s[j], idx[j] * s[j] + k[j])
                win = xp[tuple(sl)]
                red = tuple(sp)
                val = np.nanmax(win, axis=red) if kind == "max" else np.nanmean(win, axis=red)
                osl = [slice(None)] * x.ndim
                for j, d in enumerate(sp):
                    osl[d] = idx[j]
                out[tuple(osl)] = val
            return out
        return f
    return make


_P2 = {"kernel_size": [2, 2], "stride": [2, 2], "padding": [0, 0, 0, 0]}
_P2b = {"kernel_size": [3, 3], "stride": [2, 2], "padding": [1, 1, 1, 1]}
_case("max_pool2d", _pool("max"), [([(4, 3, 6, 6)], _P2), ([(3, 2, 5, 5)], dict(_P2b, ceil_mode=True))])
_case("avg_pool2d", _pool("avg"), [([(4, 3, 6, 6)], _P2), ([(3, 2, 5, 5)], _P2b)])
_case("max_pool1d", _pool("max"), [([(4, 3, 8)], {"kernel_size": [2], "stride": [2], "padding": [0, 0]})])
_case("avg_pool1d", _pool("avg"), [([(3, 4, 7)], {"kernel_size": [3], "stride": [1], "padding": [1, 1]})])


def _adaptive(a):
    def f(x):
        sp = _spatial(a.get("data_format", "NCHW"), x.ndim)
        osz = a["output_size"]
        shape = list(x.shape)
        for d, o in zip(sp, osz):
            shape[d] = o
        out = np.empty(shape)
        for idx in np.ndindex(*osz):
            sl, osl = [slice(None)] * x.ndim, [slice(None)] * x.ndim
            for j, d in enumerate(sp):
                n = x.shape[d]
                sl[d] = slice(math.floor(idx[j] * n / osz[j]), math.ceil((idx[j] + 1) * n / osz[j]))
                osl[d] = idx[j]
            out[tuple(osl)] = x[tuple(sl)].mean(axis=tuple(sp))
        return out
    return f


_case("adaptive_avg_pool2d", _adaptive, [([(4, 2, 7, 7)], {"output_size": [3, 3]})])


def _nearest(a):
    def f(x):
        sp = _spatial(a.get("data_format", "NCHW"), x.ndim)
        out = x
        for d, o in zip(sp, a["out_size"]):
            idx = np.floor(np.arange(o) * x.shape[d] / o).astype(int)
            out = np.take(out, idx, axis=d)
        return out
    return f


_case("interpolate", _nearest, [([(4, 2, 3, 3)], {"out_size": [6, 6], "mode": "nearest"})])


def _pad(a):
    def f(x):
        sp = _spatial(a.get("data_format", "NCHW"), x.ndim)
        width = [(0, 0)] * x.ndim
        for j, d in enumerate(reversed(sp)):
            width[d] = (a["pad"][2 * j], a["pad"][2 * j + 1])
        mode = {"constant": "constant", "reflect": "reflect", "replicate": "edge"}[a.get("mode", "constant")]
        return np.pad(x, width, mode=mode)
    return f


_case("pad_nd", _pad, [([(4, 3, 5, 5)], {"pad": [1, 2, 0, 1], "mode": "reflect"}),
                       ([(3, 4, 4, 4)], {"pad": [1, 1, 1, 1], "mode": "constant"})])


# -- indexing --------------------------------------------------------------------------------------------
_case("gather", lambda a: (lambda x, i: np.take(x, i.astype(int), axis=int(a.get("axis", 0)) % x.ndim)),
      [([(5, 6), (4,)], {"axis": 1}), ([(4, 5, 3), (6,)], {"axis": 1})], _with(["f", ("i", 5)]))


def _gather_nd(a):
    def f(x, i):
        i = i.astype(int)
        k = i.shape[-1]
        return x[tuple(i[..., j] for j in range(k))]
    return f


_case("gather_nd", _gather_nd, [([(4, 5, 6), (6, 1)], {}), ([(4, 5, 3), (3, 2)], {})], _with(["f", ("i", 4)]))


def _index_add(a):
    def f(x, i, v):
        out = x.copy()
        ax = int(a.get("axis", 0)) % x.ndim
        idx = [slice(None)] * x.ndim
        idx[ax] = i.astype(int)
        np.add.at(out, tuple(idx), v)
        return out
    return f


_case("index_add", _index_add, [([(5, 6), (3,), (5, 3)], {"axis": 1})], _with(["f", ("u", 6), "f"]))


def _scatter(a):
    def f(x, i, u):
        out = x.copy()
        i = i.astype(int)
        if a.get("overwrite", True):
            out[i] = u
        else:
            out[i] = 0
            np.add.at(out, i, u)
        return out
    return f


_case("scatter", _scatter, [([(6, 5), (3,), (3, 5)], {}), ([(6, 4), (3,), (3, 4)], {"overwrite": False})],
      _with(["f", ("u", 6), "f"]))


# -- statistics -------------------------------------------------------------------------------------------
def _kth(a):
    def f(x):
        ax = int(a.get("axis", -1)) % x.ndim
        k = int(a["k"])
        idx = np.take(np.argsort(x, axis=ax, kind="stable"), [k - 1], axis=ax)
        val = np.take_along_axis(x, idx, axis=ax)
        if not a.get("keepdim"):
            val, idx = np.squeeze(val, ax), np.squeeze(idx, ax)
        return val, idx.astype(np.float64)
    return f


_case("kthvalue", _kth, [([(5, 6)], {"k": 2, "axis": 1}), ([(4, 5)], {"k": 3, "axis": 0, "keepdim": True})])


def _reduce(fn, extra=None):
    def make(a):
        def f(x):
            ax = a.get("axis")
            axes = None if ax is None else tuple(sorted({int(v) % x.ndim for v in ([ax] if isinstance(ax, int)
                                                                                  else ax)}))
            kw = extra(a) if extra else {}
            return fn(x, axis=axes, keepdims=bool(a.get("keepdim", False)), **kw)
        return f
    return make


_case("median", _reduce(np.median), [([(6, 5)], {"axis": 1}), ([(5, 7)], {"axis": None})])
_case("std", _reduce(np.std, lambda a: {"ddof": 1 if a.get("unbiased", True) else 0}),
      [([(6, 5)], {"axis": 0}), ([(5, 7)], {"axis": (1,), "unbiased": False})])
_case("var", _reduce(np.var, lambda a: {"ddof": 1 if a.get("unbiased", True) else 0}),
      [([(5, 6)], {"axis": 1}), ([(4, 6)], {"axis": None, "keepdim": True})])


def _mean_as_sum(a):
    def f(ctx, x):
        shape = ctx.specs[0].shape if ctx is not None else x.shape
        ax = a.get("axis")
        axes = tuple(range(len(shape))) if ax is None or ax == [] else \
            tuple(sorted({int(v) % len(shape) for v in ([ax] if isinstance(ax, int) else ax)}))
        count = math.prod(shape[d] for d in axes)
        return x.sum(axis=axes, keepdims=bool(a.get("keepdim", False))) / count
    return f


_case("mean_as_sum", _mean_as_sum, [([(5, 7)], {"axis": None}), ([(5, 7)], {"axis": (0,)}),
                                    ([(4, 6)], {"axis": (1,), "keepdim": True})], needs_ctx=True)


# -- linalg ---------------------------------------------------------------------------------------------
_case("addmm", lambda a: (lambda i, x, y: a.get("beta", 1.0) * i + a.get("alpha", 1.0) * (x @ y)),
      [([(4, 6), (4, 8), (8, 6)], {"beta": 0.5, "alpha": 2.0}), ([(6,), (5, 4), (4, 6)], {})])
_case("baddbmm", lambda a: (lambda i, x, y: a.get("beta", 1.0) * i + a.get("alpha", 1.0) * np.matmul(x, y)),
      [([(2, 3, 4), (2, 3, 6), (2, 6, 4)], {"alpha": 0.5})])
_case("kron", lambda a: np.kron, [([(4, 3), (2, 2)], {}), ([(5, 2), (2, 3)], {})])

__all__ = ["ADDED"]
