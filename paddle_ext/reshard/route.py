"""Where a dygraph ``dist.reshard`` runs: paddle-ext's plan, Paddle's own reshard, or locally.

:func:`route` makes the whole decision, once per request (the fast path caches its outcome per
plan key, :mod:`.fast`), after converting and validating the request once (:func:`request`).
The rule above all: a program that runs on Paddle alone runs the same way, with the same values,
after ``paddle_ext.install()``. So paddle-ext only takes a reshard it runs at least as well as
Paddle does on the backend the call runs on (docs/backends.md):

* **a pure mesh reshape** (:func:`pure_mesh_reshape`: same ranks, another mesh shape, every rank
  keeping its slice) in any process state: done locally by paddle-ext's relabel
  (``compat.ports.mesh_reshape``), no communication, before anything below.
* **no parallel environment** (``dist.init_parallel_env()`` not called): Paddle's reshard
  creates its communicators lazily, paddle-ext's executor needs a process group, and creating
  one would change the user's process state (``dist.is_initialized()``, group ids, a second
  rendezvous on the job's store). So every reshard goes to Paddle, with one log line. The one
  exception is a job of one process on meshes of rank 0 alone: no communication is needed
  there and paddle-ext's executor runs without any group. A reshard between two meshes, which
  Paddle's CPU wheel cannot survive (``compat.ports.cpu_wheel``), is refused with a named error
  instead of a SIGSEGV.
* **GLOO**: paddle-ext's executor, except what :func:`native_is_exact` says Paddle does exactly
  and as cheaply (and not on a 1-D mesh where paddle-ext's own collectives are faster).
* **NCCL**: Paddle's native reshard, except the cases in :data:`NCCL_KEPT` (:func:`nccl_keeps`).
* **any other backend** (XCCL, BKCL, a custom device): Paddle, with one log line.

Paddle's own reshard is :func:`original_reshard` (kept in :data:`SAVED` while paddle-ext's is
installed); :data:`NATIVE_LISTENERS` hear of every reshard left to it. Reshards on part of the
world run on the groups of :func:`prepare_reshard_groups`.

>>> from paddle_ext.placements import DistSpec
>>> native_is_exact(DistSpec((4, 6), (2,), "[P(sum)]"), DistSpec((4, 6), (2,), "[R]"))
True
>>> native_is_exact(DistSpec((4, 6), (2,), "[P(sum)]"), DistSpec((4, 6), (2,), "[S(0)]"))
False
>>> native_is_exact(DistSpec((5, 6), (2,), "[S(0)]"), DistSpec((5, 6), (2,), "[R]"))   # uneven
False
"""
from __future__ import annotations

import numpy as np

from ..compat.ports.backend import GLOO, NCCL, backend_of, note_once, route_unknown
from ..compat.ports.convert import from_paddle_placements, mesh_shape, pad_placements
from ..compat.ports.cpu_wheel import cross_mesh_reshard_crashes
from ..compat.version import require_paddle
from ..errors import ConversionError, PlacementError, ReshardPlanError
from ..placements import DistSpec, Partial, Replicate, Shard
from .layout import coord_in

SAVED: dict = {}   # "dist" / "api": Paddle's functions, while paddle-ext's are installed
NATIVE_LISTENERS: list = []  # callables (src_spec, dst_spec, itemsize) told of reshards left to Paddle
GROUPS: dict[tuple, object] = {}   # prepared groups by their sorted ranks (prepare_reshard_groups)

