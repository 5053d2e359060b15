"""``static-engine-chunks``: the static Engine runs paddle-ext's multi-chunk schedules.

The Engine only assigns chunk ids (``complete_chunk_id``) and checks them when
``schedule_mode == "VPP"``, and fetches the loss from job ``"forward"`` or (VPP)
``"forward{vpp_degree-1}"``. For paddle-ext's multi-chunk schedules the Engine sees "VPP" while
it builds the program; at run time the loss is read from the forward job that defines it when
the job Paddle asks for does not exist (:class:`~paddle_ext.compat.ports.static_engine.LossJobPlan`).
On gloo each ``run()`` starts with a barrier (gloo's 30 s timeout: ranks whose build or previous
step ran long catch up first). Applied by ``paddle_ext.install(static_engine=True)``; needed on
every supported Paddle.

Importing this module imports Paddle (through the static Engine's ports); the table loads it
when the fix is asked or applied.
"""
from __future__ import annotations

import importlib

import paddle

from ..fix import always_needed
from ..ports.backend import job_on_gloo
from ..ports.static_collectives import eager_barrier
from ..ports.static_engine import ENGINE_MODULE, LossJobPlan, is_multichunk_ext


needed = always_needed("static pipeline schedules")


def apply():
    engine_mod = importlib.import_module(ENGINE_MODULE)
    Engine = engine_mod.Engine
    parallel_pir, run = Engine._parallel_pir, Engine.run

    def _parallel_pir(self, mode):
        pipeline = self._strategy.pipeline
        if not is_multichunk_ext(pipeline):
            return parallel_pir(self, mode)
        real = pipeline.schedule_mode
        pipeline.paddle_ext_schedule = real
        pipeline.schedule_mode = "VPP"  # complete_chunk_id/check_chunk_id run only for "VPP"
        try:
            return parallel_pir(self, mode)
        finally:
            pipeline.schedule_mode = real
            pipeline.paddle_ext_schedule = None

    def run_(self, *args, **kwargs):
        if job_on_gloo() and paddle.distributed.get_world_size() > 1:
            # gloo's 30 s timeout: ranks whose build or previous step ran long catch up first
            eager_barrier()
        plan = self._job_plan
        if plan is None or not getattr(self, "_in_pir_mode", False):
            return run(self, *args, **kwargs)
        self._job_plan = LossJobPlan(plan, self._loss_names[0])
        try:
            return run(self, *args, **kwargs)
        finally:
            self._job_plan = plan

    _parallel_pir.__wrapped__ = parallel_pir
    run_.__wrapped__ = run
    run_.__doc__ = run.__doc__
    Engine._parallel_pir = _parallel_pir
    Engine.run = run_
    return [(Engine, "_parallel_pir", parallel_pir), (Engine, "run", run)]
