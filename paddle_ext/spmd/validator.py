"""Ground-truth validation of SPMD rules on simulated ranks (one process, numpy).

For an op known to :mod:`~paddle_ext.spmd.opcases`, every example instance and every
combination of 1-D placements per input (``R``, ``S(d)``, ``P(sum|avg|max|min)``; partial
splits are asymmetric, sizes include uneven ones) is checked:

* **false positive** -- the rule's claim is wrong: the inputs laid out as the rule *requires*,
  the op run locally per rank, and the outputs rebuilt from the placements the rule *claims*
  do not give the dense result (or cannot be rebuilt at all);
* **false negative** -- the rule asks for a reshard although the inputs as given already work:
  some output placement rebuilds the dense result from the local outputs of the given layout
  (found by trying ``R``, ``S(d)`` and every ``P(op)`` per output), on ``DRAWS`` independent
  draws of the data (one draw lets a small tensor pass by coincidence: ``square`` of three ``P(max)``
  values that happen to be negative looks like ``P(min)``).

Paddle's C++ rules are checked the same way (``source="paddle"``); inputs Paddle's Python
bindings cannot express (``P(avg|max|min)``) are skipped for them.

>>> rep = check_op("mean_all", source="ext")
>>> rep.cases > 0, len(rep.false_positives)
(True, 0)
"""
from __future__ import annotations

import difflib
import itertools
from dataclasses import dataclass, field

import numpy as np

from ..errors import ShardingRuleError
from ..placements import REDUCE_OPS, DistSpec, Partial, Replicate, Shard, format_placements
from ..simulated_ranks import AssembleError, assemble, shard_dense
from .opcases import CASES, OpCase
from .lookup import get_spmd_rule, load_builtin_rules
from .registry import paddle_rules
from .result import with_shapes

MESH = (2,)
#: independent data draws a false negative must hold on (see the module docstring)
DRAWS = 5


@dataclass(frozen=True)
class Finding:
    op: str
    source: str
    case: str        # inputs and attributes in notation
    claim: str       # what the rule said
    detail: str      # why it is wrong / what would have worked

    def __str__(self) -> str:
        return f"{self.case}: {self.claim} -- {self.detail}"

    def as_dict(self) -> dict:
        return {"case": self.case, "claim": self.claim, "detail": self.detail}


@dataclass
class Report:
    op: str
    source: str
    rule: str = ""
    cases: int = 0
    skipped: int = 0
    false_positives: list = field(default_factory=list)
    false_negatives: list = field(default_factory=list)
    errors: list = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"op": self.op, "source": self.source, "rule": self.rule, "cases": self.cases,
                "skipped": self.skipped,
                "false_positives": [f.as_dict() for f in self.false_positives],
                "false_negatives": [f.as_dict() for f in self.false_negatives],
                "errors": [f.as_dict() for f in self.errors]}


class _Ctx:
    """What a shard-aware local op (vocab-parallel embedding) may ask: its slice offsets."""

    def __init__(self, specs, coord, outs=None):
        self.specs, self.coord, self.outs = specs, coord, outs

    def offset(self, tensor: int, dim: int) -> int:
        return self.specs[tensor].local_slices(self.coord)[dim][0]

    def out_shape(self, k: int) -> tuple:
        """Local shape of output ``k`` as claimed (what a reshape kernel is told to produce)."""
        return self.outs[k].local_shape(self.coord)


def _flat_shapes(shapes) -> list[tuple]:
    out = []
    for s in shapes:
        out.extend([tuple(x) for x in s] if isinstance(s, list) else [tuple(s)])
    return out


def _restructure(shapes, flat):
    out, k = [], 0
    for s in shapes:
        if isinstance(s, list):
            out.append(list(flat[k:k + len(s)]))
            k += len(s)
        else:
            out.append(flat[k])
            k += 1
    return out


def _case_text(op, specs, attrs) -> str:
    ins = " ".join(f"{list(s.shape)}:{format_placements(s.placements)}" for s in specs)
    at = ", ".join(f"{k}={v}" for k, v in sorted(attrs.items()))
    return f"{op} {ins}" + (f" {{{at}}}" if at else "")


def _candidates(shape, is_int: bool, partial_ok) -> list:
    out = [Replicate()] + [Shard(d) for d, n in enumerate(shape) if n > 1]
    if not is_int:
        out += [Partial(op) for op in REDUCE_OPS if op in partial_ok]
    return out


def _local_run(case: OpCase, attrs, arrays_per_coord, specs, out_specs=None):
    fn = case.dense(attrs)
    outs = {}
    for c, arrays in arrays_per_coord.items():
        res = fn(_Ctx(specs, c, out_specs), *arrays) if case.needs_ctx else fn(*arrays)
        outs[c] = res if isinstance(res, tuple) else (res,)
    return outs


