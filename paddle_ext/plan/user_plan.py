"""Plan a user's own model end to end: load the factory, trace it, search, describe, emit (an adapter).

Used as (a profile from ``paddle-ext profile``)::

    trace, result = plan_user_model("examples.plan_my_model:build", Profile.load("cpu4.json"), 4)
    print(describe(trace, result)); emit_plan(trace, result.plans[0].candidate, "out/")

The search is :func:`paddle_ext.plan.search` on the traced description (:mod:`.trace_layer`),
without sequence-parallel plans (:func:`.emit.expressible` says why). ``emit_plan`` writes
``plan.json`` and ``apply_plan.py`` (:mod:`.emit`).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, List, Optional

from .emit import Targets, expressible, parallelize_config, snippet
from .memory import format_bytes
from .candidates import enumerate_candidates
from .model_desc import gpt_family
from .search import SearchResult, requirements, search
from . import user_runner
from .trace_layer import PROFILE_CONFIG, UserTrace, trace_user_model
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


def summary_lines(trace: UserTrace) -> List[str]:
    """What the trace found, as the lines ``paddle-ext plan`` prints before its table."""
    m = trace.model
    lines = [f"{m.name}: {len(trace.ops)} ops traced, {trace.batch_ops} carry the batch, {trace.seq_ops} the "
             f"sequence ({trace.seq}); {m.param_elems():,} parameters"]
    if trace.blocks_prefix is not None:
        lines.append(f"repeated blocks: {trace.block_names[0]} .. {trace.block_names[-1]} ({len(trace.block_names)}; "
                     f"pipeline stages are cut between them)")
    else:
        lines.append("no repeated blocks: no pipeline plans")
    pairs = [f"{c} (column)" for c in trace.column] + [f"{r} (row)" for r in trace.row]
    lines.append(f"tensor parallel in each block: {', '.join(pairs) or 'none (no Linear feeds another Linear in every block)'}")
    shown = "; ".join(f"{n}: {w}" for n, w in trace.replicated[:6])
    more = f"; ... {len(trace.replicated) - 6} more (plan.json lists them)" if len(trace.replicated) > 6 else ""
    lines.append(f"replicated ({len(trace.replicated)} layers): {shown}{more}")
    return lines


def describe(trace: UserTrace, result: SearchResult, top: int = 5) -> str:
    """What the trace found and the ``top`` plans, as text."""
    lines = summary_lines(trace)
    lines.append(f"{result.candidates} candidate plans in {result.search_s:.2f} s, {len(result.plans)} ranked "
                 f"(sequence-parallel plans are not planned for your model)")
    lines.append(f"{'#':>3}  {'plan':<28} {'pred step':>10} {'pred peak':>10}  dist.parallelize")
    for i, p in enumerate(result.plans[:top], 1):
        how = expressible(p.candidate)
        lines.append(f"{i:>3}  {p.candidate.name:<28} {p.step_s * 1e3:>7.2f} ms {format_bytes(p.peak_bytes):>10}  "
                     + ("yes" if not how else "no: paddle-ext's pipeline runtime"))
    return "\n".join(lines)


def trace_model(spec: str) -> UserTrace:
    """Load the factory ``spec`` and trace its model (:mod:`.user_model`, :mod:`.trace_layer`)."""
    return trace_user_model(load_factory(spec))


def emit_plan(traced, plan, out_dir) -> List[Path]:
    """Write ``plan.json`` and ``apply_plan.py`` for ``plan`` into ``out_dir``; the two paths.
    ``traced``: a :class:`~.trace_layer.UserTrace` or its ``ModelDesc``."""
    model = getattr(traced, "model", traced)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = config_for(model, plan)
    (out / "plan.json").write_text(json.dumps(cfg, indent=1))
    (out / "apply_plan.py").write_text(snippet(cfg))
    return [out / "plan.json", out / "apply_plan.py"]


def config_for(model, plan) -> dict:
    """The emitted configuration of ``plan`` for a traced ``ModelDesc`` (:mod:`.emit`)."""
    return parallelize_config(Targets(model.config), plan, model.config["factory"], len(model.layers))


def profile_gemms(model, cands, nproc: int) -> list:
    """The matmul shapes a profile for ``model`` must time: its candidates' and the demo block's,
    on which ``paddle-ext profile`` times the pipeline runtime (:data:`~.trace_layer.PROFILE_CONFIG`)."""
    cfg = model.config.get("profile_config", PROFILE_CONFIG)
    demo = gpt_family(cfg["d_model"], cfg["n_heads"], cfg["d_ff"], cfg["seq_len"], cfg["vocab"], cfg["n_layers"])
    demo_cands = enumerate_candidates(len(demo.layers), demo.heads, demo.hidden, demo.ffn, demo.seq, max(8, 2 * nproc),
                                      nproc)
    return sorted(set(requirements(model, cands, nproc)[0]) | set(requirements(demo, demo_cands, nproc)[0]))


def runner_for(model, timeout: float, lock: Optional[str]):
    """``(why a plan cannot run, run it)`` for ``plan --run`` on a traced model (:mod:`.user_runner`)."""
    return (user_runner.runnable,
            lambda c, steps: user_runner.run_candidate(c, config_for(model, c), model.config["factory"], steps=steps,
                                                       timeout=timeout, lock=lock))


__all__ = ["config_for", "describe", "summary_lines", "trace_model", "emit_plan", "plan_user_model", "profile_gemms", "runner_for", "search_user_model"]
