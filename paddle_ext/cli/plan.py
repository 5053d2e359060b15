"""``paddle-ext plan``: rank the parallel plans of a model on N ranks by predicted step time.

Order of work: read the memory limit, describe the model, enumerate the plans (a rank count with
no factorisation fails here), load or measure the profile, check it covers every plan, predict,
prune by memory, rank; then ``--run K`` launches the K best plans the demo's runner can run and
fills in the measured step time and peak memory. Every bad input fails before the search and
before any launch. ``--json`` prints ``{"candidates", "search_s", "plans": [...]}``.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ..compat.native.cpp_build import optional_file_lock
from .profile import add_model_arguments

DEFAULT_TOP = 10
STEAL_WARN = 0.05   # a pass during which the host took more than this share of the CPU time is worth a note


def _fmt_s(s) -> str:
    return "-" if s is None else f"{s * 1e3:.1f} ms"


def _table(plans: list, show: int) -> str:
    from ..plan.memory import format_bytes

    lines = [f"{'#':>3}  {'plan':<36} {'pred step':>10} {'meas step':>10} {'pred peak':>10} {'meas peak':>10}  "
             f"top contributions"]
    for i, p in enumerate(plans[:show], 1):
        top = ", ".join(f"{t['part']} {t['fraction']:.0%}" for t in p["top"])
        meas_peak = "-" if p["measured_peak_bytes"] is None else format_bytes(p["measured_peak_bytes"])
        name = p["name"] + (f" (= {', '.join(p['same_as'])})" if p.get("same_as") else "")
        lines.append(f"{i:>3}  {name:<36} {_fmt_s(p['predicted_step_s']):>10} {_fmt_s(p['measured_step_s']):>10} "
                     f"{format_bytes(p['predicted_peak_bytes']):>10} {meas_peak:>10}  {top}")
    return "\n".join(lines)


def _profile(args, model, out: Path):
    from ..plan.profile_data import Profile

    if args.profile:
        return Profile.load(args.profile)
    from ..plan.candidates import enumerate_candidates
    from ..plan.describe import RUNNER_IMPORTS
    from ..plan.profile import build_profile
    from ..plan.search import requirements

    cands = enumerate_candidates(len(model.layers), model.heads, model.hidden, model.ffn, model.seq,
                                 args.batch or max(8, 2 * args.nproc), args.nproc)
    print(f"paddle-ext plan: no --profile: measuring one on {args.nproc} ranks -> {out}/profile.json",
          file=sys.stderr)
    user = "factory" in model.config   # --model pkg.module:factory: the demo block times dispatch and pipeline
    gemms = requirements(model, cands, args.nproc)[0]
    if user:
        from ..plan.user_plan import profile_gemms

        gemms = profile_gemms(model, cands, args.nproc)
    with optional_file_lock(args.lock):
        data = build_profile(gemms, args.nproc, model.config.get("profile_config", model.config),
                             timeout=args.timeout, imports=RUNNER_IMPORTS.get(args.model, ()),
                             model="demo" if user else args.model)
        if args.engine == "static":
            from ..plan.profile_static import measure_static_engine

            data["static_engine"] = measure_static_engine(timeout=args.timeout)
    (out / "profile.json").write_text(json.dumps(data, indent=1))
    return Profile.from_json(data, str(out / "profile.json"))


def _pick(entries: list, k: int, how: str) -> list:
    """``k`` entries: the first ones (``best``) or evenly spaced over the ranking (``spread``)."""
    if how == "best" or len(entries) <= k:
        return entries[:k]
    step = (len(entries) - 1) / (k - 1) if k > 1 else 0
    return [entries[round(i * step)] for i in range(k)]


def _runner(args, model):
    """(why a plan cannot run, run it): the demo's runner, PaddleNLP's for its models, or a user
    model's emitted configuration (plan/user_runner.py)."""
    if "factory" in model.config:
        from ..plan.user_plan import runner_for

        return runner_for(model, args.timeout, args.lock)
    if args.model == "demo":
        from ..plan import runner

        return (lambda c: runner.runnable(c, len(model.layers)),
                lambda c, steps: runner.run_candidate(c, model.config, steps=steps, timeout=args.timeout,
                                                      lock=args.lock))
    from ..plan import real_model_runner as nlp

    return (lambda c: nlp.runnable(c, model.config["n_layers"]),
            lambda c, steps: nlp.run_candidate(c, args.model, steps=steps, timeout=args.timeout, lock=args.lock))


