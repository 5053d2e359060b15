"""Rule-driven dispatch: run a function written for local tensors on DistTensors.

One call of a dispatched op does, in order:

1. read every DistTensor input's :class:`DistSpec` (global shape, mesh, placements); a dense
   tensor next to them is taken as replicated (Paddle's own convention);
2. ask paddle-ext's rule for the op (``paddle_ext.spmd``) -- a missing rule, inputs on different
   meshes or a rule that cannot serve the placements raise :class:`DispatchError` naming the op,
   the placements and the fix; nothing is ever replicated silently;
3. reshard the inputs the rule lists as required reshards (paddle-ext's reshard in dygraph,
   Paddle's ``dist.reshard`` inside ``dist.to_static``);
4. run the function on the local shards and wrap its outputs with the placements and global
   shapes the rule claims (checking this rank's local shapes against the claim);
5. backward produces the gradient placements of :func:`~paddle_ext.dispatch.grad.grad_plan`, so
   a replicated input consumed locally gets a ``Partial(sum)`` gradient. Dygraph: Paddle's own
   autograd through ``dtensor_to_local(x, mesh, grad placements)`` -> local op ->
   ``dtensor_from_local`` where that is exact (:meth:`Plan.native_hints`: no ``Partial`` output,
   even shards, ...), else a PyLayer; to_static: the gradient-placement hint of
   ``dtensor_to_local``.

A dygraph call whose tensor slots are all DistTensors takes a fast path: one dict lookup keyed by
op, attributes and each input's global shape, placements and mesh finds the cached plan, so a
repeated call does only the local views, the local op and the wrapping (no autograd machinery
when no input requires grad or grad is disabled). The key is read in C++ by
:mod:`paddle_ext.compat.fast_key` once that is built (by a detached process, on first use),
else by :func:`_fast_key` from Paddle's Python getters; both give the same plans.

Inside ``dist.to_static`` an output the rule claims ``Partial`` would get a wrong gradient from
PIR's ``dtensor_from_local`` backward (measured: step-2 loss 20.7 vs dense 59.6), so there the
dispatcher asks the rule again with the partial-producing mesh dims replicated -- an explicit,
logged reshard.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ..compat import dispatch as cd
from ..compat import fast_key
from ..compat.internals import dtensor_local_api
from ..errors import ShardingRuleError
from ..placements import DistSpec, Partial, Replicate, Shard, format_placements
from ..spmd.registry import is_hashable
from .audit_report import _ACTIVE, record_dispatch
from .grad import GradPlan, grad_plan

log = logging.getLogger("paddle_ext.dispatch")

FIXES = ("register a rule with @paddle_ext.spmd.register_spmd_rule(op)",
         "reshard the inputs first with paddle.distributed.reshard",
         "or replicate explicitly: dist.reshard(x, mesh, [dist.Replicate()])")


class DispatchError(ShardingRuleError):
    """A dispatched op cannot run as asked: no rule, mixed meshes, or unservable placements."""


class HandBack(DispatchError):
    """paddle-ext cannot serve this call, and Paddle can: the caller runs Paddle's own op.

    Raised before anything runs (no reshard, no collective), the same way on every rank that
    sees the same tensors: a 0-D operand, a dynamic (-1) dimension inside ``dist.to_static``, or
    a rank outside the tensors' mesh (Paddle's design: such a rank computes nothing locally). A caller with no
    Paddle op to hand back to (:func:`paddle_ext.dispatch.spmd_op`) reports it as the
    :class:`DispatchError` it is."""


def _fix_text(*which: int) -> str:
    return "; ".join(FIXES[i] for i in (which or range(len(FIXES))))


# -- rules ------------------------------------------------------------------------------------------
def _load_gap_rules() -> None:
    import importlib

    importlib.import_module("paddle_ext.spmd_rules.gaps")


def get_rule(op: str):
    """paddle-ext's rule for ``op`` (the built-in families plus ``spmd_rules.gaps``)."""
    from ..spmd.registry import REGISTRY, get_spmd_rule

    rule = REGISTRY.rules.get(op)
    if rule is not None:
        return rule

    _load_gap_rules()
    try:
        return get_spmd_rule(op, "ext")
    except ShardingRuleError as exc:
        raise DispatchError(
            f"{op}: no paddle-ext SPMD rule, so it cannot run on DistTensors through paddle_ext.dispatch "
            f"({exc}); fix: {_fix_text()}") from None


