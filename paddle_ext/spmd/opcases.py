"""The ops the validator and the differential tests know: dense numpy semantics, example and
random instances, and how to call Paddle's C++ rule for the same op.

An :class:`OpCase` ties one op to

* ``dense(attrs)`` -> a numpy function of the (local) input arrays returning one array or a
  tuple; ops that need to know their shard (vocab-parallel embedding) take a ``ctx`` first;
* ``examples``: fixed ``(input shapes, attrs)`` instances, uneven sizes included;
* ``gen(rng)``: a random valid instance for differential tests;
* ``paddle``: the name of Paddle's C++ rule and ``paddle_args(specs, attrs)`` its positional
  arguments (``None`` when Paddle has no callable rule for the op).

Input shapes are a list with one entry per tensor parameter; a tensor-list parameter is a list
of shapes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..errors import ShardingRuleError
from ..placements import DistSpec


@dataclass(frozen=True)
class OpCase:
    op: str
    dense: Callable
    examples: tuple
    gen: Callable
    paddle: str | None = None
    paddle_args: Callable | None = None
    inputs: Callable | None = None      # (rng, shapes, attrs) -> arrays; default standard normal
    needs_ctx: bool = False
    partial_ok: tuple = ("sum", "avg", "max", "min")
    tags: tuple = field(default=())


def _positive(rng, shapes, attrs):
    return [np.abs(np.asarray(rng.standard_normal(s))) + 0.5 for s in shapes]


def _shape(rng, ndim, lo=1, hi=7):
    return tuple(int(v) for v in rng.integers(lo, hi + 1, size=ndim))


CASES: dict[str, OpCase] = {}   # the families below, plus every case registered with its rule


def _add(case: OpCase) -> None:
    CASES[case.op] = case


def add_case(case: OpCase, replace: bool = False) -> None:
    """Add the ground truth of a rule registered with ``register_spmd_rule(op, case=...)``; one case per op."""
    if case.op in CASES and CASES[case.op] is not case and not replace:
        raise ShardingRuleError(f"the validator already has a case for {case.op!r}; register the rule with "
                                f"override=True to replace it")
    CASES[case.op] = case


# -- matmul family --------------------------------------------------------------------------------
def _mm_dense(a):
    def f(x, y):
        if a.get("trans_x") and x.ndim >= 2:
            x = np.swapaxes(x, -1, -2)
        if a.get("trans_y") and y.ndim >= 2:
            y = np.swapaxes(y, -1, -2)
        return np.matmul(x, y)
    return f


def _mm_gen(rng):
    m, k, n = _shape(rng, 3, 1, 8)
    tx, ty = bool(rng.integers(2)), bool(rng.integers(2))
    batch = _shape(rng, int(rng.integers(0, 3)), 1, 4)
    xb = batch[int(rng.integers(0, len(batch) + 1)):] if batch else ()
    x = xb + ((k, m) if tx else (m, k))
    y = batch + ((n, k) if ty else (k, n))
    return [x, y], {"trans_x": tx, "trans_y": ty}


_add(OpCase("matmul", _mm_dense, (([(4, 6), (6, 8)], {}), ([(5, 7), (7, 3)], {}),
                                  ([(2, 5, 4), (4, 6)], {}), ([(6, 4), (8, 6)], {"trans_x": True, "trans_y": True})),
            _mm_gen, "matmul",
            lambda s, a: list(s) + [a.get("trans_x", False), a.get("trans_y", False)]))
_add(OpCase("bmm", lambda a: np.matmul, (([(2, 4, 6), (2, 6, 3)], {}), ([(3, 5, 4), (3, 4, 5)], {})),
            lambda rng: (lambda b, m, k, n: ([(b, m, k), (b, k, n)], {}))(*_shape(rng, 4, 1, 6)),
            "bmm", lambda s, a: list(s)))

# -- elementwise ----------------------------------------------------------------------------------
UNARY_DENSE = {
    "relu": lambda x: np.maximum(x, 0), "exp": np.exp, "tanh": np.tanh, "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "square": np.square, "abs": np.abs, "sin": np.sin, "sqrt": np.sqrt, "log": np.log,
    "silu": lambda x: x / (1 + np.exp(-x)),
}


def _unary_gen(rng):
    return [_shape(rng, int(rng.integers(1, 4)))], {}


for _op, _fn in UNARY_DENSE.items():
    _add(OpCase(_op, (lambda f: lambda a: f)(_fn), (([(4, 6)], {}), ([(5, 7)], {}), ([(3,)], {})),
                _unary_gen, _op, lambda s, a: list(s),
                inputs=_positive if _op in ("sqrt", "log") else None, tags=("unary",)))

BINARY_DENSE = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
                "maximum": np.maximum, "minimum": np.minimum}


def _binary_gen(rng):
    shape = _shape(rng, int(rng.integers(1, 4)))
    other = tuple(1 if rng.random() < 0.25 else s for s in shape)
    other = other[int(rng.integers(0, len(other) + 1)) if rng.random() < 0.3 else 0:]
    return ([shape, other] if rng.random() < 0.5 else [other, shape]), {}


for _op, _fn in BINARY_DENSE.items():
    _add(OpCase(_op, (lambda f: lambda a: f)(_fn),
                (([(4, 6), (4, 6)], {}), ([(5, 7), (7,)], {}), ([(4, 1), (4, 6)], {})),
                _binary_gen, _op, lambda s, a: list(s),
                inputs=(lambda rng, sh, a: [np.asarray(rng.standard_normal(sh[0])),
                                            np.abs(rng.standard_normal(sh[1])) + 0.5]) if _op == "divide" else None,
                tags=("binary",)))


# -- reductions -----------------------------------------------------------------------------------
def _axes(a, ndim):
    ax = a.get("axis", ())
    ax = [ax] if isinstance(ax, int) else list(ax)
    return tuple(sorted({x % ndim for x in ax})) if ax else tuple(range(ndim))


def _red_dense(np_fn):
    """A local reduction; max/min of an empty shard give the identity (-inf/+inf), as a kernel does."""
    init = {np.max: -np.inf, np.min: np.inf}.get(np_fn)

    def make(a):
        if init is None:
            return lambda x: np_fn(x, axis=_axes(a, x.ndim), keepdims=a.get("keepdim", False))
        return lambda x: np_fn(x, axis=_axes(a, x.ndim), keepdims=a.get("keepdim", False), initial=init)
    return make


def _red_gen(rng):
    nd = int(rng.integers(1, 4))
    k = int(rng.integers(0, nd + 1))
    axis = sorted(int(v) for v in rng.choice(nd, size=k, replace=False))
    return [_shape(rng, nd)], {"axis": axis, "keepdim": bool(rng.integers(2))}


_RED_EX = (([(4, 6)], {"axis": [0], "keepdim": False}), ([(5, 7)], {"axis": [0], "keepdim": False}),
           ([(5, 7)], {"axis": [1], "keepdim": True}), ([(5, 7)], {"axis": [], "keepdim": False}))
for _op, _fn in (("sum", np.sum), ("max", np.max), ("min", np.min), ("mean", np.mean)):
    _add(OpCase(_op, _red_dense(_fn), _RED_EX, _red_gen, None if _op == "mean" else _op,
                lambda s, a: list(s) + [list(a.get("axis", [])), a.get("keepdim", False)], tags=("reduction",)))
_add(OpCase("mean_all", lambda a: (lambda x: np.mean(x)), (([(4, 6)], {}), ([(5, 7)], {})),
            lambda rng: ([_shape(rng, int(rng.integers(1, 4)))], {}), "mean_all", lambda s, a: list(s),
            tags=("reduction",)))


# -- softmax / norms ------------------------------------------------------------------------------
def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _axis_gen(rng):
    nd = int(rng.integers(1, 4))
    return [_shape(rng, nd)], {"axis": int(rng.integers(-nd, nd))}


_add(OpCase("softmax", lambda a: lambda x: _softmax(x, a.get("axis", -1)),
            (([(4, 6)], {"axis": -1}), ([(5, 7)], {"axis": 0})), _axis_gen, "softmax",
            lambda s, a: list(s) + [a.get("axis", -1)]))
_add(OpCase("log_softmax", lambda a: lambda x: np.log(_softmax(x, a.get("axis", -1))),
            (([(4, 6)], {"axis": -1}), ([(5, 7)], {"axis": 0})), _axis_gen, "log_softmax",
            lambda s, a: list(s) + [a.get("axis", -1)]))


def _ln_dense(a):
    def f(x, scale, bias):
        b = a.get("begin_norm_axis", 1) % x.ndim
        ax = tuple(range(b, x.ndim))
        mean = x.mean(axis=ax, keepdims=True)
        var = x.var(axis=ax, keepdims=True)
        out = (x - mean) / np.sqrt(var + a.get("epsilon", 1e-5))
        out = out * scale.reshape(x.shape[b:]) + bias.reshape(x.shape[b:])
        return out, mean.reshape(x.shape[:b]), var.reshape(x.shape[:b])
    return f


def _ln_gen(rng):
    nd = int(rng.integers(2, 4))
    shape = _shape(rng, nd, 1, 6)
    b = int(rng.integers(1, nd))
    p = (math.prod(shape[b:]),)
    return [shape, p, p], {"epsilon": 1e-5, "begin_norm_axis": b}


_add(OpCase("layer_norm", _ln_dense, (([(4, 6), (6,), (6,)], {"begin_norm_axis": 1}),
                                      ([(5, 3, 4), (4,), (4,)], {"begin_norm_axis": 2})),
            _ln_gen, "layer_norm",
            lambda s, a: list(s) + [a.get("epsilon", 1e-5), a.get("begin_norm_axis", 1)]))


def _rms_dense(a):
    def f(x, scale):
        ms = np.mean(x * x, axis=-1, keepdims=True)
        inv = 1 / np.sqrt(ms + a.get("epsilon", 1e-6))
        return x * inv * scale, inv.reshape(x.shape[:-1])
    return f


_add(OpCase("rms_norm", _rms_dense, (([(4, 6), (6,)], {}), ([(5, 3, 4), (4,)], {})),
            lambda rng: (lambda sh: ([sh, sh[-1:]], {"epsilon": 1e-6}))(_shape(rng, int(rng.integers(2, 4)))),
            "fused_rms_norm", lambda s, a: list(s) + [a.get("epsilon", 1e-6)]))


# -- embedding ------------------------------------------------------------------------------------
def _emb_dense(a):
    def f(ctx, ids, w):
        off = ctx.offset(1, 0) if ctx is not None else 0
        if w.shape[0] == 0:
            return np.zeros(ids.shape + w.shape[1:])
        local = ids - off
        ok = (local >= 0) & (local < w.shape[0])
        out = w[np.where(ok, local, 0)]
        return np.where(ok[..., None], out, 0.0)
    return f


def _emb_inputs(rng, shapes, attrs):
    ids = rng.integers(0, shapes[1][0], size=shapes[0])
    return [ids, np.asarray(rng.standard_normal(shapes[1]))]


_add(OpCase("embedding", _emb_dense, (([(4, 3), (6, 5)], {}), ([(5,), (7, 4)], {})),
            lambda rng: ([_shape(rng, int(rng.integers(1, 3))), _shape(rng, 2, 2, 8)],
                         {"padding_idx": -1, "sparse": False}),
            "embedding", lambda s, a: list(s) + [a.get("padding_idx", -1), a.get("sparse", False)],
            inputs=_emb_inputs, needs_ctx=True, partial_ok=("sum",)))

# -- shape ops ------------------------------------------------------------------------------------
_add(OpCase("transpose", lambda a: lambda x: np.transpose(x, a["perm"]),
            (([(4, 6, 2)], {"perm": [2, 0, 1]}), ([(5, 7)], {"perm": [1, 0]})),
            lambda rng: (lambda nd: ([_shape(rng, nd)], {"perm": [int(v) for v in rng.permutation(nd)]}))(
                int(rng.integers(1, 4))),
            "transpose", lambda s, a: list(s) + [list(a["perm"])]))


def _reshape_gen(rng):
    nd = int(rng.integers(1, 4))
    shape = _shape(rng, nd, 1, 6)
    n = math.prod(shape)
    tgt, rest = [], n
    for _ in range(int(rng.integers(1, 4)) - 1):
        divs = [d for d in range(1, rest + 1) if rest % d == 0]
        d = int(rng.choice(divs))
        tgt.append(d)
        rest //= d
    tgt.append(rest)
    if rng.random() < 0.3:
        tgt[int(rng.integers(len(tgt)))] = -1
    return [shape], {"shape": tgt}


def _target(ctx, a):
    """The target shape a local kernel uses: the output's local shape on this rank."""
    return a["shape"] if ctx is None else ctx.out_shape(0)