def _run_plans(args, model, result, doc: dict) -> None:
    from ..errors import HarnessError
    from ..plan.accuracy import summary
    from ..plan.measured import median_pass, pass_paces
    from ..plan.runner import steps_for
    from ..plan.search import to_json

    runnable, run_candidate = _runner(args, model)
    by_name = {p.candidate.name: p.candidate for p in result.plans}
    every = to_json(result)["plans"]
    skipped = {e["name"]: runnable(by_name[e["name"]]) for e in every}
    chosen = _pick([e for e in every if not skipped[e["name"]]], args.run, args.pick)
    names = {e["name"] for e in doc["plans"]}
    doc["plans"] = sorted(doc["plans"] + [e for e in chosen if e["name"] not in names],
                          key=lambda e: e["predicted_step_s"])
    chosen_names = {e["name"] for e in chosen}
    chosen = [e for e in doc["plans"] if e["name"] in chosen_names]
    passes: dict = {e["name"]: [] for e in chosen}
    for entry in chosen:
        entry["steps"] = args.steps or steps_for(entry["predicted_step_s"])
    for rep in range(args.repeat):
        # every other pass in reverse order: a slow spell of the machine does not fall on one plan
        for n, entry in enumerate(chosen if rep % 2 == 0 else chosen[::-1], 1):
            if "run_error" in entry:
                continue
            print(f"paddle-ext plan: pass {rep + 1}/{args.repeat}, running {n}/{len(chosen)}: {entry['name']} "
                  f"({entry['steps']} steps)", file=sys.stderr)
            try:
                passes[entry["name"]].append(run_candidate(by_name[entry["name"]], entry["steps"]))
            except HarnessError as exc:  # one failing plan is a finding, not the end of the comparison
                entry["run_error"] = str(exc).splitlines()[0]
                print(f"paddle-ext plan: {entry['name']} failed: {entry['run_error']}", file=sys.stderr)
    measured = {e["name"]: passes[e["name"]] for e in chosen if "run_error" not in e and passes[e["name"]]}
    # each pass's pace, then the median paced pass (plan/measured.py): a slow and a fast spell of
    # a shared machine both last minutes, so the fastest pass favours whichever plan a fast spell
    # met, and a whole pass's pace can move by more than the plans differ. Passes during which the
    # host took more than STEAL_WARN of the CPU time measure the host: left out while a pass
    # remains (docs/measurements/plan_rounds.md, "Run rules and what the model leaves out").
    paces = pass_paces({name: [r["measured_step_s"] for r in runs] for name, runs in measured.items()})
    for entry in chosen:
        runs = measured.get(entry["name"])
        if runs is None:
            continue
        paced = [r["measured_step_s"] / pace for r, pace in zip(runs, paces)]
        median, used = median_pass(paced, [r.get("steal_fraction") for r in runs], STEAL_WARN)
        entry.update(runs[median])
        entry["measured_step_s"] = paced[median]
        entry["measured_step_s_unpaced"] = runs[median]["measured_step_s"]
        entry["measured_passes_used"] = used
        entry["measured_peak_bytes"] = max(r["measured_peak_bytes"] for r in runs)
        entry["measured_step_s_passes"] = [r["measured_step_s"] for r in runs]
        entry["measured_steal_passes"] = [r.get("steal_fraction") for r in runs]
    doc["run"] = summary(doc["plans"])
    doc["run"]["pass_paces"] = paces
    doc["run"]["load_average"] = list(os.getloadavg())
    stolen = [s for e in chosen for s in e.get("measured_steal_passes", []) if s is not None]
    doc["run"]["max_steal_fraction"] = max(stolen) if stolen else None
    doc["run"]["picked"] = args.pick
    not_run = {name: why for name, why in skipped.items() if why}
    if not_run:
        doc["run"]["not_runnable_by_the_runner"] = len(not_run)


def _schedules(text):
    """``--schedules 1F1B,ZBV`` as canonical names (None: every schedule); unknown names fail
    with the list of known ones."""
    if not text:
        return None
    from ..passes.schedules import get_schedule_info

    return list(dict.fromkeys(get_schedule_info(name.strip()).name for name in text.split(",") if name.strip()))


