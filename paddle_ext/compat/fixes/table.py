"""The table of paddle-ext's fixes to Paddle: every fix in :mod:`paddle_ext.compat.fixes`, one line each.

A fix is a :class:`~paddle_ext.compat.fix.Fix`: its name, a one-line summary, ``needed()`` (is
this Paddle broken here? checked on the real object, not guessed from the version), ``apply()``
(idempotent) and ``revert()`` (Paddle's originals back). Each fix's code and its full story live
in a module of its own, named after it (``numpy-mesh-rank`` -> :mod:`.numpy_mesh_rank`);
``gloo-group-rendezvous`` is :mod:`.gloo_groups`, ``gloo-batch-p2p-order`` :mod:`.gloo_p2p`,
``zero3-gather-on-conflict`` :mod:`.zero3_gather`, ``stage1-dense-grads``
:mod:`.stage1_dense_grads`, ``outside-mesh-hint`` :mod:`.outside_mesh_hint`,
``ranks-outside-mesh`` :mod:`.outside_mesh`. The static Engine's five import Paddle (through
its ports, :mod:`paddle_ext.compat.ports.static_engine` and
:mod:`~paddle_ext.compat.ports.static_collectives`), so the table loads their modules when a
fix is first asked or applied. Nothing is patched at import time, and importing this module
imports no Paddle.

* :data:`TABLE` -- every fix, grouped by the call that applies it, each group in the order that
  call applies it;
* :data:`FIXES` -- those plain ``install()`` applies first (``switch`` and ``via`` None:
  :func:`install`);
* :data:`RING_FIXES` -- ``static-gloo-rings``, which plain ``install()`` applies after routing
  reshards (``via="install_rings"``: :func:`install_rings`);
* :data:`STATIC_FIXES` -- the static Engine's, applied by ``install(static_engine=True)``
  (``switch`` :data:`STATIC_SWITCH`: :func:`install_static`, through
  ``paddle_ext.passes.static.passes.install_static``, which then registers paddle-ext's
  schedules);
* :data:`OPT_IN` -- those ``install(pipeline_by_annotation=True)`` applies (:func:`install_opt_in`):
  they change what a program that already runs can see.

The gloo fixes (static groups, static barrier, checkpoint load, CPU collectives) follow the
backend the job runs on, not the build (:func:`~paddle_ext.compat.ports.backend.job_on_gloo`,
read through ``paddle.distributed.get_backend``; docs/backends.md): a CUDA wheel running gloo gets
them, and every patched function hands an NCCL or unknown backend to Paddle's original when it is
called. The static Engine's gloo fixes (``static-gloo-collectives``,
``static-eager-param-reshard``, ``static-gloo-rings``) are needed on a gloo job, asked when
applied; ``static-gloo-rings`` asks again for every program it sees.
"""
from __future__ import annotations

import importlib
from typing import Callable

from ..fix import Fix, apply_fixes, revert_fixes
from . import (bool_cast_grad, checkpoint_cpu_load, cpu_collectives, gloo_groups, gloo_p2p,
               local_layer_dense_gradient, numpy_mesh_rank, outside_mesh, outside_mesh_hint,
               stage1_dense_grads, static_gloo_barrier, static_gloo_groups, static_name_clash, zero3_gather)
from .outside_mesh_support import SWITCH

STATIC_SWITCH = "install(static_engine=True)"


def _later(module: str, name: str) -> Callable:
    """``.<module>.<name>()``, the module loaded on the first call (it imports Paddle; the table does not)."""
    def call():
        return getattr(importlib.import_module(f"{__package__}.{module}"), name)()
    call.__qualname__ = f"{module}.{name}"
    return call


def _loaded_later(module: str) -> tuple[Callable, Callable]:
    """``(needed, apply)`` of the fix in ``.<module>``, loaded on first use (see :func:`_later`)."""
    return _later(module, "needed"), _later(module, "apply")