_add(OpCase("reshape", lambda a: lambda ctx, x: np.reshape(x, _target(ctx, a)),
            (([(4, 6)], {"shape": [24]}), ([(6, 4)], {"shape": [2, 3, 4]}), ([(5, 4)], {"shape": [20]}),
             ([(4, 3)], {"shape": [2, 6]})),
            _reshape_gen, "reshape", lambda s, a: list(s) + [list(a["shape"])], needs_ctx=True))


def _flatten_np(x, a):
    nd = x.ndim
    st, sp = a.get("start_axis", 0) % nd, a.get("stop_axis", -1) % nd
    return np.reshape(x, x.shape[:st] + (-1,) + x.shape[sp + 1:])


def _flatten_gen(rng):
    nd = int(rng.integers(1, 4))
    st = int(rng.integers(0, nd))
    return [_shape(rng, nd)], {"start_axis": st, "stop_axis": int(rng.integers(st, nd))}


def _local_reshape(global_fn):
    """A view op run per rank: the kernel reshapes its shard to the output's local shape."""
    return lambda a: lambda ctx, x: global_fn(x, a) if ctx is None else np.reshape(x, ctx.out_shape(0))


_add(OpCase("flatten", _local_reshape(_flatten_np),
            (([(4, 6, 2)], {"start_axis": 0, "stop_axis": 1}), ([(5, 4)], {"start_axis": 0, "stop_axis": 1})),
            _flatten_gen, "flatten", lambda s, a: list(s) + [a.get("start_axis", 0), a.get("stop_axis", -1)],
            needs_ctx=True))


