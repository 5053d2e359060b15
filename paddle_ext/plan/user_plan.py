"""Plan a user's own model end to end: load the factory, trace it, search, describe, emit (an adapter).

>>> # trace, result = plan_user_model("examples.plan_my_model:build", Profile.load("cpu4.json"), 4)
>>> # print(describe(trace, result)); emit_plan(trace, result.plans[0].candidate, "out/")

The search is :func:`paddle_ext.plan.search` on the traced description (:mod:`.trace_layer`),
without sequence-parallel plans (:func:`.emit.expressible` says why). ``emit_plan`` writes
``plan.json`` and ``apply_plan.py`` (:mod:`.emit`).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, List, Optional

from .emit import expressible, parallelize_config, snippet
from .memory import format_bytes
from .search import SearchResult, search
from .trace_layer import UserTrace, trace_user_model
from .user_model import check_returned, load_factory


def plan_user_model(spec: str, profile, nproc: int, memory=None, *, batch: Optional[int] = None, schedules=None,
                    nodes: Optional[int] = None, factory: Optional[Callable] = None):
    """``(UserTrace, SearchResult)`` for the model of ``spec`` (``pkg.module:factory``; ``factory``
    given: call it instead of importing ``spec``) on ``nproc`` ranks, the batch the factory's sample
    batch has unless ``batch`` is given."""
    um = check_returned(spec, factory()) if factory is not None else load_factory(spec)
    trace = trace_user_model(um)
    result = search_user_model(trace, profile, nproc, memory, batch=batch or um.batch_size, schedules=schedules,
                               nodes=nodes)
    return trace, result


def search_user_model(trace: UserTrace, profile, nproc: int, memory=None, **kwargs) -> SearchResult:
    """:func:`~.search.search` on the traced model, sequence-parallel plans left out."""
    result = search(trace.model, profile, nproc, memory, **kwargs)
    kept = [p for p in result.plans if not p.candidate.sp]
    result.plans = kept
    return result


def describe(trace: UserTrace, result: SearchResult, top: int = 5) -> str:
    """What the trace found and the ``top`` plans, as text."""
    m = trace.model
    lines = [f"{m.name}: {len(trace.ops)} ops traced, {trace.batch_ops} carry the batch, {trace.seq_ops} the "
             f"sequence ({trace.seq}); {m.param_elems():,} parameters"]
    if trace.blocks_prefix is not None:
        lines.append(f"repeated blocks: {trace.blocks_prefix}.0 .. {trace.block_names[-1]} ({len(trace.block_names)}; "
                     f"pipeline stages are cut between them)")
    else:
        lines.append("no repeated blocks: no pipeline plans")
    pairs = ", ".join(f"{c} (column)" for c in trace.column) + (", " if trace.column else "") + \
        ", ".join(f"{r} (row)" for r in trace.row)
    lines.append(f"tensor parallel in each block: {pairs or 'none (no Linear feeds another Linear in every block)'}")
    lines.append(f"replicated ({len(trace.replicated)} layers): " +
                 "; ".join(f"{n}: {w}" for n, w in trace.replicated[:6]) +
                 (f"; ... {len(trace.replicated) - 6} more" if len(trace.replicated) > 6 else ""))
    lines.append(f"{result.candidates} candidate plans in {result.search_s:.2f} s, {len(result.plans)} ranked "
                 f"(sequence-parallel plans are not planned for your model)")
    lines.append(f"{'#':>3}  {'plan':<28} {'pred step':>10} {'pred peak':>10}  dist.parallelize")
    for i, p in enumerate(result.plans[:top], 1):
        how = expressible(p.candidate)
        lines.append(f"{i:>3}  {p.candidate.name:<28} {p.step_s * 1e3:>7.2f} ms {format_bytes(p.peak_bytes):>10}  "
                     + ("yes" if not how else "no: paddle-ext's pipeline runtime"))
    return "\n".join(lines)


def emit_plan(trace: UserTrace, plan, out_dir) -> List[Path]:
    """Write ``plan.json`` and ``apply_plan.py`` for ``plan`` into ``out_dir``; the two paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = parallelize_config(trace, plan, trace.model.name, len(trace.model.layers))
    (out / "plan.json").write_text(json.dumps(cfg, indent=1))
    (out / "apply_plan.py").write_text(snippet(cfg))
    return [out / "plan.json", out / "apply_plan.py"]


__all__ = ["describe", "emit_plan", "plan_user_model", "search_user_model"]
