"""Fixes that make Paddle 3.3.x usable on CPU/gloo, applied by ``paddle_ext.install()``.

Each fix is a small named object: ``needed()`` says whether this Paddle needs it (checked on the
real object, not guessed from the version), ``apply()`` installs it idempotently and ``revert()``
restores Paddle's original. Nothing is patched at import time.

The three gloo fixes (static groups, static barrier, checkpoint load) follow the backend the job
runs on, not the build (:func:`~paddle_ext.compat.ports.backend.job_on_gloo`, read through
``paddle.distributed.get_backend``; docs/backends.md): a CUDA wheel running gloo gets them, and every patched function hands an NCCL
or unknown backend to Paddle's original when it is called.

* ``numpy-mesh-rank`` -- numpy >= 2.4 makes ``int(np.where(...)[i])`` raise on a 1-element array,
  which breaks ``ProcessMesh.get_rank_by_dim_and_process_id`` and so ``dist.shard_dataloader``
  ("TypeError: only 0-dimensional arrays can be converted to Python scalars").
* ``static-gloo-groups`` -- the static Engine's ``ProcessGroup.instantiate`` only knows
  NCCL/BKCL/XCCL ("AssertionError: No CUDA device found"); on CPU it now creates gloo comm
  contexts, never re-creating ring 0 (or any id that already has a dygraph gloo group), whose
  second rendezvous fails with AlreadyExists or times out.
* ``static-gloo-barrier`` -- the Engine's eager ring-0 ``barrier`` has a CPU kernel that cannot find
  its comm context ("NCCLCommContext is nullptr"); on CPU it goes through ``dist.barrier()``.
* ``gloo-group-rendezvous`` -- ``ProcessGroupGloo``'s constructor connects a second gloo
  context on the *un-prefixed* global TCPStore (member i writes key "i"), so a group can read the
  addresses an earlier group left under the same keys ("Connection refused", then a gloo
  TIMEOUT; seen when fleet.init in ``dist.to_static`` builds the group of the world's ranks
  again, and possible for any ``dist.new_group``). Each gloo group gets a TCPStore of its own,
  hosted by its rank 0 (``compat/fixes/gloo_groups.py``).
* ``gloo-batch-p2p-order`` -- on gloo each ``isend`` of a ``dist.batch_isend_irecv`` batch waits
  for its peer's receive, so a batch that exchanges both ways deadlocks when both peers send
  first (``Schedule1F1B``); on gloo a batch now goes peer by peer, the lower rank of each pair
  sending first (``compat/fixes/gloo_p2p.py``).
* ``cpu-collectives`` -- Paddle's C++ P -> S and S -> S reshards, reached from C++ where no Python
  sees them (the gradient of a sharded parameter's all-gather, ``dist.parallelize``'s sequence
  parallel and sharding levels, ``dist.reshard`` without ``init_parallel_env``), call CPU
  reduce_scatter and all_to_all kernels that only throw; in a multi-process gloo job those calls
  run on gloo (``compat/native/cpu_collectives.py``, C++ piece ``cpu_collectives``, built once per
  machine in about 25 s and cached).
* ``zero3-gather-on-conflict`` -- ShardingStage3 shards every parameter on its "dp" dim, biases and
  embeddings included, and leaves gathering them to the ops' SPMD rules; in dygraph Paddle's
  ``linear`` and ``embedding`` rules refuse such a parameter from the second step of a dp x mp
  plan, and so do they while ``dist.to_static`` builds its program ("Tensor Axis[c] is Sharded by
  two different mesh dimension"). Where a rule refuses, the parameter is all-gathered on its
  sharding dim and the op runs again; a stage-3 parameter passed into a ``LocalLayer`` (an MoE
  gate) is gathered first (``compat/fixes/zero3_gather.py``).
* ``stage1-dense-grads`` -- ShardingStage1 reshards every gradient before the update and reads its
  ``process_mesh``; a plain parameter beside the DistTensors (DeepSeek-V2's auto LM head) has a
  dense gradient and Paddle fails ("'NoneType' object has no attribute 'shape'"). Its gradient is
  kept as it is (``compat/fixes/stage1_dense_grads.py``).
* ``bool-cast-grad`` -- Paddle's ``cast`` to ``bool`` hands the incoming gradient through (it must
  be 0: a boolean is piecewise constant); a bool output is now ``stop_gradient``
  (``compat/fixes/bool_cast_grad.py``). Silent-wrong: MoE gates build their dispatch masks that way.
* ``checkpoint-cpu-load`` -- ``dist.load_state_dict`` moves every tensor it reshards to the GPU with
  ``Tensor.cuda()`` ("ValueError: No available device found." on CPU builds); on CPU the load
  runs with ``cuda()`` keeping tensors where they are, so a checkpoint saved under one plan loads
  under another (the data moves by gloo broadcasts).
"""
from __future__ import annotations

