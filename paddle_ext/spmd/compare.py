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
from dataclasses import dataclass

from ..placements import DistSpec, Partial, Shard, format_placements
from .opcases import CASES
from .paddle_bridge import PaddleRule
from .registry import get_spmd_rule


@dataclass(frozen=True)
class Instance:
    op: str
    specs: tuple            # one entry per tensor parameter (a tuple of DistSpec for a list)
    attrs: tuple            # sorted (name, value) pairs

    def flat(self) -> list[DistSpec]:
        out = []
        for s in self.specs:
            out.extend(s if isinstance(s, tuple) else [s])
        return out

    def __str__(self) -> str:
        ins = " ".join(f"{list(s.shape)}{format_placements(s.placements)}" for s in self.flat())
        mesh = "x".join(map(str, self.flat()[0].mesh_shape))
        attrs = ", ".join(f"{k}={v}" for k, v in self.attrs)
        return f"{self.op}(mesh {mesh}) {ins}" + (f" {{{attrs}}}" if attrs else "")


@dataclass(frozen=True)
class Disagreement:
    instance: Instance
    ours: str
    paddle: str
    where: str      # "inputs" | "outputs" | "error"

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
    import numpy as np

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


def run_ours(inst: Instance):
    rule = get_spmd_rule(inst.op, "ext")
    specs = [list(s) if isinstance(s, tuple) else s for s in inst.specs]
    return rule.infer(specs, _thaw(inst.attrs))


def run_paddle(inst: Instance):
    case = CASES[inst.op]
    specs = [list(s) if isinstance(s, tuple) else s for s in inst.specs]
    args = case.paddle_args(specs, _thaw(inst.attrs))
    res = PaddleRule(case.paddle).infer_positional(args)
    n_tensor = len(inst.flat())
    return res.inputs[:n_tensor], res.outputs


def compare(inst: Instance) -> Disagreement | None:
    """None when both rules agree on required inputs and outputs (shard order ignored)."""
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
                            paddle_err or f"{_text(p_in)} = {_text(p_out)}", "error")
    # Paddle drops the reduce type of partial inputs it keeps; compare mapping + partial dims
    if [_key(s) for s in o_in] != [_key(s) for s in p_in]:
        return Disagreement(inst, f"{_text(o_in)} = {_text(o_out)}", f"{_text(p_in)} = {_text(p_out)}", "inputs")
    if [_key(s) for s in o_out] != [_key(s) for s in p_out]:
        return Disagreement(inst, f"{_text(o_in)} = {_text(o_out)}", f"{_text(p_in)} = {_text(p_out)}", "outputs")
    return None


def compare_op(op: str, n: int, seed: int = 0) -> tuple[int, list[Disagreement]]:
    """(cases run, disagreements) for ``n`` random instances of ``op``."""
    out = []
    cases = random_cases(op, n, seed)
    for inst in cases:
        d = compare(inst)
        if d is not None:
            out.append(d)
    return len(cases), out


__all__ = ["Disagreement", "Instance", "compare", "compare_op", "random_cases", "run_ours", "run_paddle"]



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
    "partial": "a P(sum) input: Paddle replicates it for most ops; paddle-ext keeps it through "
               "linear ops (reshape-like, concat/split/stack/slice) and replicates it elsewhere",
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
}


def _co(spec: DistSpec) -> bool:
    return any(len(m) > 1 for m in spec.dims_mapping())


def classify(d: Disagreement) -> str | None:
    """The documented category that explains ``d`` (first match), or None."""
    specs = d.instance.flat()
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
    for m in range(len(mesh)):
        pos = {s.ndim - p.dim for s in specs for p in [s.placements[m]] if isinstance(p, Shard)}
        users = [s for s in specs if isinstance(s.placements[m], Shard)]
        if len(users) >= 2 and len(pos) >= 2 or (len(users) >= 2 and d.instance.op in ("matmul", "bmm")):
            return "merge"
    return None


def _ours_coshard(text: str) -> bool:
    import re

    for group in re.findall(r"\[([^\]]*)\]", text):
        shards = re.findall(r"S\((\d+)\)", group)
        if len(shards) != len(set(shards)):
            return True
    return False
