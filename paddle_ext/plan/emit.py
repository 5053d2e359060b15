"""A chosen plan as a ``dist.parallelize`` configuration, in JSON and as a Python snippet (pure).

``paddle-ext plan --model pkg.module:factory --emit DIR`` writes ``DIR/plan.json``
(:func:`parallelize_config`) and ``DIR/apply_plan.py`` (:func:`snippet`). The JSON holds what
``paddle.distributed.parallelize(model, optimizer, mesh, config)`` takes, with the plan classes
written as their names (``"ColWiseParallel"``) and split points as ``"END"``;
:func:`paddle_ext.apply_plan` builds the real objects from it in-process:

* ``mesh``: ``{"shape", "dim_names"}`` -- ``["dp", "mp"]``, or ``["pp", "dp", "mp"]`` with a
  pipeline (the names Paddle's ``tensor_parallel`` / ``sharded_data_parallel`` /
  ``pipeline_parallel`` look up), ranks in row-major order;
* ``dp_config``: ``{"sharding_level": 0..3}`` (always present, so every parameter becomes a
  distributed tensor and the optimizer is sharded as planned);
* ``mp_config``: ``{"parallelize_plan": {"blocks.*.fc1": "ColWiseParallel", "blocks.*.fc2":
  "RowWiseParallel"}}`` with ``tp > 1``: the column/row pairs the trace found in every block;
* ``pp_config``: ``{"split_spec": {"blocks.1": "END"}}`` with ``pp > 1``: the block after which
  each stage ends, the planner's stage split rounded to block ends;
* ``schedule``: what ``dist.parallelize`` cannot say. Its pipeline is by annotation (each stage's
  layers on their sub-mesh, one microbatch, every forward then every backward), which is the plan
  exactly when the schedule runs F then B per stage at one microbatch (``FThenB``, ``1F1B``,
  ``Eager1F1B`` at ``m1``). Any other schedule is ``"applied_by": "paddle-ext"``: the snippet then
  shows paddle-ext's pipeline runtime (:mod:`paddle_ext.passes.runtime`) and says so, and
  :func:`paddle_ext.apply_plan` refuses it (:class:`~.user_errors.EmitError`);
* ``replicated``: the layers kept whole on every rank, with why (never guessed).

>>> from paddle_ext.parallel_plan import parse_plan
>>> class T: blocks_prefix, block_names, column, row, replicated, blocks_cover = "blocks", ("blocks.0", "blocks.1"), ("fc1",), ("fc2",), (), True
>>> cfg = parallelize_config(T, parse_plan("pp2-tp2:1F1B:m1"), "my.model:build", n_pieces=4)
>>> cfg["mesh"], cfg["mp_config"], cfg["pp_config"], cfg["schedule"]["applied_by"]
({'shape': [2, 1, 2], 'dim_names': ['pp', 'dp', 'mp']}, {'parallelize_plan': {'blocks.*.fc1': 'ColWiseParallel', 'blocks.*.fc2': 'RowWiseParallel'}}, {'split_spec': {'blocks.0': 'END'}}, 'dist.parallelize')
"""
from __future__ import annotations

import re
from typing import List

from .stage_cost import split_sizes
from .user_errors import EmitError

FORMAT = "paddle-ext-plan/1"
BY_ANNOTATION = ("FThenB", "1F1B", "Eager1F1B")   # at one microbatch and one chunk: F then B per stage
PLAN_CLASSES = ("ColWiseParallel", "RowWiseParallel")


def expressible(plan) -> str:
    """Why ``dist.parallelize`` cannot express ``plan`` ("" when it can)."""
    if plan.sp:
        return ("sequence parallelism: dist.parallelize's SequenceParallel* plans assume a [b, s, h] decoder "
                "layout that the trace of your model does not check; the planner does not plan it for your model")
    if plan.pp > 1 and (plan.schedule not in BY_ANNOTATION or plan.microbatches != 1 or plan.chunks != 1):
        return (f"schedule {plan.schedule} with {plan.microbatches} microbatches and {plan.chunks} chunk(s) per rank: "
                f"dist.parallelize pipelines by annotation only (one microbatch, every forward then every backward, "
                f"as FThenB/1F1B/Eager1F1B at m1)")
    return ""


