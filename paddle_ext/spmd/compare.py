"""Differential comparison of paddle-ext rules with Paddle's C++ rules on random instances.

:func:`random_cases` draws seeded instances (shapes and attributes from the op's
:class:`~paddle_ext.spmd.opcases.OpCase`, a 1-D or 2-D mesh, random placements per input,
``P(sum)`` included because Paddle's Python bindings can express it), and :func:`compare`
runs both rules and reports where the required inputs or the outputs differ.

A disagreement is a value with the case in notation (``reshape x[5,4]:[S(0)] attrs -> ...``)
so tests and docs can quote it.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

import numpy as np

from ..placements import DistSpec, Partial, Shard, format_placements
from .opcases import CASES
from .lookup import get_spmd_rule
from .registry import paddle_rules
from .validator import check_claim, dense_case


@dataclass(frozen=True)
class Instance:
    op: str
    specs: tuple            # one entry per tensor parameter (a tuple of DistSpec for a list)
    attrs: tuple            # sorted (name, value) pairs
    outs: tuple = ()        # backward instances: the requested output specs

    def flat(self) -> list[DistSpec]:
        out = []
        for s in self.specs:
            out.extend(s if isinstance(s, tuple) else [s])
        return out

    def __str__(self) -> str:
        ins = " ".join(f"{list(s.shape)}{format_placements(s.placements)}" for s in self.flat())
        mesh = "x".join(map(str, self.flat()[0].mesh_shape))
        attrs = ", ".join(f"{k}={v}" for k, v in self.attrs)
        outs = " ".join(f"{list(s.shape)}{format_placements(s.placements)}" for s in self.outs)
        return (f"{self.op}{' backward' if self.outs else ''}(mesh {mesh}) {ins}" + (f" -> {outs}" if outs else "")
                + (f" {{{attrs}}}" if attrs else ""))

    def shapes(self) -> list:
        """Input shapes per tensor parameter (a list of shapes for a tensor list)."""
        return [[tuple(x.shape) for x in s] if isinstance(s, tuple) else tuple(s.shape) for s in self.specs]


@dataclass(frozen=True)
class Disagreement:
    instance: Instance
    ours: str
    paddle: str
    where: str      # "inputs" | "outputs" | "error"
    answer: tuple = field(default=(), compare=False)   # ours: (required inputs, outputs), for ground truth
    paddle_answer: tuple = field(default=(), compare=False)   # Paddle's (required inputs, outputs), if it answered

    def __str__(self) -> str:
        return f"{self.instance}: ours {self.ours} vs Paddle {self.paddle} ({self.where})"


def _placements(rng: random.Random, shape, mesh, allow_partial: bool, used_dims=None):
    pls = []
    for m in range(len(mesh)):
        r = rng.random()
        if r < 0.3 or not shape:
            pls.append("R")
        elif r < 0.85 or not allow_partial:
            pls.append(f"S({rng.randrange(len(shape))})")
        else:
            pls.append("P(sum)")
    return DistSpec(shape, mesh, pls)


def random_cases(op: str, n: int, seed: int = 0, partial: bool = True) -> list[Instance]:
    """``n`` seeded random instances of ``op`` on meshes 2, 4 and 2x2."""
    case = CASES[op]
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        shapes, attrs = case.gen(nrng)
        mesh = rng.choice([(2,), (4,), (2, 2), (2, 2)])
        specs = []
        for k, sh in enumerate(shapes):
            allow = partial and not (op == "embedding" and k == 0)
            if isinstance(sh, list):
                specs.append(tuple(_placements(rng, tuple(s), mesh, allow) for s in sh))
            else:
                specs.append(_placements(rng, tuple(sh), mesh, allow))
        out.append(Instance(op, tuple(specs), tuple(sorted((k, _freeze(v)) for k, v in attrs.items()))))
    return out


def _freeze(v):
    return tuple(v) if isinstance(v, list) else v


def _thaw(attrs) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in attrs}


def _key(spec: DistSpec):
    mapping = tuple(tuple(sorted(m)) for m in spec.dims_mapping())
    partial = tuple((m, p.op) for m, p in enumerate(spec.placements) if isinstance(p, Partial))
    return mapping, partial


def _text(specs) -> str:
    return ",".join(format_placements(s.placements) for s in specs)


def _structured(inst: Instance) -> list:
    return [list(s) if isinstance(s, tuple) else s for s in inst.specs]


def _paddle_args(inst: Instance) -> list:
    """Paddle's positional arguments: tensor inputs, (backward) the outputs, then attributes."""
    specs = _structured(inst)
    args = CASES[inst.op].paddle_args(specs, _thaw(inst.attrs))
    if not inst.outs:
        return args
    n = sum(isinstance(a, (DistSpec, list)) for a in args)  # expand passes expand_as a target tensor
    outs = [list(inst.outs)] if inst.op in LIST_OUTPUT_OPS else list(inst.outs)
    return args[:n] + outs + args[n:]


