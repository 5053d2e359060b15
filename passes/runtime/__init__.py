"""Every IR schedule on Paddle's dygraph pipelining (``PipelineStage``), zero-bubble included.

On ``p`` ranks each rank builds its own stages and steps with its part (the first rank passes
the input, the last the target); with one rank every stage is local, as here:

>>> import paddle
>>> from paddle_ext.passes.runtime import build_stages, get_schedule, split_model
>>> model = paddle.nn.Sequential(*[paddle.nn.Linear(4, 4) for _ in range(4)])
>>> stages = build_stages(split_model(model, 2), "ZBV", rank=0, n_ranks=1)   # 2 chunks in a V
>>> sched = get_schedule("ZBV")(stages, n_microbatches=4, loss_fn=paddle.nn.functional.mse_loss)
>>> losses = []
>>> sched.step(paddle.randn([8, 4]), target=paddle.zeros([8, 4]), losses=losses)
>>> len(losses), all(p.grad is not None for p in model.parameters())
(4, True)

* :mod:`.schedule_classes` -- ``get_schedule(name)`` and the classes (ScheduleFThenB ... ScheduleInterleavedZB).
* :mod:`.stage_runtime`  -- one stage's forward / backward / weight actions and its messages.
* :mod:`.split_backward` -- I/W split for Paddle autograd (deferred Linear weight gradients).
* :mod:`.placement`      -- ``split_model``, ``stage_indices`` (V shape, interleaved), ``build_stages``.

See ``docs/pipeline_dygraph.md``.
"""
from .placement import (build_stages, interleaved_stage_indices, pipeline_group,  # noqa: F401
                        split_model, split_sizes, stage_indices, v_shape_stage_indices)
from .schedule_classes import (PipelineRuntimeError, PipelineScheduleRuntime, Schedule1F1B,  # noqa: F401
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
