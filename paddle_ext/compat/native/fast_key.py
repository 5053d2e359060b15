"""The dispatch fast path's cache key, read in C++ straight from the DistTensors.

A dispatched call finds its cached plan by op, attributes, and per input the global shape,
placements and mesh. Reading those through Paddle's Python getters costs ~28 us per
two-input call next to a small op (each getter builds Python objects; measured on add [8,1024]
against a native add of ~40 us). ``fast_key(slots)`` reads the same facts from each
``phi::distributed::DistTensor`` in one call (~5 us next to the op) and returns

* ``(key, no_grad)``: ``key`` is a ``bytes`` holding the first input's mesh (shape, process ids,
  dim names) and per input its global dims and placements (kind, shard dim, split factor,
  co-shard order, reduce type), so equal keys mean equal shapes, placements and meshes; ``no_grad``
  is True when no input requires grad;
* ``None`` when a slot is not a DistTensor (None, a list, a dense tensor) or the inputs are on
  different meshes: the general path then runs (and names the problem).

``plan_of(plans, op, attrs, slots)`` (:data:`PLAN_OF`) is that key and the dispatcher's dict
lookup in one call; a step between two of Paddle's calls costs 3-4 times its own time on this
VM, so one call instead of a Python function, a tuple of the attributes and a key tuple.

``route(op, slots, attrs, run_local)`` (:data:`ROUTE`) is the dispatcher's entry in one call
(:func:`paddle_ext.dispatch.core.dispatch`): in dygraph, grad on, an input that requires grad, a
cached plan whose differentiable calls run Paddle's own op (``plan.by_paddle is True``), no route
switch set and no audit active, it returns ``run_local(slots, None)``; every other call goes to
the dispatcher's Python decision with ``plan_of``'s answer. It reads the dygraph tracer and the
grad switch through Paddle's own C++ functions, and serves only after :func:`route_agrees` has
checked those readings against Paddle's Python ones and the dispatcher has bound its state
(:func:`bind_route`). Between two of Paddle's ops, the Python steps it replaces (the runtime, the
tracer, the grad test, the route switch, a tuple per call) cost 0.2-1.6 us each. The route keeps a
memo of the plan cache's answers keyed by the layout, the op's name and the attributes' values
(None, bool, int, float, str, tuples of those; other calls ask the dict), filled only from the
dict's answers and emptied by :func:`forget_plans` whenever the dict drops plans: a repeated call
makes no key objects (the layout's bytes, two tuples), about 0.7 us less next to a small op.

``reshard_key(x, mesh, placements)`` (:data:`RESHARD_KEY`) is the reshard fast path's request key
(:mod:`paddle_ext.reshard.fast`): ``bytes`` of the DistTensor's mesh (shape and process ids),
global dims, dtype and placements, the target mesh's shape and process ids, the target placements
and ``x.stop_gradient``, in one call of ~0.7 us (the same facts as a tuple cost ~1 us to read and
~1 us to hash: a Paddle placement's hash formats its string); ``None`` when the target is not a
ProcessMesh with Shard/Partial/Replicate placements, ``TypeError`` for a non-DistTensor. The target
objects are read from pybind11's instance record (the wheel's type registry is not shared with this
module), for the classes :func:`_load` registers, and only after :func:`target_key_agrees` has
checked the reading against Python's on known meshes and placements.

The same library holds what is not a key (:data:`GLOO_NATIVE`): the reshard fast path's
one-collective runners on gloo as single native calls on the group's gloo communicator (an
all_gather into the output; an all_reduce out of place; an all_gather and the copy of this rank's
block), so that no Paddle op runs between two collectives: on this VM such an op costs several
times its own time.

The C++ source is ``paddle_ext/csrc/fast_key.cc`` and ``fast_route.cc``, joined into one unit. It is
built with Paddle's ``cpp_extension`` against the installed Paddle's headers, only on the Paddle versions :mod:`~paddle_ext.compat.version`
names (:mod:`paddle_ext.compat.native.cpp_build`; first use ~25 s, then cached).
:func:`start` loads it when built and otherwise starts a detached builder process, so the first
calls use the Python key and nothing waits.
Without a compiler, or with ``PADDLE_EXT_FAST_KEY=0``, the Python key serves every call;
:func:`status` says which and why (``paddle-ext doctor`` prints it).
"""
from __future__ import annotations

import logging
import os
import struct
import threading

from ...errors import CompatError
from . import cpp_build  # module attributes, looked up per call (tests replace build_and_load)
from ..version import paddle_version, require_paddle, version_status

logger = logging.getLogger("paddle_ext.dispatch")