def _matches(local, spec: DistSpec, dense) -> tuple[bool, str]:
    try:
        got = assemble(local, spec)
    except AssembleError as exc:
        return False, str(exc).split(";")[0]
    except ValueError as exc:
        return False, f"cannot rebuild: {exc}"
    got, dense = np.asarray(got), np.asarray(dense)
    if got.shape != dense.shape:
        return False, f"rebuilt shape {list(got.shape)} != dense {list(dense.shape)}"
    if not np.allclose(got.astype(np.float64), dense.astype(np.float64), rtol=1e-6, atol=1e-6, equal_nan=True):
        diff = np.max(np.abs(got.astype(np.float64) - dense.astype(np.float64)))
        return False, f"values differ from dense (max abs diff {diff:.4g}; e.g. rebuilt {got.flat[0]:.6g} vs dense {dense.flat[0]:.6g})"
    return True, ""


#: offset of the partial splits' seeds from the dense inputs' seed: with the same seed the split's
#: noise equals the dense value itself (``x + x, x - x``: a proportional split), which lets positively
#: homogeneous ops (abs, relu) pass as ``P(avg)`` and hides wrong partial claims
PARTIAL_SEED_OFFSET = 7919


def _shard_all(dense_inputs, specs, seed):
    per = [shard_dense(x, s, seed=seed + PARTIAL_SEED_OFFSET + i)
           for i, (x, s) in enumerate(zip(dense_inputs, specs))]
    return {c: [p[c] for p in per] for c in specs[0].coords()}


def _claim(op, source, structured, attrs, case: OpCase, out_shapes):
    """(required input specs, output specs, rule text) from our rule or Paddle's."""
    if source == "ext":
        res = get_spmd_rule(op, "ext").infer(structured, attrs)
        return list(res.inputs), list(res.outputs), res.rule
    res = paddle_rules().rule(case.paddle).infer_positional(case.paddle_args(structured, attrs))
    res = with_shapes(res, out_shapes)
    return list(res.inputs), list(res.outputs), f"Paddle C++ rule {case.paddle}"


def check_instance(op: str, shapes, attrs: dict, placements, source: str = "ext", mesh=MESH,
                   seed: int = 0, report: Report | None = None) -> Report:
    """Check one instance (``placements``: one placement list per flat input tensor)."""
    case = CASES[op]
    rep = report if report is not None else Report(op, source)
    flat_shapes = _flat_shapes(shapes)
    dense_inputs, dense_out = dense_case(op, shapes, attrs, seed)
    out_shapes = [np.shape(o) for o in dense_out]
    given = [DistSpec(s, mesh, p) for s, p in zip(flat_shapes, placements)]
    text = _case_text(op, given, attrs)
    rep.cases += 1
    try:
        required, outs, rule_text = _claim(op, source, _restructure(shapes, given), attrs, case, out_shapes)
    except Exception as exc:  # a rule that raises on valid input is a finding, not a crash
        rep.errors.append(Finding(op, source, text, "rule raised", f"{type(exc).__name__}: {str(exc)[:200]}"))
        return rep
    rep.rule = rep.rule or rule_text
    claim = (",".join(format_placements(s.placements) for s in required) + " = "
             + ",".join(format_placements(s.placements) for s in outs))
    # false positive: run on the required layout, rebuild the claimed outputs
    bad = claim_problems(case, attrs, dense_inputs, dense_out, required, outs, mesh, seed)
    if bad:
        rep.false_positives.append(Finding(op, source, text, claim, bad))
    # false negative: a reshard was asked although the given layout already works
    if any(g.placements != r.placements for g, r in zip(given, required)):
        works = _valid_outputs(case, attrs, dense_inputs, given, dense_out, mesh, seed)
        if works is not None and all(_holds_again(op, shapes, attrs, given, works, mesh, seed + k)
                                     for k in range(1, DRAWS)):
            rep.false_negatives.append(Finding(
                op, source, text, claim, "no reshard needed: the given inputs already give "
                + ",".join(format_placements(w) for w in works)))
    return rep


def claim_problems(case: OpCase, attrs, dense_inputs, dense_out, required, outs, mesh, seed: int = 0) -> str:
    """Why a claim is wrong ('' when right): the inputs laid out as ``required``, the op run
    locally per rank, the outputs rebuilt from the claimed placements ``outs`` vs the dense result."""
    try:
        outs = [DistSpec(np.shape(d), mesh, spec.placements) for spec, d in zip(outs, dense_out)]
        local = _local_run(case, attrs, _shard_all(dense_inputs, required, seed), required, outs)
        bad = []
        if len(outs) != len(dense_out):
            bad.append(f"claims {len(outs)} outputs, the op has {len(dense_out)}")
        for k, (spec, d) in enumerate(zip(outs, dense_out)):
            ok, why = _matches({c: o[k] for c, o in local.items()}, spec, d)
            if not ok:
                bad.append(f"out{k} {format_placements(spec.placements)}: {why}")
        return "; ".join(bad)
    except Exception as exc:
        return f"local op failed: {type(exc).__name__}: {exc}"


