"""Lookup: the one plan cache of dygraph dispatch, and its one key.

A plan (:class:`~.call_plan.Plan`) depends only on the op, its attributes and its inputs' layouts,
so a repeated call finds it with one dict lookup; registering or replacing the op's rule drops
its plans (:func:`forget`). The key is always the tuple
``(op, attributes, layout)``:

* ``attributes``: ``tuple(attrs.items())`` (``()`` for none); a list attribute is turned into a
  tuple when it cannot be hashed (the rules take tuples), and a call whose attributes still
  cannot be hashed (a nested list) gets a plan that is not cached;
* ``layout``: the inputs' global shapes, placements and mesh, read one of two ways that give
  the same plans --

  * **compiled** (:mod:`paddle_ext.compat.native.fast_key`, once built): ``bytes`` read in C++ from
    the DistTensors, for calls whose slots are all DistTensors on one mesh (~2 us next to the op;
    the compiled route also keeps a memo of this dict's answers, which :func:`forget` empties);
  * **Python** (:func:`python_layout`): a tuple with, per slot, the global shape and Paddle's
    placements string of a DistTensor, ``("dense", shape)`` for a dense tensor, ``None`` or a
    tuple for a list slot, and last the mesh's number in the table of meshes seen
    (:func:`mesh_number`; meshes are compared with Paddle's ``==``: shape and process ids).

Inputs on different meshes have no key: their plan is made uncached, and raises the mixed-mesh
error. Each plan of this cache carries its mesh as an owned C++ ``ProcessMesh`` (``cmesh``),
which ``dtensor_to_local``/``dtensor_from_local`` take about 1 us cheaper than the Python mesh.
"""
from __future__ import annotations

from typing import Sequence

from ..compat.native import fast_key
from ..compat.ports.dispatch import DygraphRuntime, dygraph_runtime
from ..compat.ports.internals import placements_text
from ..spmd.registry import REGISTRY
from .call_plan import Plan, make_plan
from .slots import flatten_slots

LIMIT = 4096        # plans (and meshes) kept; past it, new ones are made per call and not kept
_PLANS: dict = {}   # (op, attributes, layout) -> Plan
PLANS = _PLANS      # the same dict: the dispatcher's compiled lookup (fast_key.PLAN_OF) reads it
_MESHES: list = []  # the meshes seen, as owned C++ ProcessMesh objects; a mesh's number is its index


def forget(op: str | None) -> int:
    """Drop the cached plans of ``op`` (None: of every op), because its rule was registered or
    replaced (``register_spmd_rule(op, override=True)``); returns how many were dropped."""
    stale = [key for key in _PLANS if op is None or key[0] == op]
    for key in stale:
        del _PLANS[key]
    fast_key.forget_plans()   # the compiled route's memo of this dict's answers
    return len(stale)


REGISTRY.listeners.append(forget)


def lookup(rt: DygraphRuntime, op: str, slots: Sequence, attrs: dict):
    """``(plan, no_grad)`` for a dygraph call, or None when no slot holds a DistTensor.

    ``no_grad`` is True when no input requires grad. A miss makes the plan
    (:func:`~.call_plan.make_plan`, which raises for what cannot be served) and keeps it."""
    ck = fast_key.KEY[0]
    got = ck(slots) if ck is not None else None
    if got is None:
        got = python_layout(rt, slots)
        if got is None:
            return None
    layout, no_grad = got
    try:
        plan = _PLANS.get((op, tuple(attrs.items()) if attrs else (), layout))
    except TypeError:   # an unhashable attribute (or a layout without a key): normalise, try again
        plan = None
    if plan is None:
        plan = _make_and_keep(rt, op, slots, attrs, layout)
    return plan, no_grad