# -- per-call context handed to local functions -----------------------------------------------------
@dataclass
class LocalCtx:
    """What a shard-aware local function may ask: this rank's offsets and shapes.

    ``offset(i, d)`` is where input ``i``'s local block starts along dim ``d`` (flat input order,
    as the rule sees them); ``coord`` is this rank's mesh coordinate.
    """

    specs: tuple
    outputs: tuple
    coord: tuple

    def offset(self, tensor: int, dim: int) -> int:
        return self.specs[tensor].local_slices(self.coord)[dim][0]

    def out_shape(self, k: int) -> tuple:
        return self.outputs[k].local_shape(self.coord)


# -- structure helpers ----------------------------------------------------------------------------
def flatten_slots(slots: Sequence) -> list:
    flat = []
    for s in slots:
        if isinstance(s, (list, tuple)):
            flat.extend(s)
        elif s is not None:
            flat.append(s)
    return flat


def restructure(slots: Sequence, flat: Sequence) -> list:
    out, k = [], 0
    for s in slots:
        if isinstance(s, (list, tuple)):
            out.append(list(flat[k:k + len(s)]))
            k += len(s)
        elif s is None:
            out.append(None)
        else:
            out.append(flat[k])
            k += 1
    return out


def _spec_slots(slots, specs):
    return restructure(slots, specs)


# -- the call -----------------------------------------------------------------------------------------
@dataclass
class Plan:
    """Everything a call needs that depends only on the op, attrs and input layouts (cached)."""

    op: str
    mesh: Any                     # paddle.distributed.ProcessMesh of the inputs
    specs: tuple                  # given input specs (flat)
    result: Any                   # RuleResult (Partial outputs removed in to_static)
    coord: tuple
    ctx: LocalCtx
    reshards: tuple               # (flat index, paddle-ext placements)
    out_local: tuple              # expected local shape per output, as lists
    out_paddle: tuple             # Paddle placements per output (lists, as dtensor_from_local takes)
    out_fast: tuple               # dtensor_from_local infers the right global shape
    notes: tuple = ()
    grad: dict = field(default_factory=dict)   # differentiable mask -> GradPlan
    mesh_ids: list = field(default_factory=list)
    _native: Any = False          # not yet decided; then None or the per-input to_local placements
    single: bool = False          # one output, even shards: the no-grad path wraps it inline
    cmesh: Any = None             # fast path: the mesh as an owned C++ ProcessMesh (cheap ``==``)

    def __post_init__(self):
        self.single = len(self.out_fast) == 1 and self.out_fast[0]

    def grad_plan(self, diff: tuple) -> GradPlan:
        g = self.grad.get(diff)
        if g is None:
            g = self.grad[diff] = grad_plan(self.result.inputs, self.result.outputs, diff, self.op)
        return g

    def native_hints(self):
        """Per input, the placements to give ``dtensor_to_local`` so Paddle's native autograd
        yields the :class:`GradPlan`'s gradients -- or None when it cannot:

        * an output is ``Partial``: the backward of ``dtensor_from_local`` reshards ``dy`` to
          ``Partial`` before taking the local value (measured: wrong gradients), while the local
          VJP needs the whole ``dy``;
        * the plan needs a replicated output gradient kept on one coordinate (``partialize``) or
          scaled (``P(avg)``);
        * the input gradients would depend on which outputs are differentiable;
        * a shard is uneven: Paddle's ``dtensor_from_local`` infers ``local * mesh size``.

        Those calls keep the PyLayer. Decided once per plan.
        """
        if self._native is not False:
            return self._native
        self._native = None
        res = self.result
        outs = tuple(res.outputs)
        if (not outs or len(outs) > 4 or not all(self.out_fast)
                or any(isinstance(p, Partial) for o in outs for p in o.placements)
                or not all(_fast_ok(s, self.coord) for s in res.inputs)):
            return None
        import itertools

        from ..compat.convert import to_paddle_placements

        base = None
        for mask in itertools.product((False, True), repeat=len(outs)):
            if not any(mask):
                continue
            try:
                gp = grad_plan(res.inputs, outs, mask, self.op)
            except ShardingRuleError:
                return None
            if gp.partialize or any(sc != 1.0 for sc in gp.output_scale):
                return None
            pls = tuple(tuple(s.placements) for s in gp.input_grads)
            if base is None:
                base = pls
            elif pls != base:
                return None
        self._native = tuple(list(to_paddle_placements(p)) for p in base)
        return self._native


@dataclass
class Call:
    """One dispatched call: the cached :class:`Plan` plus this call's arguments."""

    op: str
    slots: list
    attrs: dict
    run_local: Callable          # (local slots, LocalCtx) -> tensor or tuple of tensors
    plan: Plan | None = None
    gplan: GradPlan | None = None

    @property
    def mesh(self):
        return self.plan.mesh

    @property
    def result(self):
        return self.plan.result

    @property
    def coord(self):
        return self.plan.coord

    def text(self) -> str:
        return str(self.plan.result) if self.plan is not None else self.op