def dense_case(op: str, shapes, attrs: dict, seed: int = 0):
    """(dense inputs, dense outputs as a tuple) of one instance of ``op``."""
    case = CASES[op]
    flat_shapes = _flat_shapes(shapes)
    rng = np.random.default_rng(seed)
    dense_inputs = case.inputs(rng, flat_shapes, attrs) if case.inputs else \
        [np.asarray(rng.standard_normal(s)) for s in flat_shapes]
    dense_out = case.dense(attrs)(None, *dense_inputs) if case.needs_ctx else case.dense(attrs)(*dense_inputs)
    return dense_inputs, dense_out if isinstance(dense_out, tuple) else (dense_out,)


def check_claim(op: str, shapes, attrs: dict, required, outs, seed: int = 0) -> str:
    """Ground truth for one answer (whoever gave it): '' when the op run on the ``required``
    input specs gives the claimed output placements ``outs``, else why not."""
    dense_inputs, dense_out = dense_case(op, shapes, attrs, seed)
    mesh = required[0].mesh_shape
    return claim_problems(CASES[op], attrs, dense_inputs, dense_out, list(required), list(outs), mesh, seed)


def _holds_again(op, shapes, attrs, given, works, mesh, seed) -> bool:
    """True when the output placements ``works`` also rebuild the dense result of another draw."""
    dense_inputs, dense_out = dense_case(op, shapes, attrs, seed)
    outs = [DistSpec(np.shape(d), mesh, w) for d, w in zip(dense_out, works)]
    return not claim_problems(CASES[op], attrs, dense_inputs, dense_out, given, outs, mesh, seed)


def _valid_outputs(case, attrs, dense_inputs, given, dense_out, mesh, seed):
    shards = _shard_all(dense_inputs, given, seed)
    local = None
    if not case.needs_ctx or case.op == "embedding":
        try:
            local = _local_run(case, attrs, shards, given)
        except Exception:  # the local op cannot even run on the given layout
            return None
    found = []
    for k, d in enumerate(dense_out):
        hit = None
        for p in _candidates(np.shape(d), False, REDUCE_OPS):
            spec = DistSpec(np.shape(d), mesh, [p] * len(mesh))
            run = local
            if run is None:  # shape-taking ops: the kernel is told this candidate's local shape
                try:
                    run = _local_run(case, attrs, shards, given, [spec] * len(dense_out))
                except Exception:
                    continue
            if _matches({c: o[k] for c, o in run.items()}, spec, d)[0]:
                hit = spec.placements
                break
        if hit is None:
            return None
        found.append(hit)
    return found


def check_op(op: str, source: str = "ext", mesh=MESH, seed: int = 0, max_cases: int | None = None) -> Report:
    """Check ``op`` over its examples and every 1-D placement combination of its inputs."""
    load_builtin_rules()   # the rule families register their cases with their rules
    if op not in CASES:
        close = difflib.get_close_matches(op, list(CASES))
        raise ShardingRuleError(f"the validator knows no op {op!r}" + (f"; close: {', '.join(close)}" if close else "")
                                + f"; known: {', '.join(sorted(CASES))}")
    case = CASES[op]
    if source == "paddle" and not case.paddle:
        raise ShardingRuleError(f"{op}: Paddle has no Python-callable C++ rule for this op")
    rep = Report(op, source)
    for shapes, attrs in case.examples:
        flat = _flat_shapes(shapes)
        ints = [op == "embedding" and i == 0 for i in range(len(flat))]
        partial_ok = ("sum",) if source == "paddle" else case.partial_ok
        choices = [_candidates(s, is_int, partial_ok) for s, is_int in zip(flat, ints)]
        for combo in itertools.product(*choices):
            if max_cases is not None and rep.cases >= max_cases:
                return rep
            check_instance(op, shapes, dict(attrs), [[p] * len(mesh) for p in combo], source, mesh, seed, rep)
    return rep


def known_ops(source: str = "ext") -> list[str]:
    """The ops with a case (``source="paddle"``: those whose Paddle rule the validator can call)."""
    load_builtin_rules()
    return sorted(o for o, c in CASES.items() if source == "ext" or c.paddle)


__all__ = ["Finding", "Report", "check_claim", "check_instance", "claim_problems", "dense_case", "check_op", "known_ops"]