def _squeeze_gen(rng):
    shape = tuple(1 if rng.random() < 0.4 else int(v) for v in rng.integers(2, 6, size=int(rng.integers(1, 4))))
    ones = [d for d, s in enumerate(shape) if s == 1]
    return [shape], {"axis": ones[: int(rng.integers(0, len(ones) + 1))]}


_add(OpCase("squeeze", _local_reshape(lambda x, a: np.squeeze(x, axis=tuple(a["axis"])) if a.get("axis")
                                     else np.squeeze(x)),
            (([(4, 1, 6)], {"axis": [1]}), ([(5, 1)], {"axis": []})), _squeeze_gen, "squeeze",
            lambda s, a: list(s) + [list(a.get("axis", []))], needs_ctx=True))
_add(OpCase("unsqueeze", _local_reshape(lambda x, a: np.expand_dims(x, tuple(a["axis"]))),
            (([(4, 6)], {"axis": [0]}), ([(5, 7)], {"axis": [1]})),
            lambda rng: (lambda nd: ([_shape(rng, nd)], {"axis": [int(rng.integers(0, nd + 1))]}))(
                int(rng.integers(1, 4))),
            "unsqueeze", lambda s, a: list(s) + [list(a["axis"])], needs_ctx=True))


def _expand_gen(rng):
    shape = tuple(1 if rng.random() < 0.4 else int(v) for v in rng.integers(2, 6, size=int(rng.integers(1, 3))))
    lead = tuple(int(v) for v in rng.integers(1, 4, size=int(rng.integers(0, 2))))
    tgt = lead + tuple(int(rng.integers(2, 5)) if s == 1 else s for s in shape)
    return [shape], {"shape": list(tgt)}