#: the reshards paddle-ext keeps on NCCL, each with the reason (what Paddle gets wrong or cannot do)
NCCL_KEPT = {
    "partial-target-op": "a Partial(avg|max|min) target: Paddle's reshard sets only the partial dims, so "
                         "the result is reported as Partial(sum) (avg) or has no function (max/min)",
    "partial-source-op": "a Partial(avg|max|min) source other than to Replicate on a 1-D mesh: Paddle has "
                         "no function (P(avg)->S, P(avg)->P) or sums where it should average (P(avg) on "
                         "an N-D mesh)",
    "r-to-p-off-rank-0": "R -> P(sum) on a mesh whose first rank is not global rank 0: Paddle keeps the "
                         "value on global rank 0, so every rank of such a mesh would hold zeros",
    "s-to-p": "S -> P: Paddle has no direct function on N-D meshes and gathers the whole tensor on 1-D; "
              "paddle-ext pads the local shard with the reduction's neutral value (0 bytes)",
    "uneven": "an uneven or empty shard, or a co-shard: Paddle reshapes evenly (wrong shape error), "
              "segfaults on an empty local shard, or aborts gloo/nccl on uneven N-D gathers",
    "cross-mesh": "meshes that differ in ranks or shape with a change of placements: Paddle has no "
                  "function ('Can not reshard') or crashes in SameStatusReshardFunction",
}


def original_reshard():
    """Paddle's own ``dist.reshard`` (even while paddle-ext's is installed)."""
    return SAVED.get("dist") or require_paddle("paddle_ext.reshard").distributed.reshard


# -- groups ---------------------------------------------------------------------------------
# Paddle's gloo point-to-point matches messages by a per-group sequence number, so a group's
# messages only line up when all its members make the same calls: the executor walks its exchange
# rounds in lockstep over a group. Without a group of its own a reshard uses the world group and
# every rank takes part; with one, only the mesh's ranks do (a pipeline stage can reshard while
# another stage computes).

def _rank_sets(mesh) -> list[tuple]:
    ids = np.array(list(mesh.process_ids)).reshape(list(mesh.shape))
    sets = [tuple(sorted(ids.reshape(-1).tolist()))]
    for dim in range(ids.ndim):
        lines = np.moveaxis(ids, dim, -1).reshape(-1, ids.shape[dim])
        sets.extend(tuple(sorted(line.tolist())) for line in lines)
    seen, out = set(), []
    for s in sets:
        if len(s) > 1 and s not in seen:
            seen.add(s)
            out.append(s)
    return out


def prepare_reshard_groups(mesh) -> int:
    """Create a group for the whole mesh and for every line along each of its dims, so that
    reshards on them involve only their ranks. Collective: call it on every rank with the same
    meshes in the same order, before training (Paddle numbers groups by a running counter).
    Returns how many groups were created."""
    paddle = require_paddle("paddle_ext.reshard.prepare_reshard_groups")
    dist = paddle.distributed
    world = dist.get_world_size()
    created = 0
    for ranks in _rank_sets(mesh):
        if ranks in GROUPS or len(ranks) == world:
            continue
        GROUPS[ranks] = dist.new_group(list(ranks))
        dist.barrier()  # gloo: groups of different members built back to back fail to connect
        created += 1
    return created


def group_for(ranks) -> object | None:
    """The prepared group whose members are exactly ``ranks`` (None: use the world group)."""
    return GROUPS.get(tuple(sorted(ranks)))


# -- the request ----------------------------------------------------------------------------

def placements_of(x) -> tuple:
    """paddle-ext placements of DistTensor ``x`` (co-shard included; see compat.ports.convert)."""
    return from_paddle_placements(x.placements)


def describe(x) -> str:
    name = getattr(x, "name", None) or "tensor"
    return f"{name} {list(x.shape)} {str(x.dtype).replace('paddle.', '')}"


def _usable(paddle, x, mesh) -> bool:
    return isinstance(x, paddle.Tensor) and x.is_dist() and hasattr(mesh, "process_ids") and hasattr(mesh, "shape")


def _convert(x, mesh, placements):
    """(src, dst) specs; raises the converter's PlacementError / ConversionError as they are."""
    src_pl = pad_placements(placements_of(x), len(mesh_shape(x.process_mesh)))
    dst_pl = from_paddle_placements(list(placements), len(mesh_shape(mesh)))
    return DistSpec(tuple(x.shape), mesh_shape(x.process_mesh), src_pl), DistSpec(tuple(x.shape), mesh_shape(mesh), dst_pl)


