"""addmm, baddbmm, kron.

``addmm``/``baddbmm`` are ``beta * input + alpha * (x @ y)``: the product follows the matmul
notation, and because the result is a *sum* of two terms, ``input`` must take the output's
layout -- including ``P(sum)`` when the contraction dim is sharded (a replicated ``input`` would
otherwise be added once per rank). That is a required reshard ``R -> P(sum)`` (local: kept on
coordinate 0, zeros elsewhere), stated in the result like any other.

The sum is affine in ``input`` and in each factor alone: on a mesh dim the product leaves free,
a ``P(sum)``/``P(avg)`` factor makes a partial product that ``input`` follows (a ``P(avg)``
needs nothing of a replicated ``input``: it is its own average), and a partial ``input`` stays
partial -- with ``P(sum)``, ``x`` is made partial locally so the product is counted once.

``kron`` keeps a dim of ``x`` sharded when it splits evenly over the whole mesh (each block of
``x`` rows makes a contiguous block of output rows); either input may be ``P(sum)``/``P(avg)``
(linear in each alone).
"""
from __future__ import annotations

import numpy as np

from paddle_ext.placements import DistSpec, Partial, Replicate, Shard
from paddle_ext.spmd.einsum import infer_einsum
from paddle_ext.spmd.registry import Rows, register_spmd_rule
from paddle_ext.spmd.result import make_result

from ._common import gap_case, world


def _follow_output(inp: DistSpec, out: DistSpec) -> DistSpec:
    """``inp`` (broadcast to ``out``) laid out like ``out``; size-1/missing dims replicated; a
    replicated ``inp`` meets ``P(avg)`` as it is."""
    lead = out.ndim - inp.ndim
    pls = []
    for p, have in zip(out.placements, inp.placements):
        if isinstance(p, Partial):
            pls.append(have if have == p else (Replicate() if p.op != "sum" else p))
        elif isinstance(p, Shard):
            d = p.dim - lead
            pls.append(Shard(d) if d >= 0 and inp.shape[d] == out.shape[p.dim] and inp.shape[d] > 1
                       else Replicate())
        else:
            pls.append(Replicate())
    return DistSpec(inp.shape, inp.mesh_shape, pls)


def _partial_input(input: DistSpec, x: DistSpec, mm, beta: float) -> tuple[DistSpec, DistSpec]:
    """(x as required, product layout) after keeping ``input``'s partial on the mesh dims the
    product leaves replicated: P(sum|avg) (P(sum): x made partial locally, so the product is
    counted once), and P(max|min) when ``beta >= 0`` (the sum is then non-decreasing in input)."""
    xs, out = list(mm.inputs[0].placements), list(mm.outputs[0].placements)
    ops = ("sum", "avg", "max", "min") if beta >= 0 else ("sum", "avg")
    for m, p in enumerate(input.placements):
        free = all(isinstance(s.placements[m], Replicate) for s in mm.inputs) and isinstance(out[m], Replicate)
        if free and isinstance(p, Partial) and p.op in ops:
            out[m] = p
            if p.op == "sum":
                xs[m] = p
    return (DistSpec(x.shape, x.mesh_shape, xs), DistSpec(mm.outputs[0].shape, x.mesh_shape, out))


def _add_mm(op: str, notation: str, input: DistSpec, x: DistSpec, y: DistSpec, beta: float):
    mm = infer_einsum(notation + " | partial(sum avg): 0, 1", [x, y], op)
    x_req, out = _partial_input(input, x, mm, beta)
    return make_result(op, [input, x, y], [_follow_output(input, out), x_req, mm.inputs[1]], [out],
                       f"input follows out; {notation} | partial(sum avg): 0, 1")


@register_spmd_rule("addmm", case=gap_case(
    "addmm", lambda a: (lambda i, x, y: a.get("beta", 1.0) * i + a.get("alpha", 1.0) * (x @ y)),
    [([(4, 6), (4, 8), (8, 6)], {"beta": 0.5, "alpha": 2.0}), ([(6,), (5, 4), (4, 6)], {})]))
def addmm(input: DistSpec, x: DistSpec, y: DistSpec, beta: float = 1.0, alpha: float = 1.0):
    """m n, m k, k n -> m n | reduce(sum): k | partial(sum avg): 0 1, 0 2

    (input takes the output's layout, P(sum) included; beta >= 0: a P(max|min) input passes too)"""
    return _add_mm("addmm", "m k, k n -> m n", input, x, y, beta)


@register_spmd_rule("baddbmm", case=gap_case(
    "baddbmm", lambda a: (lambda i, x, y: a.get("beta", 1.0) * i + a.get("alpha", 1.0) * np.matmul(x, y)),
    [([(2, 3, 4), (2, 3, 6), (2, 6, 4)], {"alpha": 0.5})]))
def baddbmm(input: DistSpec, x: DistSpec, y: DistSpec, beta: float = 1.0, alpha: float = 1.0):
    """b m n, b m k, b k n -> b m n | reduce(sum): k | partial(sum avg): 0 1, 0 2

    (input takes the output's layout; beta >= 0: a P(max|min) input passes too)"""
    return _add_mm("baddbmm", "b m k, b k n -> b m n", input, x, y, beta)


@register_spmd_rule("kron", case=gap_case("kron", lambda a: np.kron, [([(4, 3), (2, 2)], {}), ([(5, 2), (2, 3)], {})]))
def kron(x: DistSpec, y: DistSpec):
    """S(d), R -> S(d) when x.shape[d] splits evenly; P(op), R -> P(op); R, P(op) -> P(op) for op in sum, avg"""
    nd = max(x.ndim, y.ndim)
    xs = (1,) * (nd - x.ndim) + tuple(x.shape)
    ys = (1,) * (nd - y.ndim) + tuple(y.shape)
    shape = tuple(a * b for a, b in zip(xs, ys))
    rows = [(f"P({o})", f"P({o}), R") for o in ("sum", "avg")] + [(f"P({o})", f"R, P({o})") for o in ("sum", "avg")]
    if x.ndim == y.ndim:
        rows = [(f"S({d})", f"S({d}), R") for d in range(x.ndim)
                if x.shape[d] > 1 and x.shape[d] % world(x) == 0] + rows
    return Rows(tuple(rows), (shape,))