KEY: list = [None]        # the compiled ``fast_key`` once loaded; the dispatcher reads KEY[0] per call
#: the compiled ``plan_of(plans, op, attrs, slots)`` once loaded: the dispatcher's key and its lookup in one
#: call, ``(plans.get((op, tuple(attrs.items()), layout)), layout, no_grad)``, None without a key
PLAN_OF: list = [None]
#: the compiled ``route(op, slots, attrs, run_local)`` once loaded, checked (:func:`route_agrees`) and bound
#: (:func:`bind_route`); None meanwhile (the dispatcher decides every call in Python)
ROUTE: list = [None]
#: the compiled ``grad_state()`` once loaded and checked (:func:`route_agrees`): None outside dygraph, else
#: whether grad is on (``paddle.in_dynamic_mode()`` and ``core._has_grad()`` in one plain call; the
#: reshard fast path's hand-back reads it per call)
GRAD_STATE: list = [None]
#: the compiled ``reshard_key(x, mesh, placements) -> bytes | None`` once loaded and checked (TypeError
#: for a non-DistTensor); the reshard fast path reads RESHARD_KEY[0] per call and builds its Python key
#: while it is None (or it answers None)
RESHARD_KEY: list = [None]
#: the compiled ``same_mesh(x, mesh) -> bool | None`` once loaded and checked (like RESHARD_KEY): ``x`` a
#: DistTensor on a mesh equal to ``mesh`` (Paddle's compare), None when ``mesh`` is not a ProcessMesh
SAME_MESH: list = [None]
#: the compiled module once loaded, for the reshard fast path's one-call gloo runners on CPU:
#: ``all_gather_into(local, out, ring)`` (S(0) -> R), ``all_reduce_into(local, out, ring, op)`` (P -> R;
#: phi's ReduceType: 0 sum, 1 max, 2 min), ``gather_take(local, out, ring, gathered, dim, block)`` (small
#: S(0) -> S(dim): an all_gather, then the copy of this rank's block) and ``sole_owner(t)`` (no other
#: tensor shares ``t``'s memory: the runner may write its next result there); None meanwhile (the
#: runners call Paddle's collectives then)
GLOO_NATIVE: list = [None]
NATIVE_FUNCTIONS = ("all_gather_into", "all_reduce_into", "gather_take", "sole_owner", "free_slot")
_STATE = {"status": "not started"}
_LOCK = threading.Lock()


def status() -> str:
    """``not started`` | ``off (PADDLE_EXT_FAST_KEY=0)`` | ``building`` | ``ready`` |
    ``unavailable: <reason>`` (the Python key serves the calls in every state but ``ready``)."""
    return _STATE["status"]


def is_built() -> bool:

    return cpp_build.is_built("fast_key")


def start(wait: bool = False) -> str:
    """Make the compiled key available and return :func:`status`.

    Built already: loaded now. Not built: a detached builder process builds it (it outlives this
    process if need be) and a background thread loads it when it is done, so the calls
    meanwhile use the Python key (``wait=True``: wait for it here). Idempotent;
    ``PADDLE_EXT_FAST_KEY=0`` turns it off."""
    with _LOCK:
        if _STATE["status"] == "not started":
            if os.environ.get("PADDLE_EXT_FAST_KEY", "1") == "0":
                _STATE["status"] = "off (PADDLE_EXT_FAST_KEY=0)"
            elif not _known_paddle():
                pass
            elif wait or is_built():
                _STATE["status"] = "building"
                _load()
            else:
                _STATE["status"] = "building"
                _STATE["thread"] = threading.Thread(target=_build_then_load, name="paddle-ext-fast-key",
                                                    daemon=True)
                _STATE["thread"].start()
    thread = _STATE.get("thread")
    if wait and thread is not None:
        thread.join()
    return status()


def _known_paddle() -> bool:
    """The key reads DistTensor's C++ layout: only on the Paddle versions :mod:`~paddle_ext.compat.version` names."""

    known, why = version_status(paddle_version())
    if not known:
        _unavailable(why)
    return known


def _unavailable(why) -> None:
    _STATE["status"] = f"unavailable: {why}"
    logger.warning("paddle-ext dispatch keeps its Python cache key: %s", why)


def _build_then_load() -> None:

    try:
        cpp_build.wait_build("fast_key", *cpp_build.start_build("fast_key"))
    except OSError as exc:
        _unavailable(f"cannot start its build ({exc}); set PADDLE_EXT_CACHE to a writable directory")
        return
    except CompatError as exc:
        _unavailable(exc)
        return
    _load()


def _load() -> None:

    try:
        module = cpp_build.build_and_load("fast_key")
    except CompatError as exc:
        _unavailable(exc)
        return
    _STATE["fn"] = module.fast_key
    _STATE["plan_of"] = module.plan_of
    _STATE["reshard_fn"] = module.reshard_key if _target_types(module) else None
    GLOO_NATIVE[0] = module if all(hasattr(module, f) for f in NATIVE_FUNCTIONS) else None
    _STATE["same_mesh_fn"] = module.same_mesh if _STATE["reshard_fn"] is not None else None
    _STATE["route_module"] = module if _route_checked(module) else None
    _STATE["grad_state"] = module.grad_state if _STATE["route_module"] is not None else None
    _bind(module)
    if not _STATE.get("python_key"):
        KEY[0] = module.fast_key
        PLAN_OF[0] = module.plan_of
        RESHARD_KEY[0] = _STATE["reshard_fn"]
        SAME_MESH[0] = _STATE["same_mesh_fn"]
        GRAD_STATE[0] = _STATE["grad_state"]
    _STATE["status"] = "ready"