def run_ours(inst: Instance):
    """Ours: the pure API forward; backward through the Paddle-convention bridge (DistTensorSpec
    in, TensorDistAttr out), as a caller of ``infer_backward`` sees it."""
    rule = get_spmd_rule(inst.op, "ext")
    if not inst.outs:
        return rule.infer(_structured(inst), _thaw(inst.attrs))
    return paddle_rules().backward_round_trip(rule, _structured(inst), inst.outs, _thaw(inst.attrs),
                                              outs_as_list=inst.op in LIST_OUTPUT_OPS)


def run_paddle(inst: Instance):
    res = paddle_rules().rule(CASES[inst.op].paddle).infer_positional(_paddle_args(inst), backward=bool(inst.outs))
    n_tensor = len(inst.flat())
    return res.inputs[:n_tensor], res.outputs


def compare(inst: Instance) -> Disagreement | None:
    """None when both rules agree on required inputs and outputs (shard order ignored).

    A backward instance (``inst.outs``) compares ``infer_backward``: the inputs each side asks
    for and the outputs each side says the op will produce from them."""
    try:
        ours = run_ours(inst)
        o_in, o_out = ours.inputs, ours.outputs
        ours_err = None
    except Exception as exc:  # a rule error is a result to compare, not a crash
        ours_err = f"error {type(exc).__name__}"
    try:
        p_in, p_out = run_paddle(inst)
        paddle_err = None
    except Exception as exc:
        paddle_err = f"error: {str(exc).splitlines()[0][:120]}"
    if ours_err or paddle_err:
        if ours_err and paddle_err:
            return None
        return Disagreement(inst, ours_err or f"{_text(o_in)} = {_text(o_out)}",
                            paddle_err or f"{_text(p_in)} = {_text(p_out)}", "error",
                            () if ours_err else (tuple(o_in), tuple(o_out)),
                            () if paddle_err else (tuple(p_in), tuple(p_out)))
    # Paddle drops the reduce type of partial inputs it keeps; compare mapping + partial dims
    where = None
    if [_key(s) for s in o_in] != [_key(s) for s in p_in]:
        where = "inputs"
    elif [_key(s) for s in o_out] != [_key(s) for s in p_out]:
        where = "outputs"
    if where is None:
        return None
    return Disagreement(inst, f"{_text(o_in)} = {_text(o_out)}", f"{_text(p_in)} = {_text(p_out)}", where,
                        (tuple(o_in), tuple(o_out)), (tuple(p_in), tuple(p_out)))


#: ops whose outputs Paddle's infer_backward takes as one list argument
LIST_OUTPUT_OPS = frozenset({"split"})
#: ops whose Paddle ``infer_backward`` is a *gradient* rule (input gradients from output
#: gradients: bmm's matmul-grad, mean_all's and expand_as's x_grad), not reverse inference:
#: its answer has the inputs' ranks, so the backward comparison skips them
PADDLE_BACKWARD_IS_GRAD = frozenset({"bmm", "expand", "mean_all"})


def random_backward_cases(op: str, n: int, seed: int = 0) -> list[Instance]:
    """``n`` seeded backward instances: inputs as :func:`random_cases` (no partial), and random
    requested output specs (shapes from the dense op, placements R/S(d) per mesh dim)."""
    rng = random.Random(seed + 7919)
    out = []
    for inst in random_cases(op, n, seed, partial=False):
        _, dense_out = dense_case(op, inst.shapes(), _thaw(inst.attrs), seed)
        mesh = inst.flat()[0].mesh_shape
        outs = tuple(_placements(rng, tuple(d.shape), mesh, False) for d in dense_out)
        out.append(Instance(op, inst.specs, inst.attrs, outs))
    return out


def compare_op(op: str, n: int, seed: int = 0, backward: bool = False) -> tuple[int, list[Disagreement]]:
    """(cases run, disagreements) for ``n`` random instances of ``op`` (``infer_backward``'s
    instances when ``backward``)."""
    cases = random_backward_cases(op, n, seed) if backward else random_cases(op, n, seed)
    out = [d for d in map(compare, cases) if d is not None]
    return len(cases), out


def ground_truth(d: Disagreement) -> str:
    """'' when paddle-ext's side of ``d`` is right by the dense computation on simulated ranks
    (its required inputs, the op run per rank, its claimed outputs rebuilt), else why not."""
    if not d.answer:
        return f"paddle-ext raised ({d.ours}) where Paddle answered {d.paddle}"
    required, outs = d.answer
    return check_claim(d.instance.op, d.instance.shapes(), _thaw(d.instance.attrs), required, outs)