def _describe(args, check_model_name, describe_model):
    """``(ModelDesc, UserTrace or None)`` of ``--model``: a known model, or the user's own
    (``pkg.module:factory``, traced; size overrides and ``--emit`` are checked here)."""
    from ..errors import PaddleExtError
    from ..plan.user_model import is_factory_spec

    overridden = [k for k in ("layers", "hidden", "heads", "seq", "vocab", "ffn") if getattr(args, k) is not None]
    if not is_factory_spec(args.model):
        if args.emit:
            raise PaddleExtError(f"--emit writes a dist.parallelize configuration for your own model (--model "
                                 f"pkg.module:factory); {args.model}'s plans run with paddle-ext demo --plan NAME or "
                                 f"its runner (docs/plan.md)")
        check_model_name(args.model)
        return describe_model(args.model, layers=args.layers, hidden=args.hidden, heads=args.heads, seq=args.seq,
                              vocab=args.vocab, ffn=args.ffn), None
    if overridden:
        raise PaddleExtError(f"--model {args.model} is traced from the model its factory builds; size overrides "
                             f"(--{', --'.join(overridden)}) do not apply: build another size in the factory")
    from ..plan.user_plan import trace_model

    trace = trace_model(args.model)
    return trace.model, trace


def run(args) -> int:
    from ..plan.candidates import enumerate_candidates
    from ..plan.describe import check_model_name, describe_model
    from ..plan.memory import parse_memory
    from ..plan.search import search, to_json

    limit = parse_memory(args.memory_limit) if args.memory_limit is not None else None
    model, trace = _describe(args, check_model_name, describe_model)
    batch = args.batch or (model.config["batch"] if trace else max(8, 2 * args.nproc)) \
        if isinstance(args.nproc, int) else None
    enumerate_candidates(len(model.layers), model.heads, model.hidden, model.ffn, model.seq, batch, args.nproc,
                         _schedules(args.schedules))
    from ..plan.runner import WARMUP

    for flag, value, least, why in (("--repeat", args.repeat, 1, "passes over the run plans"),
                                    ("--steps", args.steps, WARMUP + 1, f"{WARMUP} warm-up steps and one timed")):
        if args.run and value is not None and value < least:
            from ..errors import PaddleExtError

            raise PaddleExtError(f"{flag} {value}: with --run it must be at least {least} ({why})")
    if args.engine == "static" and (args.run or args.emit):
        from ..errors import PaddleExtError

        raise PaddleExtError(f"--engine static ranks plans for dist.to_static; {'--run' if args.run else '--emit'} "
                             f"runs or writes them for paddle-ext's dygraph runtime: drop it, or plan with --engine "
                             f"dygraph (a static plan is measured by tools/bench_static.py)")
    overridden = [k for k in ("layers", "hidden", "heads", "seq", "vocab", "ffn") if getattr(args, k) is not None]
    if args.run and args.model != "demo" and overridden:
        from ..errors import PaddleExtError

        raise PaddleExtError(f"--run trains {args.model} at the real-model tests' tiny config; a size override "
                             f"(--{', --'.join(overridden)}) describes a model it cannot build: drop the overrides "
                             f"or --run")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    profile = _profile(args, model, out)
    schedules = _schedules(args.schedules)
    if trace is None:
        result = search(model, profile, args.nproc, limit, nodes=args.nodes, batch=batch, schedules=schedules,
                        engine=args.engine)
    else:   # the user's model: without sequence-parallel plans (plan/emit.py says why)
        from ..plan.user_plan import emit_plan, search_user_model

        result = search_user_model(trace, profile, args.nproc, limit, nodes=args.nodes, batch=batch,
                                   schedules=schedules, engine=args.engine)
    doc = to_json(result, args.top if not args.json else max(args.top, 20))
    doc["model"] = {k: v for k, v in model.to_json().items() if k != "layers"}
    doc["profile"] = profile.data.get("source")
    if args.emit:
        files = emit_plan(trace, result.plans[0].candidate, args.emit)
        doc["emitted"] = {"plan": result.plans[0].candidate.name, "files": [str(f) for f in files]}
    if trace is not None:
        doc["trace"] = trace.to_json()
    if args.run:
        _run_plans(args, model, result, doc)
    (out / "plan.json").write_text(json.dumps(doc, indent=1))
    if args.json:
        print(json.dumps(doc, indent=1))
        return 0
    print(f"paddle-ext plan: {model.name} ({model.n_layers} layers, hidden {model.hidden}) on {args.nproc} ranks"
          + (" in the static Engine" if args.engine == "static" else "") + ": "
          f"{doc['candidates']} candidate plans in {doc['search_s']:.2f} s, {doc['feasible']} within the memory limit"
          + (f" ({doc['merged']} of them the same plan as a better-ranked one under another schedule name, "
             f"shown as '(= ...)')" if doc.get("merged") else ""))
    if trace is not None:
        from ..plan.user_plan import summary_lines

        print("\n".join(summary_lines(trace)))
    shown = [p for p in doc["plans"] if p["measured_step_s"] is not None] if args.run else doc["plans"]
    print(_table(shown, args.top if not args.run else len(shown)))
    if args.run:
        r = doc["run"]
        rho = r.get("spearman_step")
        print(f"\nran {r.get('run', 0)} plans: Spearman rank correlation of step times "
              f"{'n/a' if rho is None else f'{rho:.2f}'}; fastest predicted {r.get('fastest_predicted')} measures "
              f"{r.get('fastest_predicted_vs_fastest_measured', 0):+.0%} vs the fastest measured "
              f"{r.get('fastest_measured')}; largest memory error {r.get('max_abs_memory_error', 0):.0%}")
        if (r.get("max_steal_fraction") or 0) > STEAL_WARN:
            print(f"note: the host took up to {r['max_steal_fraction']:.0%} of this machine's CPU time during a pass "
                  f"(steal, measured_steal_passes in the JSON): a plan's figure leaves out its passes above "
                  f"{STEAL_WARN:.0%} while one remains (measured_passes_used); if the ranking matters, run again "
                  f"when the host is quieter")
    if args.emit:
        print(f"\n{doc['emitted']['plan']} as a dist.parallelize configuration: "
              + ", ".join(doc["emitted"]["files"]) + " (paddle_ext.apply_plan(model, optimizer, plan.json))")
    print(f"\nfull result in {out}/plan.json")
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser("plan", help="rank parallel plans by predicted step time and memory; --run proves them")
    add_model_arguments(parser)
    parser.add_argument("--profile", default=None, help="cost profile JSON (default: measure one now)")
    parser.add_argument("--memory-limit", default=None, help="memory per rank, e.g. 2GiB (default: no limit)")
    parser.add_argument("--nodes", type=int, default=None,
                        help="nodes the ranks span (default: nproc / the profile's ranks_per_node, else 1); groups "
                             "across nodes use the profile's inter_node figures")
    parser.add_argument("--engine", choices=("dygraph", "static"), default="dygraph",
                        help="what runs the plans: dygraph (paddle-ext's pipeline runtime, the default) or static "
                             "(dist.to_static with install(static_engine=True): each pipeline simulated as the "
                             "static Engine runs its jobs, from the profile's static_engine section)")
    parser.add_argument("--schedules", default=None,
                        help="pipeline schedules to consider, comma-separated (default: every schedule)")
    parser.add_argument("--top", type=int, default=DEFAULT_TOP, help=f"plans shown (default {DEFAULT_TOP})")
    parser.add_argument("--run", type=int, default=0, metavar="K",
                        help="run the K best plans the model's runner can run (the demo's, or PaddleNLP's auto-parallel "
                             "path for paddlenlp-*)")
    parser.add_argument("--pick", choices=("best", "spread"), default="best",
                        help="with --run: the K best plans (default) or K spread evenly over the ranking")
    parser.add_argument("--steps", type=int, default=None,
                        help="training steps per run plan (default: enough for about 8 s of timed steps at the plan's "
                             "predicted step, 32-512; a pass's step is the median after 2 warm-up steps; on a busy "
                             "machine a 30-step median moves by +-10%% within one run)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="passes over the run plans, every other one in reverse order (default 3); a plan's "
                             "measured step is its median pass's, its peak memory the largest")
    parser.add_argument("--emit", default=None, metavar="DIR",
                        help="with --model pkg.module:factory: write the best plan as a dist.parallelize configuration "
                             "(DIR/plan.json) and a script that applies it (DIR/apply_plan.py)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--out", default="plan_out", help="directory for plan.json and a measured profile")
    parser.set_defaults(func=run)
