"""Paddle internals used by the dygraph pipeline runtime (``paddle_ext.passes.runtime``).

Everything the runtime needs from ``paddle.distributed.auto_parallel.pipelining`` and from the
DistTensor helpers goes through here, so a Paddle that moves them fails in one place with the
location it expected:

* :func:`pipeline_stage_class` -- Paddle's ``PipelineStage`` (the runtime takes its instances as
  they are: ``sublayer``, ``stage_index``, ``num_stages``, ``group``; it does not use Paddle's
  p2p infrastructure, whose batched ``isend``/``irecv`` deadlock on gloo, see the notes §4);
* :func:`split_into_microbatches` / :func:`split_tensor` -- Paddle's own chunking of the step's
  inputs and target (``tensor_split`` semantics, DistTensor-aware);
* :func:`to_local` / :func:`from_local` -- ``dtensor_to_local`` / ``dtensor_from_local`` (not
  exported as ``dist.*`` in 3.3);
* :func:`global_mesh` -- the mesh set by ``dist.auto_parallel.set_mesh`` (``fleet.auto``);
* :func:`host_memory` -- the CPU allocator's current and peak allocated bytes.

Nothing is patched: the runtime needs no change to Paddle.
"""
from __future__ import annotations

import time

from paddle.distributed import fleet

from .registries import PIPELINING_STAGE_MODULE, _attr, _import
from ..version import require_paddle

MICROBATCH_MODULE = "paddle.distributed.auto_parallel.pipelining.microbatch"
DIST_API_MODULE = "paddle.distributed.auto_parallel.api"
FEATURE = "dygraph pipelining"


def pipeline_stage_class():
    """``paddle.distributed.auto_parallel.pipelining.stage.PipelineStage``."""
    return _attr(PIPELINING_STAGE_MODULE, "PipelineStage", FEATURE)


def is_pipeline_stage(obj) -> bool:
    """True for Paddle's stage objects (``_PipelineStageBase`` and subclasses)."""
    base = _attr(PIPELINING_STAGE_MODULE, "_PipelineStageBase", FEATURE)
    return isinstance(obj, base)


def split_into_microbatches(args, kwargs, n_microbatches, args_chunk_spec=None, kwargs_chunk_spec=None):
    """Paddle's ``split_args_kwargs_into_chunks``: ``(list of args tuples, list of kwargs dicts)``."""
    fn = _attr(MICROBATCH_MODULE, "split_args_kwargs_into_chunks", FEATURE)
    return fn(args, kwargs, n_microbatches, args_chunk_spec, kwargs_chunk_spec)


def split_tensor(tensor, n_chunks: int, axis: int = 0) -> list:
    """Paddle's ``_split_tensor`` (dense: ``tensor_split``; DistTensor: split the local value)."""
    return list(_attr(MICROBATCH_MODULE, "_split_tensor", FEATURE)(tensor, n_chunks, axis))


def merge_chunks(chunks, merge_spec=None):
    """Paddle's ``merge_chunks`` (concatenate microbatch outputs on dim 0 by default)."""
    return _attr(MICROBATCH_MODULE, "merge_chunks", FEATURE)(chunks, merge_spec)


def to_local(tensor):
    """The local value of a DistTensor (the tensor itself if dense), outside autograd."""
    return tensor._local_value() if tensor.is_dist() else tensor


def from_local(local, mesh, placements):
    """A DistTensor on ``mesh`` with ``placements`` (Paddle placements) whose local value is ``local``."""
    return _attr(DIST_API_MODULE, "dtensor_from_local", FEATURE)(local, mesh, placements)


def global_mesh():
    """The mesh given to ``dist.auto_parallel.set_mesh`` (or None)."""
    require_paddle(FEATURE)

    return fleet.auto.get_mesh()


def host_memory() -> tuple[int, int]:
    """``(current, peak)`` bytes allocated by Paddle's CPU allocator since the last reset."""
    core = require_paddle(FEATURE).base.core
    return (int(core.host_memory_stat_current_value("Allocated", 0)),
            int(core.host_memory_stat_peak_value("Allocated", 0)))


def reset_host_memory_peak() -> None:
    require_paddle(FEATURE).base.core.host_memory_stat_reset_peak_value("Allocated", 0)


def action_clock(on_device: bool | None = None):
    """A clock for timing pipeline actions: ``time.perf_counter`` on the CPU; on a GPU, one that
    waits for the device's queued work first, so an action's time is its device time and not
    the time its kernels took to launch. ``on_device`` None: ask Paddle where this process runs.

    >>> import time
    >>> action_clock(on_device=False) is time.perf_counter
    True
    """

    if on_device is None:
        paddle = require_paddle("pipeline profiling")
        on_device = not paddle.get_device().startswith("cpu")
    if not on_device:
        return time.perf_counter
    paddle = require_paddle("pipeline profiling")

    def device_time() -> float:
        paddle.device.synchronize()
        return time.perf_counter()

    return device_time


def pylayer_class():
    """``paddle.autograd.PyLayer``."""
    return require_paddle(FEATURE).autograd.PyLayer


def check_layout() -> dict:
    """What the runtime uses, found on this Paddle (for ``paddle-ext doctor``)."""
    _import(MICROBATCH_MODULE, FEATURE)
    return {"where": PIPELINING_STAGE_MODULE, "stage": pipeline_stage_class().__name__}