def _expand_paddle(specs, a):
    x = specs[0]
    y = DistSpec(tuple(a["shape"]), x.mesh_shape, ["R"] * len(x.mesh_shape))
    return [x, y, list(a["shape"])]


_add(OpCase("expand", lambda a: lambda ctx, x: np.broadcast_to(x, _target(ctx, a)).copy(),
            (([(4, 1)], {"shape": [4, 6]}), ([(5,)], {"shape": [3, 5]})), _expand_gen, "expand_as", _expand_paddle,
            needs_ctx=True))
_add(OpCase("tile", lambda a: lambda x: np.tile(x, a["repeat_times"]),
            (([(4, 6)], {"repeat_times": [2, 1]}), ([(5, 3)], {"repeat_times": [1, 2]})),
            lambda rng: (lambda nd: ([_shape(rng, nd)], {"repeat_times": [int(v) for v in
                                                                           rng.integers(1, 3, size=nd)]}))(
                int(rng.integers(1, 4))),
            "tile", lambda s, a: list(s) + [list(a["repeat_times"])]))


# -- concat / split / stack / slice / cumsum ------------------------------------------------------
def _list_gen(same_axis: bool):
    def gen(rng):
        nd = int(rng.integers(1, 4))
        shape = _shape(rng, nd)
        axis = int(rng.integers(-nd, nd)) if same_axis else int(rng.integers(-nd - 1, nd + 1))
        n = int(rng.integers(2, 4))
        shapes = []
        for _ in range(n):
            s = list(shape)
            if same_axis:
                s[axis % nd] = int(rng.integers(1, 6))
            shapes.append(tuple(s))
        return [shapes], {"axis": axis}
    return gen