def _checked(paddle, x, mesh, placements, specs):
    """``(src, dst, src ranks, dst ranks)`` of a usable request, or the named error."""
    if isinstance(specs, Exception):
        raise ReshardPlanError(
            f"reshard of {describe(x)} to {list(placements)} on mesh {list(mesh_shape(mesh))}: {specs}") from None
    world = paddle.distributed.get_world_size()
    s_ranks, d_ranks = tuple(x.process_mesh.process_ids), tuple(mesh.process_ids)
    outside = [r for r in s_ranks + d_ranks if not 0 <= r < world]
    if outside:
        raise ReshardPlanError(
            f"reshard of {describe(x)}: mesh ranks {sorted(set(outside))} are not in this job of "
            f"{world} ranks; build the ProcessMesh from ranks 0..{world - 1}")
    return specs + (s_ranks, d_ranks)


def request(paddle, x, mesh, placements):
    """The request as ``(src spec, dst spec, src ranks, dst ranks)``, validated without any
    communication; :class:`ReshardPlanError` (saying what would work) when it is not valid."""
    if not isinstance(x, paddle.Tensor) or not x.is_dist():
        raise ReshardPlanError(
            f"reshard needs a DistTensor, got {type(x).__name__} {list(getattr(x, 'shape', []))}; "
            f"create one with paddle.distributed.shard_tensor(x, mesh, placements)")
    if not (hasattr(mesh, "process_ids") and hasattr(mesh, "shape")):
        raise ReshardPlanError(f"reshard of {describe(x)}: mesh must be a ProcessMesh, got {mesh!r}")
    try:
        specs = _convert(x, mesh, placements)
    except (PlacementError, ConversionError) as exc:
        specs = exc
    return _checked(paddle, x, mesh, placements, specs)


# -- the decision ---------------------------------------------------------------------------

def route(paddle, x, mesh, placements, installed: bool = False):
    """Where this call runs, decided before any data moves, with every named error raised.

    Returns ``(kind, specs)``: ``"reshape"`` (a pure mesh reshape, local), ``"paddle"`` (Paddle's
    own reshard exactly as without paddle-ext; ``specs`` None), ``"nccl"`` (Paddle's, NCCL),
    ``"native"`` (Paddle's, exact here, after the request check) or ``"ext"`` (paddle-ext's plan);
    ``specs`` is :func:`request`'s ``(src, dst, src ranks, dst ranks)``, converted once. With
    ``installed`` (``dist.reshard`` after ``install()``), a request paddle-ext cannot express
    (e.g. a split_factor shard) goes to Paddle instead of raising.
    """
    if not _usable(paddle, x, mesh):
        request(paddle, x, mesh, placements)   # raises the named error
    try:
        specs = _convert(x, mesh, placements)
    except (PlacementError, ConversionError) as exc:
        if installed and isinstance(exc, ConversionError):
            return "paddle", None
        specs = exc
    sm = x.process_mesh
    if sm.process_ids == mesh.process_ids and sm.shape != mesh.shape:
        full = _checked(paddle, x, mesh, placements, specs)
        if pure_mesh_reshape(*full):
            return "reshape", full   # no data moves: local, in every process state
    backend = call_backend(paddle, x, mesh)
    if to_paddle_first(paddle, x, mesh, backend):
        return "paddle", None
    src, dst, s_ranks, d_ranks = full = _checked(paddle, x, mesh, placements, specs)
    if backend == NCCL and not nccl_keeps(src, dst, s_ranks, d_ranks):
        return "nccl", full
    # Paddle's own path is exact and moves the same bytes here (its backward, like paddle-ext's,
    # gives a Partial source a Replicate gradient). A call that needs a gradient runs there: its
    # grad node is Paddle's C++ one, cheaper than a PyLayer (the demo's tp2 step: 1.19-1.26x
    # Paddle alone with paddle-ext's P -> R in a PyLayer, 0.99x with Paddle's; tools/bench_step.py).
    # Without a gradient, on a 1-D mesh that is the whole job or a prepared group, paddle-ext's
    # executor is faster (it gathers / reduces straight into the output: tools/bench_reshard.py).
    differentiable = not x.stop_gradient and paddle.is_grad_enabled()
    if s_ranks == d_ranks and native_is_exact(src, dst) \
            and (differentiable or not _own_fast_path(paddle, src, s_ranks)):
        return "native", full
    return "ext", full


