"""``static-eager-param-reshard``: ``init_pir`` leaves other stages' parameters alone on gloo.

``ProgramHelper.init_pir`` reshards every dist parameter eagerly, including other stages' ones;
on CPU builds an eager reshard on a rank outside both meshes segfaults in ``GetDefaultPlace``.
During ``init_pir`` such a reshard returns the parameter unchanged (the rank holds nothing of
it, which is what Paddle expects:
:func:`~paddle_ext.compat.ports.static_engine.skip_outside_reshard`). Applied by
``paddle_ext.install(static_engine=True)`` on a gloo job
(:func:`~paddle_ext.compat.ports.backend.job_on_gloo`).

Importing this module imports Paddle (through the static Engine's ports); the table loads it
when the fix is asked or applied.
"""
from __future__ import annotations

import importlib

import paddle

from ..ports.backend import job_on_gloo
from ..ports.static_engine import HELPER_MODULE, skip_outside_reshard

needed = job_on_gloo


def apply():
    helper = importlib.import_module(HELPER_MODULE)
    init_pir = helper.ProgramHelper.init_pir
    core = paddle.base.core

    def init_pir_(self, main_program, place):
        original = core.reshard
        core.reshard = skip_outside_reshard(original)
        try:
            return init_pir(self, main_program, place)
        finally:
            core.reshard = original

    init_pir_.__wrapped__ = init_pir
    helper.ProgramHelper.init_pir = init_pir_
    return [(helper.ProgramHelper, "init_pir", init_pir)]