import numpy as np

from ...errors import CompatError
from ..fix import Fix, apply_fixes, revert_fixes
from ..ports.backend import job_on_gloo, note_once
from .gloo_groups import _gloo_group_store_apply, _has_gloo_groups, group_store
from .gloo_p2p import _batch_order_apply, _batch_order_needed
from . import bool_cast_grad, outside_mesh_hint, stage1_dense_grads, zero3_gather
from ..native import cpu_collectives
from ..version import require_paddle


# -- numpy >= 2.4: ProcessMesh.get_rank_by_dim_and_process_id ------------------------------
def _mesh_rank_needed() -> bool:
    require_paddle("fix numpy-mesh-rank")
    # stays here: `import paddle_ext` loads this module and imports no Paddle
    import paddle.distributed as dist

    mesh = dist.ProcessMesh([0, 1], dim_names=["x"])
    try:
        dist.ProcessMesh.get_rank_by_dim_and_process_id(mesh, "x", 1)
    except TypeError:
        return True
    return False


def _mesh_rank_apply():
    # stays here: `import paddle_ext` loads this module and imports no Paddle
    from paddle.distributed.auto_parallel.process_mesh import ProcessMesh

    original = ProcessMesh.get_rank_by_dim_and_process_id

    def get_rank_by_dim_and_process_id(self, dim, process_id):
        if process_id not in self._process_ids:
            return -1
        if dim is None:
            return 0
        if isinstance(dim, int):
            dim_name = self._dim_names[dim]
        elif isinstance(dim, str):
            dim_name = dim
        else:
            raise ValueError("dim must be a string or an integer.")
        index = self._dim_names.index(dim_name)
        return int(np.where(self._mesh == process_id)[index].item())

    get_rank_by_dim_and_process_id.__doc__ = original.__doc__
    ProcessMesh.get_rank_by_dim_and_process_id = get_rank_by_dim_and_process_id
    return [(ProcessMesh, "get_rank_by_dim_and_process_id", original)]


# -- static Engine on CPU: gloo process groups and ring-0 barrier -----------------------------
def _groups_apply():
    # stays here: `import paddle_ext` loads this module and imports no Paddle
    import paddle
    from paddle.base import core
    from paddle.distributed.auto_parallel.static import process_group as pg

    original = pg.ProcessGroup.instantiate

    def instantiate(self):
        if self._is_instantiate:
            return
        if not job_on_gloo():  # NCCL, XCCL, ...: Paddle's own
            return original(self)
        rank = pg._get_global_env().rank
        dygraph_groups = paddle.distributed.collective._get_group_map()
        existing = dygraph_groups.get(self.id)
        if existing is not None and sorted(existing.ranks) != sorted(self.ranks):
            raise RuntimeError(
                f"paddle-ext static-gloo-groups: static ring {self.id} (ranks {self.ranks}) collides with "
                f"dygraph group {self.id} (ranks {existing.ranks}); create dygraph groups after the Engine")
        exists = self.id == 0 or (existing is not None and existing.process_group is not None)
        if self.nranks >= 2 and rank in self.ranks and not exists:
            # a static ring id is numbered per rank, in creation order: on dp2 x mp2 ring 28 is
            # [0, 1] on ranks 0-1 and [2, 3] on ranks 2-3. Rendezvous on the global store under the
            # id alone let both groups write and read the same keys ("28/0", "28/1"): peers of
            # one group dialled the other's addresses ("Connection refused", or a hang). Each
            # ring meets on a store of its own, named by the id and its members.
            members = "-".join(str(r) for r in sorted(self.ranks))
            store = group_store(core.create_or_get_global_tcp_store(), self.id, f"static-ring-{members}",
                                self.local_rank(rank), self.nranks)
            core.CommContextManager.create_gloo_comm_context(store, str(self.id), self.local_rank(rank), self.nranks)
        self._is_instantiate = True

    pg.ProcessGroup.instantiate = instantiate
    return [(pg.ProcessGroup, "instantiate", original)]


