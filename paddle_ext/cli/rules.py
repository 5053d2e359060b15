"""``paddle-ext rules``: list, explain, check (ground truth) and diff (against Paddle's C++ rules).

Examples::

    paddle-ext rules list
    paddle-ext rules explain matmul --shape 4x8,8x6 --placements "[S(1)] [R]"
    paddle-ext rules explain reshape --shape 4x6x8 --placements "[S(0),S(1)]" --mesh 2x2 --attr shape=[24,8]
    paddle-ext rules check mean_all --source paddle
    paddle-ext rules check --all --source paddle --json
    paddle-ext rules diff --all --n 300 --markdown
"""
from __future__ import annotations

import ast
import json
import re
import sys

from ..errors import ShardingRuleError
from ..placements import DistSpec, format_placements


def register(subparsers) -> None:
    p = subparsers.add_parser("rules", help="SPMD rules: list, explain, check against dense, diff with Paddle")
    sub = p.add_subparsers(dest="rules_command", metavar="ACTION")

    q = sub.add_parser("list", help="paddle-ext's rules with their notation")
    q.add_argument("--source", choices=["ext", "paddle"], default="ext",
                   help="ext: paddle-ext rules; paddle: ops whose Paddle C++ rule the validator can check")
    q.set_defaults(func=_list)

    q = sub.add_parser("explain", help="inferred placements, required reshards and their collectives")
    q.add_argument("op")
    q.add_argument("--shape", required=True, help="one shape per tensor, e.g. 4x8,8x6")
    q.add_argument("--placements", required=True, help='one list per tensor, e.g. "[S(1)] [R]"')
    q.add_argument("--mesh", default=None, help="mesh shape, e.g. 2x2 (default: 2 per placement)")
    q.add_argument("--attr", action="append", default=[], help="attribute name=value (python literal)")
    q.add_argument("--source", choices=["ext", "paddle", "auto"], default="auto")
    q.set_defaults(func=_explain)

    q = sub.add_parser("check", help="ground truth on simulated ranks: false positives and negatives")
    q.add_argument("op", nargs="?")
    q.add_argument("--all", action="store_true", help="every op the validator knows")
    q.add_argument("--source", choices=["ext", "paddle"], default="ext")
    q.add_argument("--json", action="store_true", help="machine-readable report")
    q.add_argument("--markdown", action="store_true", help="the report as a markdown page")
    q.add_argument("--max-cases", type=int, default=None)
    q.set_defaults(func=_check)

    q = sub.add_parser("diff", help="compare paddle-ext rules with Paddle's C++ rules on random cases")
    q.add_argument("op", nargs="?")
    q.add_argument("--all", action="store_true")
    q.add_argument("--n", type=int, default=300, help="random cases per op")
    q.add_argument("--seed", type=int, default=1)
    q.add_argument("--markdown", action="store_true")
    q.set_defaults(func=_diff)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


# -- list ---------------------------------------------------------------------------------------
def _list(args) -> int:
    from ..spmd.opcases import CASES
    from ..compat.ports.spmd_bridge import paddle_has_rule
    from ..spmd.lookup import load_builtin_rules
    from ..spmd.registry import REGISTRY

    load_builtin_rules()
    if args.source == "paddle":
        for op, c in sorted(CASES.items()):
            if c.paddle:
                print(f"{op:16s} Paddle rule {c.paddle}")
        return 0
    width = max(len(n) for n in REGISTRY.rules)
    for name, rule in sorted(REGISTRY.rules.items()):
        mark = "P" if paddle_has_rule(name) else " "
        print(f"{name:{width}s} {mark} {rule.doc_notation}")
    print("\nP = Paddle has a C++ rule of the same name (paddle-ext's rule takes precedence)")
    return 0


# -- explain ------------------------------------------------------------------------------------
def _parse_shapes(text: str) -> list[tuple[int, ...]]:
    shapes = []
    for part in text.split(","):
        part = part.strip()
        if part in ("", "scalar", "()"):
            shapes.append(())
            continue
        try:
            shapes.append(tuple(int(x) for x in part.lower().split("x")))
        except ValueError:
            raise ShardingRuleError(f"--shape {text!r}: {part!r} is not a shape like 4x8") from None
    return shapes


def _parse_placements(text: str) -> list[str]:
    groups = re.findall(r"\[[^\]]*\]", text)
    if groups:
        return groups
    return [f"[{p.strip()}]" for p in text.replace(" ", ",").split(",") if p.strip()]


def _parse_attr(items) -> dict:
    out = {}
    for item in items:
        if "=" not in item:
            raise ShardingRuleError(f"--attr {item!r}: write name=value, e.g. trans_x=True")
        k, v = item.split("=", 1)
        v = {"true": "True", "false": "False"}.get(v.strip().lower(), v.strip())
        try:
            out[k.strip()] = ast.literal_eval(v)
        except (ValueError, SyntaxError):
            out[k.strip()] = v
    return out


def build_specs(shape_text: str, placement_text: str, mesh_text: str | None) -> list[DistSpec]:
    shapes = _parse_shapes(shape_text)
    pls = _parse_placements(placement_text)
    if len(shapes) != len(pls):
        raise ShardingRuleError(f"{len(shapes)} shapes but {len(pls)} placement lists; give one of each per tensor")
    if mesh_text:
        try:
            mesh = tuple(int(x) for x in mesh_text.lower().split("x"))
        except ValueError:
            raise ShardingRuleError(f"--mesh {mesh_text!r} is not a mesh shape like 2x2 (positive sizes "
                                    f"joined by 'x', one per mesh dim)") from None
    else:
        mesh = (2,) * len(pls[0].strip("[]").split(","))
    return [DistSpec(s, mesh, p) for s, p in zip(shapes, pls)]