def has_dist(slots) -> bool:
    return any(cd.is_dist(t) for t in flatten_slots(slots))


_PLANS: dict = {}
_PLAN_LIMIT = 4096
_FAST: dict = {}      # Python fast-path key -> [Plan per mesh] (flat slots of DistTensors, dygraph)
_CPLANS: dict = {}    # (op, attributes, compiled key bytes) -> Plan (the key holds the mesh)
_KEY = fast_key.KEY   # [the compiled key function, or None: the Python key serves]
NATIVE_AUTOGRAD = True  # False: every differentiable dygraph call takes the PyLayer (tests compare both)
_HAS_PSTR: list = []  # [bool]: Paddle's Tensor has _placements_str (3.3); else the placement objects


def dispatch(op: str, slots: Sequence, attrs: dict, run_local: Callable):
    """Run ``op`` on DistTensors through its paddle-ext rule (see the module docstring).

    ``slots``: one entry per tensor parameter of the rule (a tensor, a list of tensors, or None);
    ``attrs``: the rule's attributes; ``run_local(local_slots, ctx)`` computes on local tensors.
    """
    rt = _RT or _runtime()
    if rt[1]():   # dygraph: the fast path when every slot is a DistTensor on one mesh
        plan = None
        ck = _KEY[0]
        if ck is not None:   # the compiled key (compat.fast_key); a hit is one dict lookup
            k = ck(slots)
            if k is not None:
                no_grad = k[1]
                try:
                    plan = _CPLANS.get((op, tuple(attrs.items()) if attrs else (), k[0]))
                except TypeError:   # an unhashable attribute: _compiled_plan normalises it
                    pass
                if plan is None:
                    plan, attrs = _compiled_plan(op, slots, attrs, k[0])
        else:
            fk = _fast_key(rt[0], op, slots, attrs)
            if fk is not None:
                plan, attrs = _cached_fast_plan(op, slots, attrs, fk)
                no_grad = fk[2]
        if plan is not None:
            if plan.reshards:
                return _run_fast(plan, op, slots, attrs, run_local, no_grad=no_grad)
            # _run_fast's three routes, inline for the common call (no reshard): the extra call
            # layers cost ~1.5 us of a ~60 us small op (tools/bench_dispatch.py)
            if no_grad or not rt[2]():   # no input requires grad, or grad is off
                out = run_local([t._local_value() for t in slots], plan.ctx)
            elif NATIVE_AUTOGRAD and plan.native_hints() is not None:
                to_local, mesh = rt[3], plan.cmesh
                out = run_local([to_local(t, mesh, h) if not t.stop_gradient else t._local_value()
                                 for t, h in zip(slots, plan._native)], plan.ctx)
            else:   # the PyLayer
                return _finish(_pylayer().apply(Call(op, list(slots), attrs, run_local, plan), *slots),
                               op, slots, attrs, run_local, plan)
            if plan.single and not isinstance(out, (tuple, list)) and out.shape == plan.out_local[0]:
                outs = rt[4](out, plan.cmesh, plan.out_paddle[0])   # local shape checked, wrapped
            else:
                outs = _wrap_checked(op, plan, out)
            if _ACTIVE:
                record_dispatch(Call(op, list(slots), attrs, run_local, plan))
            return outs
    if attrs:
        attrs = _norm_attrs(attrs)
    paddle = cd._paddle()
    flat = flatten_slots(slots)
    dygraph = paddle.in_dynamic_mode()
    Tensor = paddle.Tensor
    mesh = None
    all_dist = True
    parts = []
    for t in flat:
        if isinstance(t, Tensor) and t.is_dist():
            if mesh is None:
                mesh = t.process_mesh
            parts.append((tuple(t.shape), tuple(t.placements)))
        elif dygraph:
            all_dist = False
            parts.append(("dense", tuple(getattr(t, "shape", ()))))
        else:
            all_dist = all_dist and cd.is_dist(t)
            if mesh is None and cd.is_dist(t):
                mesh = cd.mesh_of(t)
    if mesh is None:
        return run_local(list(slots), None)
    static = not dygraph
    plan = key = None
    if dygraph:
        key = (op, tuple(attrs.items()) if attrs else (), tuple(parts), _slot_shape(slots))
        try:
            plan = _PLANS.get(key)
        except TypeError:  # an unhashable attribute: no plan cache for this call
            key = None
        if plan is not None and not _same_mesh_fast(plan, flat):
            plan = None
    if plan is None:
        plan = _make_plan(op, list(slots), attrs, flat, mesh, static)
        if key is not None and len(_PLANS) < _PLAN_LIMIT:
            _PLANS[key] = plan
    if not all_dist:
        flat = [t if cd.is_dist(t) else (cd.replicate_dense(t, plan.mesh) if cd.is_tensor(t) else t) for t in flat]
    for i, pls in plan.reshards:
        flat[i] = _reshard(flat[i], plan.mesh, pls, static)
    call = Call(op, slots, attrs, run_local, plan)
    outs = _run_static(call, flat) if static else _run_dygraph(call, flat)
    if _ACTIVE:
        record_dispatch(call)
    return outs