TABLE: dict[str, Fix] = {
    f.name: f for f in (
        Fix("numpy-mesh-rank",
            "ProcessMesh.get_rank_by_dim_and_process_id under numpy>=2.4 (shard_dataloader)",
            numpy_mesh_rank.needed, numpy_mesh_rank.apply),
        Fix("static-gloo-groups",
            "static Engine process groups create gloo comm contexts on CPU (never re-creating ring 0)",
            static_gloo_groups.needed, static_gloo_groups.apply),
        Fix("static-gloo-barrier",
            "static Engine's eager ring-0 barrier goes through dist.barrier() on CPU",
            static_gloo_barrier.needed, static_gloo_barrier.apply),
        Fix("gloo-group-rendezvous",
            "each gloo group (dist.new_group, fleet.init's in every dist.to_static) rendezvouses on a TCPStore "
            "of its own", gloo_groups.needed, gloo_groups.apply),
        Fix("gloo-batch-p2p-order",
            "dist.batch_isend_irecv on gloo exchanges peer by peer, lower rank sending first (Schedule1F1B "
            "no longer deadlocks)", gloo_p2p.needed, gloo_p2p.apply),
        Fix("cpu-collectives",
            "Paddle's C++ P->S and S->S reshards (reached from C++: gradients of sharded parameters, "
            "dist.parallelize, dist.reshard without init_parallel_env) get CPU reduce_scatter and "
            "all_to_all on gloo, and its cross-mesh move (same-status) CPU send and recv",
            cpu_collectives.needed, cpu_collectives.apply, _undo=cpu_collectives.revert),
        Fix("zero3-gather-on-conflict",
            "a ShardingStage3 parameter that Paddle's SPMD rule refuses (a sharded bias in linear, a sharded "
            "vocab in embedding) is all-gathered on its sharding dim and the op runs again",
            zero3_gather.needed, zero3_gather.apply, _undo=zero3_gather.unwrap_ops),
        Fix("stage1-dense-grads",
            "ShardingStage1's gradient reshard keeps the gradient of a plain (non-dist) parameter as it is "
            "instead of failing on its missing process_mesh", stage1_dense_grads.needed, stage1_dense_grads.apply),
        Fix("bool-cast-grad",
            "a cast to bool passes no gradient (Paddle passes the incoming one through: MoE dispatch masks "
            "built by x.cast(bool).cast(x.dtype) made every gradient upstream of them wrong)",
            bool_cast_grad.needed, bool_cast_grad.apply),
        Fix("outside-mesh-hint",
            "the first DistTensor on a mesh that excludes this rank (pipeline by annotation) prints one line naming "
            "install(pipeline_by_annotation=True), before an op on it can die with SIGSEGV; no other effect",
            outside_mesh_hint.needed, outside_mesh_hint.apply, _undo=outside_mesh_hint.disarm),
        Fix("static-name-clash",
            "dist.to_static refuses a model that merges gradients whose parameters have the names of another "
            "model's parameters of another shape (Paddle's Engine would merge into the other's buffers); any "
            "other name clash: one log line",
            static_name_clash.needed, static_name_clash.apply),
        Fix("checkpoint-cpu-load",
            "dist.load_state_dict reshards on CPU instead of calling Tensor.cuda()",
            checkpoint_cpu_load.needed, checkpoint_cpu_load.apply),
        # plain install(), after routing reshards: dense static programs on several rings
        Fix("static-gloo-rings",
            "a dense static program on two rings or more, or with a reduce_scatter, runs its collectives on "
            "ring-aware gloo ops (Paddle's CPU kernels share the first communicator; reduce_scatter has none)",
            *_loaded_later("static_gloo_rings"), via="install_rings"),
        # install(static_engine=True): the static Engine's pipelines on CPU/gloo, any schedule
        Fix("static-pipeline-schedules",
            "pipeline_pass runs any registered pipeline_scheduler_<NAME> (pir_pass and engine bindings)",
            *_loaded_later("static_pipeline_schedules"), switch=STATIC_SWITCH),
        Fix("static-gloo-collectives",
            "executed programs' collectives and send/recv run on ring-aware gloo ops (C++, built once)",
            *_loaded_later("static_gloo_collectives"), switch=STATIC_SWITCH),
        Fix("static-engine-chunks",
            "Engine assigns chunk ids for paddle-ext's multi-chunk schedules; run() finds the loss job",
            *_loaded_later("static_engine_chunks"), switch=STATIC_SWITCH),
        Fix("static-eager-param-reshard",
            "init_pir skips the eager reshard of parameters on ranks outside their meshes (CPU segfault)",
            *_loaded_later("static_eager_param_reshard"), switch=STATIC_SWITCH),
        # opt-in: a registered device type, and LocalLayer gradients on the ranks inside the mesh too
        Fix("ranks-outside-mesh",
            "a rank outside a DistTensor's mesh runs its ops (registers a zero-device type 'no_device', visible "
            "in get_all_custom_device_type(), served by a CPU context; backward seed; set_value; comparisons "
            "with a number)", outside_mesh.needed, outside_mesh.apply, switch=SWITCH),
        Fix("local-layer-dense-gradient",
            "a trainable dense input of a LocalLayer (an MoE gate weight) gets its declared gradient placement, "
            "reduced over the ranks that split the tokens (Partial(avg) there applied as a sum), on every rank",
            local_layer_dense_gradient.needed, local_layer_dense_gradient.apply, switch=SWITCH),
    )
}
FIXES: dict[str, Fix] = {name: f for name, f in TABLE.items() if f.switch is None and f.via is None}
RING_FIXES: dict[str, Fix] = {name: f for name, f in TABLE.items() if f.via == "install_rings"}
STATIC_FIXES: dict[str, Fix] = {name: f for name, f in TABLE.items() if f.switch == STATIC_SWITCH}
OPT_IN: dict[str, Fix] = {name: f for name, f in TABLE.items() if f.switch == SWITCH}


def install() -> list[str]:
    """Apply every fix of plain ``install()`` this Paddle needs (idempotent); returns the names now in effect."""
    return apply_fixes(FIXES)


def uninstall() -> None:
    """Restore Paddle's originals (used by tests that show a fix is needed)."""
    revert_fixes(FIXES)


def install_opt_in() -> list[str]:
    """``install(pipeline_by_annotation=True)``'s fixes, where they were verified (idempotent);
    elsewhere one log line says why and nothing changes. Returns the names now in effect."""
    return apply_fixes(OPT_IN)


def uninstall_opt_in() -> None:
    """Restore ``Tensor.backward``, ``set_value``, the comparisons and ``LocalLayer.__call__`` (the
    registered device type stays for the life of the process)."""
    revert_fixes(OPT_IN)


def install_rings() -> list[str]:
    """Apply ``static-gloo-rings`` where needed (a gloo job; idempotent); returns it when in effect.
    Plain ``paddle_ext.install()`` calls it after routing reshards."""
    return apply_fixes(RING_FIXES)


def uninstall_rings() -> None:
    """Restore the static Engine's ``_parallel_pir`` and ``_init_comm`` that ``static-gloo-rings`` wrapped."""
    revert_fixes(RING_FIXES)


def install_static() -> list[str]:
    """Apply the static-Engine fixes this Paddle needs (idempotent); returns those in effect.
    ``paddle_ext.install(static_engine=True)`` calls it through
    ``paddle_ext.passes.static.passes.install_static``, which then registers paddle-ext's schedules."""
    return apply_fixes(STATIC_FIXES)


def uninstall_static() -> None:
    """Restore Paddle's originals of every static-Engine fix."""
    revert_fixes(STATIC_FIXES)