def _checked(check, disagrees: str, otherwise: str) -> bool:
    """``check()`` (does a compiled reading agree with Paddle's Python?); on False or an error from
    another Paddle layout, a warning that says what serves instead (``otherwise``) and why."""
    try:
        ok = check()
    except (AttributeError, TypeError, ValueError, RuntimeError) as exc:   # another Paddle layout
        ok, why = False, exc
    else:
        why = disagrees
    if not ok:
        logger.warning("%s: %s", otherwise, why)
    return ok


def _target_types(module) -> bool:
    """Register Paddle's target classes with ``module`` and check its reading of them."""
    def check():
        core = require_paddle("paddle_ext reshard key").base.core
        module.set_target_types(core.ProcessMesh, core.Shard, core.Partial, core.Replicate)
        return target_key_agrees(module, core)

    return _checked(check, "the C++ reading of ProcessMesh and placements disagrees with Paddle's getters",
                    "paddle-ext reshard fast path keeps its Python key")


def bind_route(plans: dict, routes, all_routes, audits: list, decide) -> None:
    """The dispatcher's state for :data:`ROUTE`: its plan cache, its route switch (a ContextVar) and
    that switch's default, the list of active audits, and ``decide(op, slots, attrs, run_local,
    found)``, its Python decision for every call the route does not run. Bound once, at import of
    :mod:`paddle_ext.dispatch.core`; the route serves from then on (when loaded and checked)."""
    _STATE["route_state"] = (plans, routes, all_routes, audits, decide)
    _bind(_STATE.get("route_module"))


def forget_plans() -> None:
    """The dispatcher's plan cache dropped plans: the compiled route empties its memo of the
    cache's answers (a memo hit must be a plan the cache holds)."""
    module = _STATE.get("route_module")
    if module is not None:
        module.forget_plans()


def _bind(module) -> None:
    state = _STATE.get("route_state")
    if module is None or state is None:
        return
    module.set_route_state(*state)
    _STATE["route"] = module.route
    if not _STATE.get("python_key"):
        ROUTE[0] = module.route


def _route_checked(module) -> bool:
    return _checked(lambda: route_agrees(module, require_paddle("paddle_ext dispatch route")),
                    "the C++ reading of the dygraph tracer or the grad switch disagrees with Paddle's",
                    "paddle-ext dispatch decides every route in Python")


def route_agrees(module, paddle) -> bool:
    """``module.grad_state()`` -- None outside dygraph, else whether grad is on, read through
    Paddle's C++ functions -- says what Paddle's Python says, with grad on and under
    ``paddle.no_grad()`` (in this thread: both are per thread). Outside dygraph the route finds no
    tracer and gives the call to the Python decision, so a misread there could only send a call to
    the Python path."""
    core = paddle.base.core

    def agrees():
        return module.grad_state() == (bool(core._has_grad()) if paddle.in_dynamic_mode() else None)

    now = agrees()
    with paddle.no_grad():
        off = agrees()
    with paddle.enable_grad():
        on = agrees()
    return now and off and on and agrees()


def target_key_agrees(module, core) -> bool:
    """``module.target_key`` reads what Paddle's own getters read, on a 2-D mesh with a shard, a max
    partial and a replicate, and refuses an uninitialized mesh and a non-placement."""
    mesh = core.ProcessMesh([2, 3], [5, 4, 3, 2, 1, 0], ["a", "b"])
    shard, partial = core.Shard(1), core.Partial(core.ReduceType.kRedMax)
    shard.set_split_factor(2)
    pls = [shard, partial, core.Replicate()]
    want = [len(mesh.shape), *mesh.shape, len(mesh.process_ids), *mesh.process_ids, len(pls),
            3, shard.get_dim(), shard.get_split_factor(), shard.get_co_shard_order(),
            2, int(partial.reduce_type()), 1]
    return (module.target_key(mesh, pls) == struct.pack(f"{len(want)}q", *want)
            and module.target_key(core.ProcessMesh.__new__(core.ProcessMesh), pls) is None
            and module.target_key(mesh, [1]) is None and module.target_key(mesh, "S") is None)


def use(compiled: bool) -> None:
    """Tests and benchmarks: ``use(False)`` makes the dispatcher and the reshard fast path take
    their Python keys, ``use(True)`` the compiled ones (built now if needed)."""
    _STATE["python_key"] = not compiled
    if not compiled:
        KEY[0] = PLAN_OF[0] = RESHARD_KEY[0] = SAME_MESH[0] = ROUTE[0] = GRAD_STATE[0] = None
        return
    start(wait=True)
    KEY[0] = _STATE.get("fn")
    PLAN_OF[0] = _STATE.get("plan_of")
    RESHARD_KEY[0] = _STATE.get("reshard_fn")
    SAME_MESH[0] = _STATE.get("same_mesh_fn")
    ROUTE[0] = _STATE.get("route")
    GRAD_STATE[0] = _STATE.get("grad_state")
    if KEY[0] is None:
        raise CompatError(f"paddle-ext's compiled dispatch key is not available: {status()}")