# -- dygraph fast path -----------------------------------------------------------------------------------
_RT: list = []   # Paddle's Tensor, in_dynamic_mode, is_grad_enabled, dtensor_to/from_local; looked up once


def _runtime() -> list:
    paddle = cd._paddle()
    _RT.extend((paddle.Tensor, paddle.in_dynamic_mode, paddle.is_grad_enabled, *dtensor_local_api()))
    _HAS_PSTR.append(hasattr(paddle.Tensor, "_placements_str"))
    fast_key.start()   # loads the compiled key, or starts its build (a detached process)
    return _RT


def _norm_attrs(attrs: dict) -> dict:
    return {k: tuple(v) if isinstance(v, list) else v for k, v in attrs.items()}  # hashable: caches


def _fast_key(Tensor, op, slots, attrs):
    """``(key, the inputs' mesh, no input requires grad)`` for a dygraph call whose slots are
    all DistTensors on one mesh (no lists, None or dense tensors), else None (the general path runs).

    The key is one flat tuple: op, attributes, and per input its global shape and placements
    (Paddle's own placements string: it hashes and compares far cheaper than the placement
    objects). The mesh is read once per input and compared with Paddle's mesh ``==`` (shape and
    process ids): every input's mesh must equal the first one's (else the general path raises the
    mixed-mesh error), and :func:`dispatch` takes the cached plan whose mesh equals it -- two meshes
    with the same ids but another shape get different plans."""
    key = [op, tuple(attrs.items()) if attrs else ()]
    pm0 = None
    no_grad = True
    pstr = _HAS_PSTR[0]
    for t in slots:
        if not isinstance(t, Tensor) or not t.is_dist():
            return None
        pm = t.process_mesh
        if pm0 is None:
            pm0 = pm
        elif pm is not pm0 and not pm == pm0:
            return None
        key.append(tuple(t.shape))
        key.append(t._placements_str if pstr else tuple(t.placements))
        if not t.stop_gradient:
            no_grad = False
    if pm0 is None:
        return None
    return tuple(key), pm0, no_grad


def _compiled_plan(op, slots, attrs, kb: bytes):
    """``(plan, attrs)`` for a call whose compiled key (:mod:`paddle_ext.compat.fast_key`) is
    ``kb``: the cached plan, else a new one. The key holds the mesh exactly, so one plan per key.
    A list attribute is normalised to a tuple (the rules take tuples); an attribute that still
    cannot be hashed gets a plan that is not cached."""
    attrs = _norm_attrs(attrs) if attrs else attrs
    key = (op, tuple(attrs.items()) if attrs else (), kb)
    if not is_hashable(key):
        return _new_fast_plan(op, slots, attrs), attrs
    plan = _CPLANS.get(key)
    if plan is None:
        plan = _new_fast_plan(op, slots, attrs)
        if len(_CPLANS) < _PLAN_LIMIT:
            _CPLANS[key] = plan
    return plan, attrs


def _new_fast_plan(op, slots, attrs) -> Plan:
    """A fast-path plan: :func:`_make_plan` plus ``cmesh``, the mesh as an owned C++
    ProcessMesh. The inline routes hand it to ``dtensor_to_local``/``dtensor_from_local`` (about
    1 us cheaper per call than converting the Python mesh), and the Python key compares meshes
    with its ``==`` (Paddle's: shape and ids; the Python mesh's own ``__eq__`` is slower)."""
    plan = _make_plan(op, list(slots), attrs, list(slots), slots[0].process_mesh, False)
    m = plan.mesh
    plan.cmesh = _core().ProcessMesh(list(m.shape), list(m.process_ids), list(m.dim_names))
    return plan


def _make_fast_plan(key, op, slots, attrs) -> Plan:
    plan = _new_fast_plan(op, slots, attrs)
    if key is not None and len(_FAST) < _PLAN_LIMIT:
        _FAST.setdefault(key, []).append(plan)
    return plan


