"""Which reshards paddle-ext runs and which it hands back to Paddle's own ``dist.reshard``.

The rule above all: a program that runs on Paddle alone runs the same way, with the same values,
after ``paddle_ext.install()``. So paddle-ext only takes a reshard it runs at least as well as
Paddle does on the backend the call runs on (``compat.ports.backend.backend_of``; docs/backends.md):

* **no parallel environment** (``dist.init_parallel_env()`` not called): Paddle's reshard
  creates its communicators lazily, paddle-ext's executor needs a process group, and creating
  one would change the user's process state (``dist.is_initialized()``, group ids, a second
  rendezvous on the job's store). So every reshard goes to Paddle, with one log line. The one
  exception is a job of one process on meshes of rank 0 alone: no communication is needed
  there and paddle-ext's executor runs without any group. A reshard between two meshes, which
  Paddle's CPU wheel cannot survive (``compat.ports.cpu_wheel``), is refused with a named error
  instead of a SIGSEGV.
* **a pure mesh reshape** (:func:`pure_mesh_reshape`: same ranks, another mesh shape, every rank
  keeping its slice) in any process state: done locally by paddle-ext's relabel
  (``compat.ports.mesh_reshape``), no communication, before any of the above.
* **GLOO**: paddle-ext's executor, except what :func:`.native.native_is_exact` says Paddle does
  exactly and as cheaply (decided in :func:`.dygraph.reshard`).
* **NCCL**: Paddle's native reshard, except the cases in :data:`NCCL_KEPT` (:func:`nccl_keeps`).
* **any other backend** (XCCL, BKCL, a custom device): Paddle, with one log line.
"""
from __future__ import annotations

from ..compat.ports.backend import GLOO, NCCL, backend_of, note_once, parallel_env_ready, route_unknown
from ..compat.ports.cpu_wheel import cross_mesh_reshard_crashes
from ..errors import ReshardPlanError
from ..placements import DistSpec, Partial, Replicate, Shard
from .groups import group_for
from .layout import coord_in
from .native import _even

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


def _call_group(x, mesh):
    """The group a reshard of ``x`` onto ``mesh`` runs on (None: the world group)."""
    members = sorted(set(x.process_mesh.process_ids) | set(mesh.process_ids))
    return group_for(members)


def to_paddle_first(paddle, x, mesh, backend: str | None) -> str | None:
    """Before paddle-ext looks at the request: why Paddle should run it, or None.

    Decided from the job alone (every rank of a reshard answers alike): no parallel environment,
    or a backend paddle-ext does not know. ``backend`` is :func:`call_backend`'s answer, asked
    once per call by the caller."""
    if not parallel_env_ready():
        world = paddle.distributed.get_world_size()
        ranks = set(x.process_mesh.process_ids) | set(mesh.process_ids)
        if world == 1 and ranks <= {0}:
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
    if route_unknown(backend, "dygraph reshards"):
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


def call_backend(x, mesh) -> str | None:
    """The backend of the group the reshard runs on (the world's when this rank is not in it)."""
    group = _call_group(x, mesh)
    return (backend_of(group) if group is not None else None) or backend_of(None)


def nccl_keeps(src: DistSpec, dst: DistSpec, s_ranks, d_ranks) -> str | None:
    """The :data:`NCCL_KEPT` key when paddle-ext keeps this reshard on NCCL, else None (Paddle)."""
    if not (_even(src) and _even(dst)) or any(n == 0 for n in src.shape):
        return "uneven"
    pairs = list(zip(src.placements, dst.placements))
    if meshes_differ(s_ranks, src.mesh_shape, d_ranks, dst.mesh_shape):
        return None if src.placements == dst.placements and not _non_sum(src) else "cross-mesh"
    for a, b in pairs:
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


__all__ = ["GLOO", "NCCL", "NCCL_KEPT", "call_backend", "nccl_keeps", "pure_mesh_reshape", "to_paddle_first"]