_add(OpCase("concat", lambda a: lambda *xs: np.concatenate(xs, axis=a.get("axis", 0)),
            (([[(4, 6), (3, 6)]], {"axis": 0}), ([[(5, 3), (5, 4)]], {"axis": 1})),
            _list_gen(True), "concat", lambda s, a: [list(s[0]), a.get("axis", 0)]))
_add(OpCase("stack", lambda a: lambda *xs: np.stack(xs, axis=a.get("axis", 0)),
            (([[(4, 6), (4, 6)]], {"axis": 0}), ([[(5, 3), (5, 3)]], {"axis": 1})),
            _list_gen(False), "stack", lambda s, a: [list(s[0]), a.get("axis", 0)]))


def _split_np(x, a):
    secs = a["sections"]
    cuts = np.cumsum(secs)[:-1]
    return tuple(np.split(x, cuts, axis=a.get("axis", 0)))


def _split_gen(rng):
    nd = int(rng.integers(1, 4))
    shape = _shape(rng, nd, 2, 7)
    axis = int(rng.integers(-nd, nd))
    n = shape[axis % nd]
    k = int(rng.integers(1, n))
    return [shape], {"sections": [k, n - k], "axis": axis}


_add(OpCase("split", lambda a: lambda x: _split_np(x, a),
            (([(4, 6)], {"sections": [2, 4], "axis": 1}), ([(5, 7)], {"sections": [3, 4], "axis": 1})),
            _split_gen, "split", lambda s, a: list(s) + [list(a["sections"]), a.get("axis", 0)]))


def _slice_np(x, a):
    idx = [slice(None)] * x.ndim
    for ax, st, en in zip(a["axes"], a["starts"], a["ends"]):
        idx[ax] = slice(st, en)
    out = x[tuple(idx)]
    dec = tuple(a.get("decrease_axis", []))
    return np.squeeze(out, axis=dec) if dec else out


def _slice_gen(rng):
    nd = int(rng.integers(1, 4))
    shape = _shape(rng, nd, 2, 7)
    ax = int(rng.integers(0, nd))
    st = int(rng.integers(0, shape[ax] - 1))
    return [shape], {"axes": [ax], "starts": [st], "ends": [int(rng.integers(st + 1, shape[ax] + 1))],
                     "infer_flags": [1], "decrease_axis": []}


_add(OpCase("slice", lambda a: lambda x: _slice_np(x, a),
            (([(4, 6)], {"axes": [1], "starts": [1], "ends": [4], "infer_flags": [1], "decrease_axis": []}),
             ([(5, 7)], {"axes": [0], "starts": [0], "ends": [3], "infer_flags": [1], "decrease_axis": []})),
            _slice_gen, "slice",
            lambda s, a: list(s) + [list(a["axes"]), list(a["starts"]), list(a["ends"]),
                                    list(a.get("infer_flags", [])), list(a.get("decrease_axis", []))]))


def _cumsum_axis(specs, a):
    """Paddle's cumsum rule does not normalise a negative axis: it indexes dims_mapping with it,
    which corrupts the heap (``axis=-1`` aborts the process with ``munmap_chunk(): invalid
    pointer``; other negative axes leave the scanned dim sharded). Pass ``axis % ndim``."""
    ax = a.get("axis", -1)
    return ax % max(specs[0].ndim, 1)


def _cumsum_np(x, a):
    if a.get("flatten"):
        x = x.reshape(-1)
        ax = 0
    else:
        ax = a.get("axis", -1)
    return np.cumsum(x, axis=ax)


_add(OpCase("cumsum", lambda a: lambda x: _cumsum_np(x, a),
            (([(4, 6)], {"axis": 1}), ([(5, 7)], {"axis": 0}), ([(5, 7)], {"axis": -2}),
             ([(4, 6)], {"axis": -1, "flatten": True})),
            lambda rng: (lambda nd: ([_shape(rng, nd)], {"axis": int(rng.integers(-nd, nd)),
                                                           "flatten": bool(rng.random() < 0.2),
                                                           "exclusive": False, "reverse": False}))(
                int(rng.integers(1, 4))),
            "cumsum", lambda s, a: list(s) + [_cumsum_axis(s, a), a.get("flatten", False),
                                              a.get("exclusive", False), a.get("reverse", False)]))


__all__ = ["CASES", "OpCase", "add_case"]