def _cached_fast_plan(op, slots, attrs, fk):
    """``(plan, attrs)`` for a fast-path call keyed by ``fk`` (:func:`_fast_key`): the cached
    plan whose mesh equals the inputs' (one per mesh seen with this key; usually one), else a new
    one. A list attribute is normalised to a tuple (the rules take tuples) and the key rebuilt; an
    attribute that still cannot be hashed gets a plan that is not cached."""
    key, pm, _ = fk
    try:
        plans = _FAST.get(key, ())
    except TypeError:
        attrs = _norm_attrs(attrs)
        key = (op, tuple(attrs.items())) + key[2:]
        if not is_hashable(key):
            key = None
        plans = _FAST.get(key, ()) if key is not None else ()
    for p in plans:
        if pm == p.cmesh:
            return p, attrs
    return _make_fast_plan(key, op, slots, attrs), attrs


def _fast_plan(paddle, op, slots, attrs):
    """The cached plan :func:`dispatch`'s fast path uses for these slots, or None when the call
    takes the general path (tests and benchmarks inspect plans through this)."""
    rt = _RT or _runtime()
    ck = _KEY[0]
    if ck is not None:
        k = ck(slots)
        return None if k is None else _compiled_plan(op, slots, attrs, k[0])[0]
    fk = _fast_key(rt[0], op, slots, attrs)
    return None if fk is None else _cached_fast_plan(op, slots, attrs, fk)[0]


def _wrap_checked(op, plan, out):
    """The local result(s) as DistTensors with the plan's placements, after checking this rank's
    local shapes against the rule's claim."""
    if plan.single and not isinstance(out, (tuple, list)) and out.shape == plan.out_local[0]:
        return _core().dtensor_from_local(out, plan.mesh, plan.out_paddle[0])   # checked, wrapped
    out, multi = _as_tuple(out)
    _check_local_plan(op, plan, out)
    wrapped = _wrap(plan, out)
    return tuple(wrapped) if multi else wrapped[0]


def _finish(outs, op, slots, attrs, run_local, plan):
    if _ACTIVE:
        record_dispatch(Call(op, list(slots), attrs, run_local, plan))
    return outs


def _run_fast(plan, op, slots, attrs, run_local, no_grad: bool):
    """A fast-path call whose plan reshards an input: the reshards, then the local op wrapped
    without autograd (``no_grad``: no input requires grad; or grad is off), through Paddle's
    autograd where that is exact, or through the PyLayer. A reshard keeps its input's
    ``stop_gradient``, so ``no_grad`` holds for the resharded inputs too."""
    flat = list(slots)
    for i, pls in plan.reshards:
        flat[i] = _reshard(flat[i], plan.mesh, pls, False)
    if no_grad or not _RT[2]():
        outs = _wrap_checked(op, plan, run_local([t._local_value() for t in flat], plan.ctx))
    elif NATIVE_AUTOGRAD and plan.native_hints() is not None:
        outs = _run_native(plan, op, flat, flat, run_local)
    else:
        outs = _pylayer().apply(Call(op, list(slots), attrs, run_local, plan), *flat)
    return _finish(outs, op, slots, attrs, run_local, plan)


def _run_native(plan, op, slots, flat, run_local):
    """Differentiable through Paddle's own C++ autograd: ``dtensor_to_local`` with the gradient
    placements of the :class:`GradPlan` as its placements (the backward builds the input gradient
    with them, so a replicated input consumed locally gets ``P(sum)``), the local op, and
    ``dtensor_from_local`` (whose backward reshards ``dy`` to the output's placements). Only for
    plans where that is exact (:meth:`Plan.native_hints`)."""
    to_local, mesh = _core().dtensor_to_local, plan.mesh
    lin = [to_local(t, mesh, h) if not t.stop_gradient else t._local_value()
           for t, h in zip(flat, plan._native)]
    out = run_local(lin if slots is flat else restructure(slots, lin), plan.ctx)
    return _wrap_checked(op, plan, out)


_CORE: list = []


def _core():
    if not _CORE:
        _CORE.append(cd._paddle().base.core)
    return _CORE[0]


def _slot_shape(slots) -> tuple:
    return tuple(len(s) if isinstance(s, (list, tuple)) else (s is None) for s in slots)


def _same_mesh_fast(plan, flat) -> bool:
    """The cached plan's mesh is every input's mesh (same ranks; the key fixes the mesh ndim)."""
    ids = plan.mesh_ids
    for t in flat:
        if t.is_dist() and t.process_mesh.process_ids != ids:
            return False
    return True


