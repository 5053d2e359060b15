"""``paddle-ext doctor``: what this machine's Paddle offers paddle-ext, and what is missing.

Reports the Paddle version and build, numpy, the communication backend, each compat fix
(needed, applied), and the registries paddle-ext extends. Exit code 0 only if all are usable.
"""
from __future__ import annotations

import json
import os
import platform


def collect() -> dict:
    """The doctor's report as a plain dict (also what ``--json`` prints)."""
    import numpy

    from ..compat import FIXES, install, paddle_version, version_status

    version = paddle_version()
    supported, why = version_status(version)
    report = {
        "paddle_ext": __import__("paddle_ext").__version__,
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "paddle": {"version": version, "supported": supported, "detail": why},
        "usable": False,
    }
    if version is None:
        return report
    import paddle

    from ..compat.ports.internals import compiled_with

    built = compiled_with()
    gpu = built["cuda"]
    report["paddle"].update({
        "build": "GPU (CUDA)" if gpu else ("XPU" if built["xpu"] else "CPU"),
        "commit": getattr(paddle.version, "commit", None),
        "cuda": paddle.version.cuda() if gpu else None,
        "device_count": paddle.device.cuda.device_count() if gpu else 0,
    })
    report["backend"] = "nccl" if gpu else "gloo"
    from ..compat.fixes.table import RING_FIXES, install_rings

    fixes = {}
    for name, fix in {**FIXES, **RING_FIXES}.items():   # what paddle_ext.install() applies
        try:
            needed = fix.needed()
            fixes[name] = {"summary": fix.summary, "needed": needed}
        except Exception as exc:  # noqa: BLE001 - report every probe
            fixes[name] = {"summary": fix.summary, "needed": None, "error": f"{type(exc).__name__}: {exc}"}
    applied = install() + install_rings() if supported else []
    for name in fixes:
        fixes[name]["applied"] = name in applied
    report["compat_fixes"] = fixes
    report["opt_in_fixes"] = _opt_ins()
    from ..compat.ports.registries import probe_all

    report["registries"] = probe_all()
    from ..compat.native import fast_key

    built = fast_key.is_built()
    report["dispatch_key"] = {
        "built": built,
        "detail": ("compiled (C++), cached" if built else
                   "Python for now; the compiled key is built on the first dispatched call (~25 s, once)"),
        "disabled": os.environ.get("PADDLE_EXT_FAST_KEY", "1") == "0",
    }
    report["usable"] = bool(
        supported
        and all(r["found"] for r in report["registries"].values())
        and all(f.get("needed") is not None and f["applied"] == f["needed"] for f in fixes.values()))
    return report


def _opt_ins() -> dict:
    """The fixes plain ``install()`` leaves off (each has a visible effect), with their switch
    and whether they are on in this process."""
    from ..compat.fixes.outside_mesh_support import unsupported_reason
    from ..compat.fixes.table import OPT_IN, STATIC_FIXES

    out = {}
    for name, fix in {**STATIC_FIXES, **OPT_IN}.items():
        out[name] = {"summary": fix.summary, "switch": fix.switch, "on": fix.is_applied()}
    reason = unsupported_reason()
    for name in OPT_IN:
        out[name]["applies_here"] = reason is None
        if reason is not None:
            out[name]["why_not_here"] = reason
    return out


def _print_text(report: dict) -> None:
    p = report["paddle"]
    print(f"paddle-ext {report['paddle_ext']}  python {report['python']}  numpy {report['numpy']}")
    print(f"Paddle: {p['version']} ({p.get('build', '-')}) -> {'supported' if p['supported'] else 'NOT supported'}: {p['detail']}")
    if "backend" in report:
        print(f"backend: {report['backend']}")
    for name, f in report.get("compat_fixes", {}).items():
        state = "error: " + f["error"] if "error" in f else (
            ("needed, applied" if f["applied"] else "needed, NOT applied") if f["needed"] else "not needed")
        print(f"fix {name:<22} {state}  -- {f['summary']}")
    for name, f in report.get("opt_in_fixes", {}).items():
        state = "on" if f["on"] else "off"
        print(f"opt-in {name:<19} {state:<3} {f['switch']}  -- {f['summary']}")
    for name, r in report.get("registries", {}).items():
        if r["found"]:
            extra = r.get("count", r.get("schedules", r.get("example", "")))
            print(f"registry {name:<26} ok   {r['where']}  {extra}")
        else:
            print(f"registry {name:<26} MISSING  {r['error']}")
    if "dispatch_key" in report:
        k = report["dispatch_key"]
        print(f"dispatch key: {'off (PADDLE_EXT_FAST_KEY=0)' if k['disabled'] else k['detail']}")
    print("usable: yes" if report["usable"] else "usable: NO (see above)")


def run(args) -> int:
    report = collect()
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        _print_text(report)
    return 0 if report["usable"] else 1


def register(subparsers) -> None:
    parser = subparsers.add_parser("doctor", help="check Paddle, numpy, backend, compat fixes and registries")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(func=run)
