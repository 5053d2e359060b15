"""``static-pipeline-schedules``: the static Engine runs any registered pipeline schedule.

``pir_pass.pipeline_pass`` asserts the schedule is FThenB, 1F1B or VPP; it is replaced (in
``pir_pass`` and in ``engine``, which imported it by name) by
:func:`~paddle_ext.compat.ports.static_engine.pipeline_pass`, which runs any registered
``pipeline_scheduler_<NAME>`` pass, matches names case-insensitively and lists the available
names when one is unknown. Applied by ``paddle_ext.install(static_engine=True)``; needed on
every supported Paddle (the behaviour it adds is paddle-ext's, not a CPU gap).

Importing this module imports Paddle (through the static Engine's ports); the table loads it
when the fix is asked or applied.
"""
from __future__ import annotations

import importlib

from ..fix import always_needed
from ..ports.static_engine import ENGINE_MODULE, PIR_PASS_MODULE, pipeline_pass


needed = always_needed("static pipeline schedules")


def apply():
    pir_pass = importlib.import_module(PIR_PASS_MODULE)
    engine = importlib.import_module(ENGINE_MODULE)
    saved = [(pir_pass, "pipeline_pass", pir_pass.pipeline_pass), (engine, "pipeline_pass", engine.pipeline_pass)]
    pir_pass.pipeline_pass = pipeline_pass
    engine.pipeline_pass = pipeline_pass
    return saved
