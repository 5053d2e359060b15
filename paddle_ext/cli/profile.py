"""``paddle-ext profile``: measure the cost profile ``paddle-ext plan`` predicts with.

Times, on this machine, the matmuls of every candidate plan of ``--model`` on ``--nproc`` ranks
(forward, backward for inputs, backward for weights), the elementwise line, and on ``--nproc``
gloo ranks the distributed-op overhead, each collective per group size, point-to-point, the
AdamW step and the process memory; with ``--static`` also the static Engine's cost per job,
message and hand-off (:mod:`paddle_ext.plan.profile_static`); writes plain JSON (see
:mod:`paddle_ext.plan.profile_data`).
"""
from __future__ import annotations

import json
import sys

from ..compat.native.cpp_build import optional_file_lock


def run(args) -> int:
    from ..plan.candidates import enumerate_candidates
    from ..plan.describe import RUNNER_IMPORTS, describe_model
    from ..plan.search import requirements

    model = describe_model(args.model, layers=args.layers, hidden=args.hidden, heads=args.heads, seq=args.seq,
                           vocab=args.vocab, ffn=args.ffn)
    batch = args.batch or max(8, 2 * args.nproc)
    cands = enumerate_candidates(len(model.layers), model.heads, model.hidden, model.ffn, model.seq, batch,
                                 args.nproc)
    gemms, _ = requirements(model, cands, args.nproc)
    print(f"paddle-ext profile: {len(gemms)} matmul shapes of {len(cands)} plans of {model.name}, "
          f"collectives on {args.nproc} ranks", file=sys.stderr)
    from ..plan.profile import build_profile

    with optional_file_lock(args.lock):
        profile = build_profile(gemms, args.nproc, model.config, timeout=args.timeout,
                                imports=RUNNER_IMPORTS[args.model], model=args.model)
        if args.static:
            from ..plan.profile_static import measure_static_engine

            print("paddle-ext profile: the static Engine's cost per job, message and hand-off on 2 ranks",
                  file=sys.stderr)
            profile["static_engine"] = measure_static_engine(timeout=args.timeout)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(profile, f, indent=1)
    print(f"profile written to {args.out}")
    return 0


def add_model_arguments(parser) -> None:
    """``--model`` and the size overrides, shared with ``paddle-ext plan``."""
    parser.add_argument("--model", default="demo", help="demo (default), paddlenlp-gpt, paddlenlp-qwen")
    for name in ("layers", "hidden", "heads", "seq", "vocab", "ffn"):
        parser.add_argument(f"--{name}", type=int, default=None, help=f"override the model's {name}")
    parser.add_argument("--nproc", type=int, required=True, help="number of ranks")
    parser.add_argument("--batch", type=int, default=None, help="global batch (default max(8, 2 x nproc))")
    parser.add_argument("--lock", default=None, help="flock this file around measurements and launches")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds before a launch is failed")


def register(subparsers) -> None:
    parser = subparsers.add_parser("profile", help="measure the cost profile (ops, collectives) plan predicts with")
    add_model_arguments(parser)
    parser.add_argument("--out", required=True, help="the profile's JSON file")
    parser.add_argument("--static", action="store_true",
                        help="also measure the static Engine's cost per job, message and hand-off (a 2-rank "
                             "dist.to_static launch) for `paddle-ext plan --engine static`")
    parser.set_defaults(func=run)