def split_points(block_names, n_pieces: int, plan) -> List[str]:
    """The blocks after which each of the first ``pp - 1`` stages ends: the planner's split of its
    ``n_pieces`` pieces (embed, blocks, head) rounded to block ends."""
    if plan.pp == 1:
        return []
    if len(block_names) < plan.pp:
        raise EmitError(f"plan {plan.name}: {plan.pp} pipeline stages need at least {plan.pp} repeated blocks, the "
                        f"trace found {len(block_names)}")
    points, end = [], 0
    for size in split_sizes(n_pieces, plan.pp)[:-1]:
        end += size
        block = min(max(end - 2, len(points) and _index(points[-1], block_names) + 1), len(block_names) - 1)
        points.append(block_names[block])
    if len(set(points)) != len(points):
        raise EmitError(f"plan {plan.name}: its stage split {split_sizes(n_pieces, plan.pp)} does not fall on "
                        f"{plan.pp - 1} distinct block ends of {len(block_names)} blocks")
    return points


def _index(name: str, block_names) -> int:
    return list(block_names).index(name)


def _pattern(trace, name: str) -> str:
    """``blocks.*.fc1`` when the blocks are all of their container's children, else the blocks
    named one by one (``(?:layers\\.1|layers\\.2)\\.fc1``): Paddle's ``tensor_parallel`` matches the
    pattern as a regular expression against every layer's full name."""
    if trace.blocks_prefix and getattr(trace, "blocks_cover", False):
        return f"{trace.blocks_prefix}.*.{name}"
    return "(?:" + "|".join(re.escape(b) for b in trace.block_names) + ")\\." + name


class Targets:
    """What :func:`parallelize_config` needs of a traced model, read back from its
    ``ModelDesc.config`` (where :func:`~.trace_layer.trace_user_model` writes it)."""

    def __init__(self, config: dict):
        self.blocks_prefix = config.get("blocks")
        self.block_names = tuple(config.get("block_names", ()))
        self.column, self.row = tuple(config.get("column", ())), tuple(config.get("row", ()))
        self.replicated = tuple(tuple(r) for r in config.get("replicated", ()))
        self.blocks_cover = bool(config.get("blocks_cover"))


def parallelize_config(trace, plan, spec: str, n_pieces: int) -> dict:
    """The JSON configuration of ``plan`` (a ``ParallelPlan``) for the model ``trace`` describes
    (``blocks_prefix``, ``block_names``, ``column``, ``row``, ``replicated``; ``n_pieces``: the
    planner's pipeline pieces). See the module docstring for the keys."""
    if plan.sp:
        raise EmitError(f"plan {plan.name}: {expressible(plan)}")
    mesh = {"shape": [plan.pp, plan.dp, plan.tp] if plan.pp > 1 else [plan.dp, plan.tp],
            "dim_names": ["pp", "dp", "mp"] if plan.pp > 1 else ["dp", "mp"]}
    cfg = {"format": FORMAT, "plan": plan.name, "model": spec, "batch": plan.batch, "mesh": mesh,
           "dp_config": {"sharding_level": plan.zero}}
    if plan.tp > 1:
        if not trace.column:
            raise EmitError(f"plan {plan.name}: tensor parallelism without a column/row pair in the blocks")
        tp_plan = {_pattern(trace, n): "ColWiseParallel" for n in trace.column}
        tp_plan.update({_pattern(trace, n): "RowWiseParallel" for n in trace.row})
        cfg["mp_config"] = {"parallelize_plan": tp_plan}
    if plan.pp > 1:
        cfg["pp_config"] = {"split_spec": {n: "END" for n in split_points(trace.block_names, n_pieces, plan)}}
    why = expressible(plan)
    cfg["schedule"] = {"name": plan.schedule, "microbatches": plan.microbatches, "chunks": plan.chunks,
                       "applied_by": "paddle-ext" if why else "dist.parallelize", "why": why}
    cfg["inputs"] = {"placements": ["Shard(0)", "Replicate()"],
                     "inputs_on": "the first pipeline stage" if plan.pp > 1 else "the mesh",
                     "labels_on": "the last pipeline stage" if plan.pp > 1 else "the mesh"}
    cfg["replicated"] = [{"layer": n, "why": w} for n, w in trace.replicated]
    return cfg