def _make_plan(op, slots, attrs, flat, mesh, static) -> Plan:
    dist_ts = [t for t in flat if cd.is_dist(t)]
    for t in dist_ts[1:]:
        other = cd.mesh_of(t)
        if not cd.same_mesh(cd.python_mesh(mesh), other):
            specs = ", ".join(_describe(x) for x in dist_ts)
            raise DispatchError(
                f"{op}: inputs are on different meshes ({cd.describe_mesh(mesh)} and {cd.describe_mesh(other)}; "
                f"inputs {specs}); every input of one op must be on the same mesh -- reshard across meshes first "
                f"(paddle_ext.reshard.reshard(x, mesh, placements))")
    mshape = tuple(int(s) for s in mesh.shape)
    if any(len(t.shape) == 0 for t in dist_ts):
        # a 0-D operand has no dims for a rule's notation (``loss.mean()`` of a scalar loss)
        raise HandBack(f"{op}: a 0-D operand has no dimension to shard; Paddle's own op serves it")
    dynamic = [t for t in dist_ts if any(int(d) < 0 for d in t.shape)]
    if dynamic:
        raise HandBack(f"{op}: {_describe(dynamic[0])} has a dynamic (-1) dimension, which paddle-ext's rules do "
                       f"not size; Paddle's own op serves it")
    if cd.mesh_coord(mesh) is None:
        raise HandBack(f"{op}: this rank ({cd.current_rank()}) is not in {cd.describe_mesh(mesh)}; Paddle's own "
                       f"op serves a rank outside the tensors' mesh")
    specs = []
    for t in flat:
        if cd.is_dist(t):
            specs.append(cd.spec_and_mesh(t)[0])
        else:
            specs.append(DistSpec(tuple(int(s) for s in t.shape), mshape, [Replicate()] * len(mshape)))
    specs = tuple(specs)
    rule = get_rule(op)
    result = _infer(rule, op, _spec_slots(slots, list(specs)), attrs, specs)
    notes = ()
    if static and any(isinstance(p, Partial) for o in result.outputs for p in o.placements):
        result, note = _without_partial_outputs(rule, op, slots, attrs, specs, result)
        notes = (note,)
    if len(result.inputs) != len(flat):
        raise DispatchError(f"{op}: the rule returned {len(result.inputs)} input specs for {len(flat)} tensors; "
                            f"fix the rule so it returns one spec per tensor input")
    if log.isEnabledFor(logging.DEBUG):
        log.debug("%s", result)
    coord = cd.mesh_coord(mesh)
    from ..compat.convert import to_paddle_placements

    out_local = tuple([int(v) for v in o.local_shape(coord)] for o in result.outputs)
    out_paddle = tuple(list(to_paddle_placements(o.placements)) for o in result.outputs)
    out_fast = tuple(_fast_ok(o, coord) for o in result.outputs)
    # keep the Python ProcessMesh: the C++ mesh object a tensor hands out does not own its data,
    # and a plan outlives the tensor it came from (measured: a cached one crashed dtensor_from_local)
    return Plan(op, cd.python_mesh(mesh), specs, result, coord, LocalCtx(result.inputs, result.outputs, coord),
                tuple((r.index, r.dst.placements) for r in result.reshards), out_local, out_paddle, out_fast, notes,
                mesh_ids=list(mesh.process_ids))


def _fast_ok(spec: DistSpec, coord) -> bool:
    """True when Paddle's ``dtensor_from_local`` (local * mesh size on sharded dims) gives the
    true global shape on this rank, i.e. every sharded dim splits evenly."""
    local = list(spec.local_shape(coord))
    for m, p in enumerate(spec.placements):
        if isinstance(p, Shard):
            local[p.dim] *= spec.mesh_shape[m]
    return len(spec.shape) > 0 and tuple(local) == tuple(spec.shape)


def _describe(t) -> str:
    try:
        return str(cd.spec_and_mesh(t)[0])
    except Exception:
        return f"tensor {list(getattr(t, 'shape', []))}"


def _infer(rule, op, spec_slots, attrs, specs):
    try:
        return rule.infer(spec_slots, attrs)
    except ShardingRuleError as exc:
        given = ", ".join(str(s) for s in specs)
        raise DispatchError(
            f"{op}: the rule cannot serve inputs {given} with attributes {attrs}: {exc}; fix: "
            f"{_fix_text(1, 2)}, or register a rule that covers them (register_spmd_rule({op!r}, override=True))"
        ) from None


def _without_partial_outputs(rule, op, slots, attrs, specs, result):
    """to_static: re-infer with the mesh dims that give Partial outputs replicated on the inputs."""
    given = list(specs)
    cur = result
    for _ in range(len(specs[0].mesh_shape) + 1):
        bad = {m for o in cur.outputs for m, p in enumerate(o.placements) if isinstance(p, Partial)}
        if not bad:
            break
        given = [DistSpec(s.shape, s.mesh_shape,
                          [Replicate() if m in bad else p for m, p in enumerate(s.placements)]) for s in given]
        cur = _infer(rule, op, _spec_slots(slots, given), attrs, given)
    else:
        raise DispatchError(f"{op}: inside dist.to_static the rule still claims a Partial output ({cur}); "
                            f"PIR's dtensor_from_local backward is wrong for Partial outputs -- replicate the inputs")
    from ..spmd.result import make_result

    note = f"{op}: to_static replicates mesh dims that would give Partial outputs: {cur}"
    log.info(note)
    return make_result(op, specs, cur.inputs, cur.outputs, cur.rule), note