__all__ = ["CATEGORIES", "Disagreement", "Instance", "PADDLE_BACKWARD_IS_GRAD", "compare", "compare_op", "ground_truth", "random_backward_cases",
           "random_cases", "run_ours", "run_paddle"]



# -- why a disagreement happens ---------------------------------------------------------------------
# Each category is documented in docs/spmd_rules.md ("Differences from Paddle's C++ rules") with a
# validator run showing which side gives the dense result.
CATEGORIES = {
    "paddle-error": "Paddle raises (two mesh dims on one axis, or one mesh dim on two axes with "
                    "merge_conflicts off); paddle-ext resolves the conflict and lists the reshard",
    "uneven": "an input dim is sharded unevenly; Paddle drops that sharding (and in some rules still "
              "claims a replicated output for a sharded input); paddle-ext keeps uneven shards where "
              "the op is blockwise",
    "coshard": "an input dim is co-sharded (several mesh dims); Paddle keeps only one of them or "
               "co-shards differently; paddle-ext keeps/forms the co-shard",
    "partial": "a P(sum) input: paddle-ext keeps it wherever the op's algebra allows (the rule's partial "
               "clause: linear, copying or monotone ops); Paddle keeps it only through transpose and in "
               "one operand of multiply, and replicates it elsewhere",
    "size-one": "a size-1 dim is sharded: paddle-ext treats broadcast dims as unsharded and keeps "
                "non-broadcast ones; Paddle's matmul drops them on the inputs but not the output",
    "reduce-type": "max/min over a sharded dim: Paddle claims P(sum), paddle-ext P(max)/P(min)",
    "merge": "two inputs shard different dims on one mesh dim: the tie-break differs "
             "(paddle-ext: output factors, then larger size, then notation order; elementwise "
             "follows the most-sharded input)",
    "align": "concat/stack: Paddle's cost-based alignment shards another non-axis dim, or declines "
             "to co-shard; paddle-ext picks the cheapest reshard per mesh dim",
    "expand-as": "Paddle has no `expand` rule; the comparison uses `expand_as`, whose output follows "
                 "the target tensor y (passed replicated), so Paddle replicates x",
    "outputs-differ": "infer_backward: the requested outputs of a multi-output op disagree on a mesh dim "
                      "(split pieces, layer_norm's out vs mean/var); Paddle merges them into one "
                      "sharding, paddle-ext answers what the op can produce (split: the layout most "
                      "pieces ask for; layer_norm: the batch-dim claim most outputs make)",
}


def _co(spec: DistSpec) -> bool:
    return any(len(m) > 1 for m in spec.dims_mapping())


def classify(d: Disagreement) -> str | None:
    """The documented category that explains ``d`` (first match), or None."""
    specs = d.instance.flat() + list(d.instance.outs)
    mesh = specs[0].mesh_shape
    if d.where == "error" and d.paddle.startswith("error"):
        return "paddle-error"
    if d.instance.op in ("max", "min") and "P(sum)" in d.paddle and ("P(max)" in d.ours or "P(min)" in d.ours):
        return "reduce-type"
    for s in specs:
        for dim, mdims in enumerate(s.dims_mapping()):
            n = 1
            for m in mdims:
                n *= mesh[m]
            if mdims and s.shape[dim] == 1:
                return "size-one"
            if mdims and s.shape[dim] % n:
                return "uneven"
    if any(_co(s) for s in specs) or _ours_coshard(d.ours) or _ours_coshard(d.paddle):
        return "coshard"
    if any(isinstance(p, Partial) for s in specs for p in s.placements):
        return "partial"
    if d.instance.op in ("concat", "stack"):
        return "align"
    if d.instance.op == "expand":
        return "expand-as"
    outs = d.instance.outs
    if len(outs) >= 2 and any(len({p.dim if isinstance(p, Shard) else None
                                   for o in outs for p in [o.placements[m]]}) > 1 for m in range(len(mesh))):
        return "outputs-differ"
    for m in range(len(mesh)):
        pos = {s.ndim - p.dim for s in specs for p in [s.placements[m]] if isinstance(p, Shard)}
        users = [s for s in specs if isinstance(s.placements[m], Shard)]
        if len(users) >= 2 and len(pos) >= 2 or (len(users) >= 2 and d.instance.op in ("matmul", "bmm")):
            return "merge"
    return None


def _ours_coshard(text: str) -> bool:
    for group in re.findall(r"\[([^\]]*)\]", text):
        shards = re.findall(r"S\((\d+)\)", group)
        if len(shards) != len(set(shards)):
            return True
    return False