def world_backend(dist) -> str | None:
    """The world group's backend, upper-cased (None before ``init_parallel_env()``): what
    ``compat.ports.backend.backend_of(None)`` answers, from Paddle's public API, asked on a
    first call only (the fast path keys on it)."""
    if not dist.is_initialized():
        return None
    try:
        name = dist.get_backend()
    except (RuntimeError, AttributeError):  # a world without a process group
        return None
    return str(name).upper() if name else None


def call_backend(paddle, x, mesh) -> str | None:
    """The backend of the group the reshard runs on (the world's when this rank is not in it)."""
    members = sorted(set(x.process_mesh.process_ids) | set(mesh.process_ids))
    group = group_for(members)
    world = world_backend(paddle.distributed)
    return (backend_of(group) or world) if group is not None else world


def to_paddle_first(paddle, x, mesh, backend: str | None) -> str | None:
    """Before paddle-ext looks at the request: why Paddle should run it, or None.

    Decided from the job alone (every rank of a reshard answers alike): no parallel environment,
    or a backend paddle-ext does not know. ``backend`` is :func:`call_backend`'s answer."""
    dist = paddle.distributed
    if not dist.is_initialized():
        ranks = set(x.process_mesh.process_ids) | set(mesh.process_ids)
        if dist.get_world_size() == 1 and ranks <= {0}:
            return None  # one process: paddle-ext's plan needs no communication at all
        if _cross_mesh(x, mesh) and cross_mesh_reshard_crashes():
            raise ReshardPlanError(
                f"dist.reshard from mesh {list(x.process_mesh.process_ids)} (shape {list(x.process_mesh.shape)}) to mesh "
                f"{list(mesh.process_ids)} (shape {list(mesh.shape)}), a move that is not a pure mesh reshape, without "
                "dist.init_parallel_env(): Paddle's own cross-mesh reshard, the only one that can run without a "
                "process group, dies with SIGSEGV on this CPU wheel (GetDefaultPlace with no custom device); "
                "call dist.init_parallel_env() first and paddle-ext's executor moves the data, or "
                "paddle_ext.install(pipeline_by_annotation=True), after which Paddle's own cross-mesh reshard runs")
        note_no_parallel_env()
        return "no-parallel-env"
    if backend not in (None, GLOO, NCCL) and route_unknown(backend, "dygraph reshards"):
        return f"backend {backend}"
    return None


def note_no_parallel_env() -> None:
    """The one log line (per process) of a reshard handed to Paddle for want of a process group."""
    note_once("no-parallel-env",
              "the parallel environment is not initialized (no dist.init_parallel_env()), so paddle-ext "
              "has no process group to run on; dist.reshard goes to Paddle's own reshard, which creates its "
              "communicators itself (call dist.init_parallel_env() to use paddle-ext's executor)")


def meshes_differ(src_ranks, src_shape, dst_ranks, dst_shape) -> bool:
    """The two meshes differ in ranks (or their order) or shape: Paddle's cross-mesh path."""
    return tuple(src_ranks) != tuple(dst_ranks) or tuple(src_shape) != tuple(dst_shape)


def _cross_mesh(x, mesh) -> bool:
    src = x.process_mesh
    return meshes_differ(src.process_ids, src.shape, mesh.process_ids, mesh.shape)


def _own_fast_path(paddle, src: DistSpec, ranks) -> bool:
    """A 1-D mesh whose ranks form the job's world or a prepared group: paddle-ext's collectives
    then run over exactly the mesh's ranks, as Paddle's do, and write into the output in place."""
    if len(src.mesh_shape) != 1 or len(ranks) < 2 or len(ranks) % 2:  # odd: gloo p2p lockstep
        return False
    return sorted(ranks) == list(range(paddle.distributed.get_world_size())) or group_for(ranks) is not None


