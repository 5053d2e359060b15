"""Where Paddle keeps the registries paddle-ext extends, found on the installed Paddle.

Each probe returns a small dict (``found``, ``where``, a count or the names, and ``error`` when
missing) so ``paddle-ext doctor`` can show them and adapters can fail with the location they
expected. The objects themselves are returned by the ``get_*`` functions.
"""
from __future__ import annotations

import importlib

from ...errors import CompatError
from ..version import require_paddle

STATIC_RESHARD_MODULE = "paddle.distributed.auto_parallel.static.reshard_funcs.base_reshard_func"
PASS_MODULE = "paddle.distributed.passes.pass_base"
PIPELINING_SCHEDULES_MODULE = "paddle.distributed.auto_parallel.pipelining.schedules"
PIPELINING_STAGE_MODULE = "paddle.distributed.auto_parallel.pipelining.stage"
PIR_PASS_MODULE = "paddle.distributed.auto_parallel.static.pir_pass"


def _import(module: str, feature: str):
    require_paddle(feature)
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise CompatError(f"{feature}: Paddle has no module {module} ({exc}); "
                          f"this Paddle's layout is not one paddle-ext knows") from exc


def _attr(module: str, name: str, feature: str):
    mod = _import(module, feature)
    if not hasattr(mod, name):
        raise CompatError(f"{feature}: {module}.{name} is missing in this Paddle; "
                          f"paddle-ext knows the layout of Paddle 3.2/3.3")
    return getattr(mod, name)


def static_reshard_funcs() -> list:
    """Paddle's ordered list of static (PIR) ReshardFunctions (first match wins)."""
    return _attr(STATIC_RESHARD_MODULE, "_g_reshard_func_list", "static reshard registry")


def registered_passes() -> dict:
    """``PassBase._REGISTERED_PASSES``: pass name -> class."""
    return _attr(PASS_MODULE, "PassBase", "pass registry")._REGISTERED_PASSES


def pipelining_schedules():
    return _import(PIPELINING_SCHEDULES_MODULE, "dygraph pipelining")


def phi_spmd_rule(name: str):
    """Paddle's C++ SPMD rule ``name`` (``infer_forward``/``infer_backward``) or None if absent."""
    paddle = require_paddle("SPMD rule lookup")
    core = paddle.base.core
    return core.get_phi_spmd_rule(name) if core.contains_spmd_rule(name) else None


def _probe(fn) -> dict:
    try:
        return {"found": True, **fn()}
    except Exception as exc:  # a doctor reports, it does not stop at the first gap
        return {"found": False, "error": f"{type(exc).__name__}: {exc}"}


def probe_all() -> dict:
    """Everything ``paddle-ext doctor`` reports about Paddle's extension points."""
    def reshard():
        funcs = static_reshard_funcs()
        mod = _import(STATIC_RESHARD_MODULE, "static reshard registry")
        assert callable(mod.register_reshard_func) and callable(mod.choose_reshard_func)
        if not funcs:  # the list is filled when reshard_func_register is imported
            _import("paddle.distributed.auto_parallel.static.reshard_funcs.reshard_func_register",
                    "static reshard registry")
            funcs = static_reshard_funcs()
        return {"where": f"{STATIC_RESHARD_MODULE}._g_reshard_func_list",
                "count": len(funcs), "kinds": sorted({type(f).__name__ for f in funcs})}

    def passes():
        _import("paddle.distributed.passes", "pass registry")
        names = sorted(n for n in registered_passes() if n.startswith("pipeline_scheduler_"))
        return {"where": f"{PASS_MODULE}.PassBase._REGISTERED_PASSES",
                "count": len(registered_passes()), "pipeline_schedulers": names}

    def pipelining():
        mod = pipelining_schedules()
        stage = _import(PIPELINING_STAGE_MODULE, "dygraph pipelining")
        for name in ("PipelineScheduleMulti", "ScheduleFThenB", "Schedule1F1B", "ScheduleVPP"):
            getattr(mod, name)
        getattr(stage, "PipelineStage")
        return {"where": PIPELINING_SCHEDULES_MODULE,
                "schedules": sorted(n for n in dir(mod) if n.startswith("Schedule"))}

    def spmd():
        rule = phi_spmd_rule("matmul")
        if rule is None:
            raise CompatError("core.contains_spmd_rule('matmul') is False")
        return {"where": "paddle.base.core.get_phi_spmd_rule", "example": "matmul",
                "has_infer_forward": hasattr(rule, "infer_forward")}

    def pir_pipeline():
        fn = _attr(PIR_PASS_MODULE, "pipeline_pass", "PIR pipeline pass")
        return {"where": f"{PIR_PASS_MODULE}.pipeline_pass", "callable": callable(fn)}

    return {
        "static_reshard_functions": _probe(reshard),
        "pass_registry": _probe(passes),
        "dygraph_pipelining": _probe(pipelining),
        "spmd_rule_lookup": _probe(spmd),
        "pir_pipeline_pass": _probe(pir_pipeline),
    }
