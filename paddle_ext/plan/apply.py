"""``paddle_ext.apply_plan(model, optimizer, plan)``: a plan emitted by ``paddle-ext plan --emit``
applied in-process with ``paddle.distributed.parallelize`` (an adapter: imports Paddle).

``plan`` is the emitted configuration (:mod:`.emit`): a dict, the path of ``plan.json``, or the
``--emit`` directory. Call it on every rank after ``dist.init_parallel_env()``, on the dense model
and its optimizer as the factory built them; it sets the global mesh, builds the
``ColWiseParallel`` / ``RowWiseParallel`` objects, the split points and the ZeRO level from the
JSON, and returns ``dist.parallelize``'s ``(model, optimizer)``. Shard the batch over ``dp`` as
the emitted snippet does (``Shard(0)`` on the first stage's mesh for the inputs, the last stage's
for the labels).

A plan whose pipeline schedule ``dist.parallelize`` cannot run (``"applied_by": "paddle-ext"``)
is refused with :class:`~.user_errors.EmitError` naming paddle-ext's pipeline runtime.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import paddle.distributed as dist

from .emit import FORMAT, PLAN_CLASSES
from .user_errors import EmitError

_SPLIT = {"END": "END"}


def load_config(plan) -> dict:
    """The emitted configuration from a dict, ``plan.json`` or the ``--emit`` directory."""
    if isinstance(plan, dict):
        cfg = plan
    else:
        path = Path(plan)
        path = path / "plan.json" if path.is_dir() else path
        try:
            cfg = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise EmitError(f"apply_plan: cannot read the plan {str(path)!r} ({exc}); pass the plan.json that "
                            f"paddle-ext plan --emit DIR wrote, its directory, or its dict") from exc
    if not isinstance(cfg, dict) or cfg.get("format") != FORMAT:
        raise EmitError(f"apply_plan: not a plan written by paddle-ext plan --emit (format {FORMAT!r} expected, "
                        f"got {cfg.get('format') if isinstance(cfg, dict) else type(cfg).__name__!r})")
    return cfg


def _plan_objects(cfg: dict) -> dict:
    out = {}
    for pattern, name in cfg.get("mp_config", {}).get("parallelize_plan", {}).items():
        if name not in PLAN_CLASSES:
            raise EmitError(f"apply_plan: unknown tensor-parallel plan {name!r} for {pattern!r}; "
                            f"expected one of {PLAN_CLASSES}")
        out[pattern] = getattr(dist, name)()
    return out


def parallelize_args(cfg: dict):
    """``(mesh, config)`` for ``dist.parallelize`` from the emitted JSON."""
    mesh_cfg = cfg["mesh"]
    shape = [int(n) for n in mesh_cfg["shape"]]
    mesh = dist.ProcessMesh(np.arange(int(np.prod(shape))).reshape(shape).tolist(), dim_names=mesh_cfg["dim_names"])
    config = {"dp_config": {"sharding_level": int(cfg["dp_config"]["sharding_level"])}}
    objects = _plan_objects(cfg)
    if objects:
        config["mp_config"] = {"parallelize_plan": objects}
    split = cfg.get("pp_config", {}).get("split_spec")
    if split:
        for name, point in split.items():
            if point not in _SPLIT:
                raise EmitError(f"apply_plan: split point {point!r} after {name!r}: Paddle splits at END only")
        config["pp_config"] = {"split_spec": {name: dist.SplitPoint.END for name in split}}
    return mesh, config


def apply_plan(model, optimizer, plan, install=None):
    """``dist.parallelize(model, optimizer, mesh, config)`` with the emitted plan (module docstring);
    ``install``: paddle-ext's ``install`` (the package root passes it), called first with
    ``pipeline_by_annotation`` for a pipeline plan (ranks outside a stage's mesh)."""
    cfg = load_config(plan)
    sched = cfg.get("schedule") or {}
    if sched.get("applied_by") == "paddle-ext":
        raise EmitError(f"apply_plan: plan {cfg.get('plan')}: {sched.get('why')}; run it with paddle-ext's pipeline "
                        f"runtime as the emitted apply_plan.py shows (paddle_ext.passes.runtime), or choose a plan "
                        f"whose schedule is FThenB/1F1B at one microbatch")
    world = int(np.prod(cfg["mesh"]["shape"]))
    if dist.get_world_size() != world:
        raise EmitError(f"apply_plan: plan {cfg.get('plan')} runs on {world} ranks, this job has "
                        f"{dist.get_world_size()}; launch {world} ranks")
    if install is not None:
        install(pipeline_by_annotation="pp_config" in cfg)
    mesh, config = parallelize_args(cfg)
    dist.auto_parallel.set_mesh(mesh)
    return dist.parallelize(model, optimizer, config=config)


__all__ = ["apply_plan", "load_config", "parallelize_args"]