def python_layout(rt: DygraphRuntime, slots: Sequence, lists_are_dense: bool = False):
    """``(layout, no_grad)`` for the slots (see the module docstring), ``(None, no_grad)`` when
    the DistTensors are on different meshes, or None when no slot holds a DistTensor.

    The layout is flat: per DistTensor its shape and placements string (or placements), per
    other object ``"dense"`` and its shape, per None a None; then, when a slot is a list, each
    slot's length (or whether it is None); last the mesh number. ``lists_are_dense``: the items
    are the flattened slots (a list inside a list slot is just an object)."""
    Tensor = rt.tensor
    pstr = rt.has_placements_str
    key = []
    mesh = None
    mixed = False
    no_grad = True
    for t in slots:
        if isinstance(t, Tensor):
            if t.is_dist():
                pm = t.process_mesh
                if mesh is None:
                    mesh = pm
                elif pm is not mesh and not pm == mesh:
                    mixed = True
                key.append(tuple(t.shape))
                key.append(placements_text(t) if pstr else tuple(t.placements))
            else:
                key.append("dense")
                key.append(tuple(t.shape))
            if not t.stop_gradient:
                no_grad = False
        elif t is None:
            key.append(None)
        elif isinstance(t, (list, tuple)) and not lists_are_dense:
            return _with_list_slots(rt, slots)
        else:
            key.append("dense")
            key.append(tuple(getattr(t, "shape", ())))
    if mesh is None:
        return None
    if mixed:
        return None, no_grad
    number = 0 if _MESHES and mesh == _MESHES[0] else mesh_number(rt, mesh)   # the first mesh: no call
    if number is None:
        return None, no_grad
    key.append(number)
    return tuple(key), no_grad


def _with_list_slots(rt: DygraphRuntime, slots: Sequence):
    """:func:`python_layout` of slots holding a list: the tensors flat, then the slots' shape."""
    got = python_layout(rt, flatten_slots(slots), True)
    if got is None or got[0] is None:
        return got
    shape = tuple(len(s) if isinstance(s, (list, tuple)) else s is None for s in slots)
    return got[0][:-1] + (shape, got[0][-1]), got[1]


def mesh_number(rt: DygraphRuntime, mesh) -> int | None:
    """The number of ``mesh`` (a tensor's C++ mesh) in the table of meshes seen; a new mesh is
    added as an owned copy (the mesh a tensor hands out does not own its data). None once the
    table is full."""
    for i, m in enumerate(_MESHES):
        if mesh == m:
            return i
    if len(_MESHES) >= LIMIT:
        return None
    _MESHES.append(rt.owned_mesh(list(mesh.shape), list(mesh.process_ids), list(mesh.dim_names)))
    return len(_MESHES) - 1


def _make_and_keep(rt: DygraphRuntime, op, slots, attrs, layout) -> Plan:
    """A miss: the plan made (and kept under its key when the key can be hashed). A list
    attribute is turned into a tuple (the rules take tuples) before the key is built again."""
    attrs = {k: tuple(v) if isinstance(v, list) else v for k, v in attrs.items()} if attrs else attrs
    key = (op, tuple(attrs.items()) if attrs else (), layout) if layout is not None else None
    try:
        plan = _PLANS.get(key) if key is not None else None
    except TypeError:   # still unhashable: this call's plan is not kept
        key = plan = None
    if plan is not None:
        return plan
    flat = flatten_slots(slots)
    mesh = next(t for t in flat if isinstance(t, rt.tensor) and t.is_dist()).process_mesh
    number = mesh_number(rt, mesh)
    cmesh = _MESHES[number] if number is not None else rt.owned_mesh(
        list(mesh.shape), list(mesh.process_ids), list(mesh.dim_names))
    plan = make_plan(op, list(slots), attrs, flat, mesh, cmesh=cmesh)
    if key is not None and len(_PLANS) < LIMIT:
        _PLANS[key] = plan
    return plan


def cached_plans() -> list[Plan]:
    """The plans the cache holds (tests and benchmarks inspect them)."""
    return list(_PLANS.values())


def plan_for(op: str, slots: Sequence, attrs: dict) -> Plan | None:
    """The plan a dygraph dispatch of these slots would use (made and kept if new), or None when
    no slot holds a DistTensor."""
    got = lookup(dygraph_runtime(), op, slots, attrs)
    return None if got is None else got[0]


__all__ = ["LIMIT", "cached_plans", "lookup", "mesh_number", "plan_for", "python_layout"]