def _barrier_apply():
    # stays here: `import paddle_ext` loads this module and imports no Paddle
    import paddle

    legacy = paddle._legacy_C_ops
    original = legacy.barrier

    def barrier(x, out, *attrs):
        ring_id = dict(zip(attrs[::2], attrs[1::2])).get("ring_id", 0)
        if ring_id == 0 and paddle.in_dynamic_mode() and job_on_gloo():
            paddle.distributed.barrier()
            return out
        return original(x, out, *attrs)

    legacy.barrier = barrier
    return [(legacy, "barrier", original)]


def _checkpoint_apply():
    # stays here: `import paddle_ext` loads this module and imports no Paddle
    import paddle
    import paddle.distributed as dist
    from paddle.distributed.flex_checkpoint.dcp import load_state_dict as dcp_load

    original = dcp_load.load_state_dict

    def load_state_dict(*args, **kwargs):
        if not job_on_gloo():  # a GPU job: Paddle's loader moves tensors to the GPU, as it should
            return original(*args, **kwargs)
        cuda = paddle.Tensor.cuda
        paddle.Tensor.cuda = _stay_on_cpu
        try:
            return original(*args, **kwargs)
        finally:
            paddle.Tensor.cuda = cuda

    load_state_dict.__doc__ = original.__doc__
    load_state_dict.__wrapped__ = original
    dcp_load.load_state_dict = load_state_dict
    dist.load_state_dict = load_state_dict
    return [(dcp_load, "load_state_dict", original), (dist, "load_state_dict", original)]


def _cpu_collectives_needed() -> bool:
    """A multi-process job on gloo (a one-process run has no reduce_scatter to serve)."""
    paddle = require_paddle("fix cpu-collectives")
    return job_on_gloo() and paddle.distributed.get_world_size() > 1


def _cpu_collectives_apply():
    try:
        cpu_collectives.hook()
    except CompatError as exc:  # a build the hook does not know: Paddle's kernel stays, install() goes on
        note_once("cpu-collectives", f"{exc}; Paddle's C++ P->S and S->S keep Paddle's CPU kernels")
        return []
    cpu_collectives.HOOKED = True
    return [(cpu_collectives, "HOOKED", False)]


def _stay_on_cpu(tensor, *args, **kwargs):
    """``Tensor.cuda`` during a checkpoint load on a CPU build: the tensor stays on the CPU."""
    return tensor


FIXES: dict[str, Fix] = {
    f.name: f for f in (
        Fix("numpy-mesh-rank",
            "ProcessMesh.get_rank_by_dim_and_process_id under numpy>=2.4 (shard_dataloader)",
            _mesh_rank_needed, _mesh_rank_apply),
        Fix("static-gloo-groups",
            "static Engine process groups create gloo comm contexts on CPU (never re-creating ring 0)",
            job_on_gloo, _groups_apply),
        Fix("static-gloo-barrier",
            "static Engine's eager ring-0 barrier goes through dist.barrier() on CPU",
            job_on_gloo, _barrier_apply),
        Fix("gloo-group-rendezvous",
            "each gloo group (dist.new_group, fleet.init's in every dist.to_static) rendezvouses on a TCPStore "
            "of its own", _has_gloo_groups, _gloo_group_store_apply),
        Fix("gloo-batch-p2p-order",
            "dist.batch_isend_irecv on gloo exchanges peer by peer, lower rank sending first (Schedule1F1B "
            "no longer deadlocks)", _batch_order_needed, _batch_order_apply),
        Fix("cpu-collectives",
            "Paddle's C++ P->S and S->S reshards (reached from C++: gradients of sharded parameters, "
            "dist.parallelize, dist.reshard without init_parallel_env) get CPU reduce_scatter and "
            "all_to_all on gloo, and its cross-mesh move (same-status) CPU send and recv", _cpu_collectives_needed, _cpu_collectives_apply, _undo=cpu_collectives.unhook),
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
        Fix("checkpoint-cpu-load",
            "dist.load_state_dict reshards on CPU instead of calling Tensor.cuda()",
            job_on_gloo, _checkpoint_apply),
    )
}


def install() -> list[str]:
    """Apply every fix this Paddle needs (idempotent); returns the names now in effect."""
    return apply_fixes(FIXES)


def uninstall() -> None:
    """Restore Paddle's originals (used by tests that show a fix is needed)."""
    revert_fixes(FIXES)