def _reshard_lines(res) -> list[str]:
    lines = []
    for r in res.reshards:
        comm = ", ".join(r.collectives()) or "none"
        lines.append(f"  reshard in{r.index}: {format_placements(r.src.placements)} -> "
                     f"{format_placements(r.dst.placements)}   collective: {comm}")
    if not res.reshards:
        lines.append("  no reshard needed")
    for k, o in enumerate(res.outputs):
        if any(p.is_partial() for p in o.placements):
            lines.append(f"  out{k} {format_placements(o.placements)} is partial: an all-reduce "
                         f"(or reduce-scatter) makes it whole when a consumer needs it")
    return lines


def explain_text(op: str, specs: list[DistSpec], attrs: dict, source: str = "auto") -> str:
    """``op: given -> required = outputs`` plus one line per reshard with its collectives."""
    from ..spmd.lookup import get_spmd_rule
    from ..spmd.result import make_result

    rule = get_spmd_rule(op, source)
    if rule.source == "paddle":
        from ..spmd.opcases import CASES

        case = next((c for c in CASES.values() if c.paddle == op), None)
        if case is None:
            raise ShardingRuleError(
                f"{op}: paddle-ext does not know the PHI argument list of Paddle's rule, and a wrong "
                f"list crashes it; use --source ext or an op listed by `paddle-ext rules list --source paddle`")
        tensors = list(specs)
        structured = [tensors] if case.op in ("concat", "stack") else tensors
        shapes_only = [s.shape for s in tensors]
        defaults = dict(case.examples[0][1]) if case.examples else {}
        defaults.update(attrs)
        del shapes_only
        res = rule.infer_positional(case.paddle_args(structured, defaults))
        res = make_result(op, tensors, res.inputs, res.outputs, "Paddle C++ rule")
        return "\n".join([f"{res} (Paddle C++ rule {op})"] + _reshard_lines(res))
    tensors = [p for p in rule.params if p.kind != "attr"]
    structured: list = list(specs)
    if tensors and tensors[0].kind == "tensors":
        structured = [list(specs)]
    res = rule.infer(structured, attrs)
    return "\n".join([f"{res}   (rule: {res.rule})"] + _reshard_lines(res))


def _explain(args) -> int:
    specs = build_specs(args.shape, args.placements, args.mesh)
    print(explain_text(args.op, specs, _parse_attr(args.attr), args.source))
    return 0


# -- check --------------------------------------------------------------------------------------
def _ops(args, known) -> list[str]:
    if args.all:
        return known
    if not args.op:
        raise ShardingRuleError("name an op or pass --all")
    return [args.op]


def _check(args) -> int:
    from ..spmd.validator import check_op, known_ops

    reports = [check_op(op, args.source, max_cases=args.max_cases) for op in _ops(args, known_ops(args.source))]
    if args.json:
        json.dump([r.as_dict() for r in reports], sys.stdout, indent=1)
        print()
    elif args.markdown:
        from ..spmd.report import validator_markdown

        print(validator_markdown(reports, " ".join(sys.argv[1:]) or "rules check"))
    else:
        for r in reports:
            print(f"{r.op:14s} [{r.source}] cases {r.cases:4d}  false positives {len(r.false_positives):3d}  "
                  f"false negatives {len(r.false_negatives):3d}  errors {len(r.errors):3d}")
            for f in r.false_positives[:3]:
                print(f"    FP {f}")
            for f in r.false_negatives[:2]:
                print(f"    FN {f}")
            for f in r.errors[:2]:
                print(f"    ERR {f}")
    return 1 if any(r.false_positives for r in reports) else 0


# -- diff ---------------------------------------------------------------------------------------
def _diff(args) -> int:
    from ..spmd.opcases import CASES
    from ..spmd.report import diff_markdown, diff_summary

    known = sorted(o for o, c in CASES.items() if c.paddle)
    ops = _ops(args, known)
    unknown = [op for op in ops if op not in known]
    if unknown:
        import difflib

        close = difflib.get_close_matches(unknown[0], known, n=5, cutoff=0.6)
        hint = f" (close names: {', '.join(close)})" if close else ""
        raise ShardingRuleError(f"rules diff knows no op {unknown[0]!r}{hint}; it compares the ops that have "
                                f"both a paddle-ext and a Paddle rule: {', '.join(known)}")
    summary = diff_summary(ops, args.n, args.seed)
    if args.markdown:
        print(diff_markdown(summary, f"paddle-ext rules diff {'--all' if args.all else args.op} --n {args.n} "
                                     f"--seed {args.seed} --markdown"))
        return 0
    for op, (n, ds, cats) in summary.items():
        print(f"{op:14s} cases {n:4d}  disagreements {len(ds):4d}  " + " ".join(f"{k}={v}" for k, v in sorted(cats.items())))
    unexplained = [d for _, ds, _ in summary.values() for d in ds if d[1] is None]
    for d, _ in unexplained[:20]:
        print(f"  UNEXPLAINED {d}")
    return 1 if unexplained else 0