def nccl_keeps(src: DistSpec, dst: DistSpec, s_ranks, d_ranks) -> str | None:
    """The :data:`NCCL_KEPT` key when paddle-ext keeps this reshard on NCCL, else None (Paddle)."""
    if not (even(src) and even(dst)) or any(n == 0 for n in src.shape):
        return "uneven"
    if meshes_differ(s_ranks, src.mesh_shape, d_ranks, dst.mesh_shape):
        return None if src.placements == dst.placements and not _non_sum(src) else "cross-mesh"
    for a, b in zip(src.placements, dst.placements):
        if isinstance(b, Partial) and b.op != "sum":
            return "partial-target-op"
        if isinstance(a, Partial) and a.op != "sum" and a != b:
            if not (isinstance(b, Replicate) and len(src.mesh_shape) == 1):
                return "partial-source-op"
        if isinstance(a, Shard) and isinstance(b, Partial):
            return "s-to-p"
        if isinstance(a, Replicate) and isinstance(b, Partial) and s_ranks[0] != 0:
            return "r-to-p-off-rank-0"
    return None


def pure_mesh_reshape(src: DistSpec, dst: DistSpec, s_ranks, d_ranks) -> bool:
    """The same ranks in the same order on a mesh of another shape, no Partial on either side, and
    every rank holding the same slice of the tensor before and after: a change of mesh that moves
    no data (done locally by :mod:`paddle_ext.compat.ports.mesh_reshape`)."""
    if tuple(s_ranks) != tuple(d_ranks) or tuple(src.mesh_shape) == tuple(dst.mesh_shape):
        return False
    if any(isinstance(p, Partial) for p in tuple(src.placements) + tuple(dst.placements)):
        return False
    return all(src.local_slices(coord_in(s_ranks, src.mesh_shape, r))
               == dst.local_slices(coord_in(d_ranks, dst.mesh_shape, r)) for r in s_ranks)


def _non_sum(spec: DistSpec) -> bool:
    return any(isinstance(p, Partial) and p.op != "sum" for p in spec.placements)


# -- where Paddle's own reshard is exact and as cheap ------------------------------------------
# Measured on Paddle 3.3.1 CPU/gloo (docs/reshard_matrix.md, ``paddle-ext reshard-matrix``): per
# mesh dim, R -> S(d), S(d) -> R, R -> P(sum) and P(sum) -> R are exact for evenly divided shapes on
# one mesh and move the same bytes as paddle-ext's plan (a local slice, an all-gather, nothing, an
# all-reduce), with the collectives of the mesh's own process group. Everything else (S(i) -> S(j),
# P -> S, S -> P, other reduce ops, co-shard, uneven or empty shards, cross-mesh) is paddle-ext's.

def even(spec: DistSpec) -> bool:
    """Every sharded dim divides evenly over its one mesh dim (no co-shard)."""
    for d in range(spec.ndim):
        mesh_dims = spec.shard_mesh_dims(d)
        if len(mesh_dims) > 1:
            return False  # co-shard
        if mesh_dims and spec.shape[d] % spec.mesh_shape[mesh_dims[0]]:
            return False
    return True


def _step_ok(src, dst) -> bool:
    if src == dst:
        return not isinstance(src, Partial) or src.op == "sum"
    if isinstance(src, Replicate):
        return isinstance(dst, Shard) or dst == Partial("sum")
    if isinstance(dst, Replicate):
        return isinstance(src, Shard) or src == Partial("sum")
    return False


def native_is_exact(src: DistSpec, dst: DistSpec, same_mesh: bool = True) -> bool:
    """True if Paddle's reshard is exact and no more costly for ``src -> dst`` on one mesh."""
    if not same_mesh or src.mesh_shape != dst.mesh_shape or src.shape != dst.shape:
        return False
    if not (even(src) and even(dst)):
        return False
    return all(_step_ok(a, b) for a, b in zip(src.placements, dst.placements))


__all__ = ["GLOO", "NATIVE_LISTENERS", "NCCL", "NCCL_KEPT", "SAVED", "call_backend", "group_for",
           "native_is_exact", "nccl_keeps", "original_reshard", "placements_of", "prepare_reshard_groups",
           "pure_mesh_reshape", "request", "route", "to_paddle_first"]