def _reshard_values(t, mesh, placements):
    """Non-differentiable reshard of dygraph ``t`` with paddle-ext's executor (Paddle's if absent)."""
    from ..compat.convert import to_paddle_placements

    pls = to_paddle_placements(placements)
    try:
        from ..reshard.dygraph import reshard as ext_reshard
    except ImportError:  # the executor is optional: Paddle's own covers the common transitions
        return cd._paddle().distributed.reshard(t, mesh, pls)
    paddle = cd._paddle()
    with paddle.no_grad():
        return ext_reshard(t, cd.python_mesh(mesh), pls, check=False)


_RESHARD: list = []


def _reshard_pylayer():
    if _RESHARD:
        return _RESHARD[0]
    paddle = cd._paddle()

    class DispatchReshard(paddle.autograd.PyLayer):
        """A required input reshard; backward reshards the gradient back to the input's layout."""

        @staticmethod
        def forward(ctx, x, mesh, placements):
            src, src_mesh = cd.spec_and_mesh(x)
            ctx.src, ctx.src_mesh = src, src_mesh
            return _reshard_values(x, mesh, placements)

        @staticmethod
        def backward(ctx, dy):
            have = cd.spec_and_mesh(dy)[0]
            want = [p if not isinstance(p, Partial) else Replicate() for p in ctx.src.placements]
            if tuple(want) != tuple(have.placements):
                dy = _reshard_values(dy, ctx.src_mesh, want)
            return dy

    _RESHARD.append(DispatchReshard)
    return DispatchReshard


def _reshard(t, mesh, placements, static: bool):
    if static:
        return cd.pir_reshard(t, mesh, placements)
    paddle = cd._paddle()
    if t.stop_gradient or not paddle.is_grad_enabled():
        return _reshard_values(t, mesh, placements)
    return _reshard_pylayer().apply(t, mesh, list(placements))


def _as_tuple(out) -> tuple[tuple, bool]:
    if isinstance(out, (tuple, list)):
        return tuple(out), True
    return (out,), False


def _check_local(call: Call, outs_local) -> None:
    _check_local_plan(call.op, call.plan, outs_local)


def _check_local_plan(op: str, plan: Plan, outs_local) -> None:
    if len(outs_local) != len(plan.out_local):
        raise DispatchError(f"{op}: the local function returned {len(outs_local)} tensors but the rule claims "
                            f"{len(plan.out_local)} outputs ({plan.result}); make them agree")
    for k, (o, want) in enumerate(zip(outs_local, plan.out_local)):
        if o.shape != want:
            spec = plan.result.outputs[k]
            raise DispatchError(
                f"{op}: output {k} has local shape {list(o.shape)} on mesh coordinate {list(plan.coord)}, but the "
                f"rule claims {spec} (local {want}); the rule's output shape or placements are wrong for this "
                f"function -- fix the rule (its out shapes) or the function")


def _wrap(plan: Plan, outs) -> list:
    fl = _core().dtensor_from_local
    if len(outs) == 1 and plan.out_fast[0]:
        return [fl(outs[0], plan.mesh, plan.out_paddle[0])]
    res = []
    for o, spec, pls, fast in zip(outs, plan.result.outputs, plan.out_paddle, plan.out_fast):
        res.append(fl(o, plan.mesh, pls) if fast else cd.make_dist(o, plan.mesh, pls, spec.shape))
    return res


# -- dygraph ------------------------------------------------------------------------------------------
_PYLAYER: list = []


