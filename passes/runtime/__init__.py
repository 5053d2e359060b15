"""Every IR schedule on Paddle's dygraph pipelining (``PipelineStage``), zero-bubble included.

>>> from paddle_ext.passes.runtime import get_schedule      # doctest: +SKIP
>>> sched = get_schedule("ZBV")(stages, n_microbatches=4, loss_fn=loss_fn)   # doctest: +SKIP
>>> sched.step(x) if holds_first else sched.step(target=y, losses=losses)    # doctest: +SKIP

* :mod:`.schedules`      -- ``get_schedule(name)`` and the classes (ScheduleFThenB ... ScheduleInterleavedZB).
* :mod:`.stage_runtime`  -- one stage's forward / backward / weight actions and its messages.
* :mod:`.split_backward` -- I/W split for Paddle autograd (deferred Linear weight gradients).
* :mod:`.placement`      -- ``split_model``, ``stage_indices`` (V shape, interleaved), ``build_stages``.

See ``docs/pipeline_dygraph.md``.
"""
from .placement import (build_stages, interleaved_stage_indices, pipeline_group,  # noqa: F401
                        split_model, split_sizes, stage_indices, v_shape_stage_indices)
from .schedules import (PipelineRuntimeError, PipelineScheduleRuntime, Schedule1F1B,  # noqa: F401
                        ScheduleDualPipeV, ScheduleFThenB, ScheduleInterleaved1F1B, ScheduleInterleavedZB,
                        ScheduleLoopedBFS, ScheduleVPP, ScheduleZBH1, ScheduleZBH2, ScheduleZBV, get_schedule,
                        schedule_class_names)
from .split_backward import (DeferredLinearSplit, RegradSplit, SplitStrategy,  # noqa: F401
                             get_split_strategy)

__all__ = ["get_schedule", "schedule_class_names", "PipelineScheduleRuntime", "PipelineRuntimeError",
           "ScheduleFThenB", "Schedule1F1B", "ScheduleVPP", "ScheduleInterleaved1F1B", "ScheduleLoopedBFS",
           "ScheduleZBH1", "ScheduleZBH2", "ScheduleZBV", "ScheduleDualPipeV", "ScheduleInterleavedZB",
           "split_model", "split_sizes", "stage_indices", "v_shape_stage_indices", "interleaved_stage_indices",
           "build_stages", "pipeline_group", "SplitStrategy", "DeferredLinearSplit", "RegradSplit",
           "get_split_strategy"]