_HEAD = '''"""Apply plan {plan} (chosen by paddle-ext plan) to {spec}.

Run on {world} ranks, e.g. python -m paddle.distributed.launch --nproc_per_node {world} {file}
(on CPU: --devices, gloo). {note}
"""
import paddle
import paddle.distributed as dist

from paddle_ext import apply_plan
from {module} import {factory}

PLAN = __file__.rsplit("/", 1)[0] + "/plan.json"   # written beside this file by --emit


def train(steps=10):
    dist.init_parallel_env()
    model, (inputs, labels), loss_fn = {factory}()
    optimizer = paddle.optimizer.AdamW(parameters=model.parameters())
'''

_PARALLELIZE = '''    model, optimizer = apply_plan(model, optimizer, PLAN)   # dist.parallelize with plan.json's config
    mesh = dist.auto_parallel.get_mesh()
    first = mesh.get_mesh_with_dim("pp", 0) if "pp" in mesh.dim_names else mesh
    last = mesh.get_mesh_with_dim("pp", mesh.get_dim_size("pp") - 1) if "pp" in mesh.dim_names else mesh
    inputs = dist.shard_tensor(inputs, first, [dist.Shard(0), dist.Replicate()])   # the batch over dp
    labels = dist.shard_tensor(labels, last, [dist.Shard(0), dist.Replicate()])
    losses = []   # on the ranks that hold the loss (the last pipeline stage's)
    for step in range(steps):
        loss = loss_fn(model(inputs), labels)
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
        if dist.get_rank() in loss.process_mesh.process_ids:
            losses.append(float(loss))
            print(f"step {step}: loss {losses[-1]:.6f}")
    return losses


if __name__ == "__main__":
    train()
'''

_RUNTIME = '''    # dist.parallelize cannot express this plan's pipeline: {why}.
    # paddle-ext's pipeline runtime runs it; it needs your model as a sequence of layers (a
    # paddle.nn.Sequential of its pieces: embedding, each block, head):
    from paddle_ext.passes.runtime import build_stages, get_schedule, split_model
    stages = build_stages(split_model(model, {stages}), "{schedule}", rank=dist.get_rank(), n_ranks={pp})
    schedule = get_schedule("{schedule}")(stages, n_microbatches={m}, loss_fn=loss_fn)
    for step in range(steps):
        schedule.step(inputs, target=labels)
        optimizer.step()
        optimizer.clear_grad()
    # (the mesh, tensor-parallel and ZeRO parts of plan.json apply inside each stage as with
    # apply_plan; docs/pipeline_dygraph.md shows a stage on a sub-mesh)


if __name__ == "__main__":
    train()
'''


def snippet(cfg: dict) -> str:
    """``apply_plan.py``: a short script that trains the factory's model under ``cfg``, importing
    only Paddle and :func:`paddle_ext.apply_plan` (and paddle-ext's pipeline runtime, said so, for a
    schedule ``dist.parallelize`` lacks)."""
    module, _, factory = cfg["model"].partition(":")
    shape = cfg["mesh"]["shape"]
    world = 1
    for n in shape:
        world *= n
    sched = cfg["schedule"]
    note = ("Its pipeline schedule is run by paddle-ext's runtime, not dist.parallelize (see below)."
            if sched["applied_by"] == "paddle-ext" else "Everything in plan.json is dist.parallelize's.")
    text = _HEAD.format(plan=cfg["plan"], spec=cfg["model"], world=world, file="apply_plan.py", note=note,
                        module=module, factory=factory)
    if sched["applied_by"] == "paddle-ext":
        pp = shape[0]
        return text + _RUNTIME.format(why=sched["why"], stages=pp * sched["chunks"], schedule=sched["name"], pp=pp,
                                      m=sched["microbatches"])
    return text + _PARALLELIZE


__all__ = ["BY_ANNOTATION", "FORMAT", "PLAN_CLASSES", "Targets", "expressible", "parallelize_config", "snippet", "split_points"]