def _pylayer():
    if _PYLAYER:
        return _PYLAYER[0]
    paddle = cd._paddle()

    class DispatchFunction(paddle.autograd.PyLayer):
        """Forward: local op on the shards. Backward: local VJP, gradients placed by the GradPlan."""

        @staticmethod
        def forward(ctx, call, *xs):
            plan = call.plan
            need = [(not x.stop_gradient) and cd.is_float(x) for x in xs]
            with paddle.enable_grad():
                lin = []
                for x, n in zip(xs, need):
                    loc = x._local_value()
                    if n:
                        loc = loc.detach()
                        loc.stop_gradient = False
                    lin.append(loc)
                out, multi = _as_tuple(call.run_local(restructure(call.slots, lin), plan.ctx))
            _check_local(call, out)
            diff = tuple(cd.is_float(o) and not o.stop_gradient for o in out)
            call.gplan = plan.grad_plan(diff) if any(need) else None
            wrapped = _wrap(plan, [o.detach() for o in out])
            nondiff = [w for w, d in zip(wrapped, diff) if not d]
            if nondiff:
                ctx.mark_non_differentiable(*nondiff)
            ctx.call, ctx.lin, ctx.need, ctx.out, ctx.diff = call, lin, need, out, diff
            return tuple(wrapped) if multi else wrapped[0]

        @staticmethod
        def backward(ctx, *dys):
            call, gp = ctx.call, ctx.call.gplan
            plan = call.plan
            outs, grads_out = [], []
            for k, dy in enumerate(dys):
                if not ctx.diff[k] or dy is None:
                    continue
                want = gp.output_grads[k]
                if dy.is_dist():
                    have = cd.spec_and_mesh(dy)[0]
                    if have.placements != want.placements:
                        dy = _reshard_values(dy, plan.mesh, want.placements)
                    loc = dy._local_value()
                else:
                    loc = dy
                if gp.output_scale[k] != 1.0:
                    loc = loc * gp.output_scale[k]
                if any(kk == k and plan.coord[m] != 0 for kk, m in gp.partialize):
                    loc = paddle.zeros_like(loc)
                outs.append(ctx.out[k])
                grads_out.append(loc)
            ins = [x for x, n in zip(ctx.lin, ctx.need) if n]
            got = paddle.grad(outs, ins, grads_out, allow_unused=True) if outs and ins else [None] * len(ins)
            result, j = [], 0
            for i, n in enumerate(ctx.need):
                if not n:
                    result.append(None)
                    continue
                g = got[j]
                j += 1
                spec = gp.input_grads[i]
                if g is None:
                    g = paddle.zeros_like(ctx.lin[i])
                result.append(_wrap_grad(plan, g, spec))
            return tuple(result)

    _PYLAYER.append(DispatchFunction)
    return DispatchFunction


def _wrap_grad(plan: Plan, g, spec: DistSpec):
    if _fast_ok(spec, plan.coord):
        from ..compat.convert import to_paddle_placements

        return cd._paddle().base.core.dtensor_from_local(g, plan.mesh, to_paddle_placements(spec.placements))
    return cd.make_dist(g, plan.mesh, spec.placements, spec.shape)


def _run_dygraph(call: Call, flat: list):
    paddle = cd._paddle()
    if all(x.stop_gradient for x in flat) or not paddle.is_grad_enabled():
        lin = [x._local_value() for x in flat]
        slots = call.slots
        local = lin if len(slots) == len(lin) and not any(isinstance(v, (list, tuple)) or v is None for v in slots) \
            else restructure(slots, lin)
        return _wrap_checked(call.op, call.plan, call.run_local(local, call.plan.ctx))
    if NATIVE_AUTOGRAD and call.plan.native_hints() is not None:
        return _run_native(call.plan, call.op, call.slots, flat, call.run_local)
    return _pylayer().apply(call, *flat)


# -- to_static (PIR) ------------------------------------------------------------------------------------
def _run_static(call: Call, flat: list):
    plan = call.plan
    res = plan.result
    gp = plan.grad_plan(tuple([True] * len(res.outputs)))
    if gp.partialize:
        raise DispatchError(
            f"{call.op}: inside dist.to_static an op whose replicated input feeds both split and replicated "
            f"outputs ({res}) has no gradient hint in PIR; reshard the input to Shard first or call the op in dygraph")
    mesh = cd.python_mesh(plan.mesh)
    lin = [cd.static_to_local(x, mesh, g.placements) for x, g in zip(flat, gp.input_grads)]
    out, multi = _as_tuple(call.run_local(restructure(call.slots, lin), plan.ctx))
    if len(out) != len(res.outputs):
        raise DispatchError(f"{call.op}: the local function returned {len(out)} tensors but the rule claims "
                            f"{len(res.outputs)} outputs ({res})")
    wrapped = [cd.static_from_local(o, mesh, spec.placements, spec.shape) for o, spec in zip(out, res.outputs)]
    return tuple(wrapped) if multi else wrapped[0]


def explain_call(op: str, specs: Sequence[DistSpec], attrs: dict | None = None) -> str:
    """What dispatch would do for these input specs (pure: no Paddle tensors needed)."""
    rule = get_rule(op)
    res = rule.infer(list(specs), attrs or {})
    plan = grad_plan(res.inputs, res.outputs, None, op)
    lines = [str(res)] + [f"  reshard {r}" for r in res.reshards] + [f"  {plan}"]
    return "\n".join(lines)


__all__ = ["Call", "DispatchError", "HandBack", "LocalCtx", "dispatch", "explain_call", "get_rule", "has_dist",
           "format_placements"]
