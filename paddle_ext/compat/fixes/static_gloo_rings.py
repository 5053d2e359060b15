"""``static-gloo-rings``: a dense static program on two rings or more, or with a
``reduce_scatter``, runs its collectives on paddle-ext's gloo ops (plain ``paddle_ext.install()``).

A dense program whose collectives use two rings or more (dp x mp: [0, 2] and [0, 1] on rank 0),
or that has a collective with no CPU kernel (``NO_CPU_KERNEL``: ZeRO's ``reduce_scatter``), runs
them on the gloo ops of :mod:`paddle_ext.compat.ports.static_collectives`. Paddle's CPU kernels
would run them all on the one communicator the process bound first (:mod:`.static_gloo_collectives`),
silently: on dp2 x mp2 the dp gradient all_reduce and the loss's all_gather ran on the mp ring.
A program on one ring and without a ``reduce_scatter`` keeps Paddle's kernels (the op library is
built and loaded only when needed); send/recv stay Paddle's (they throw on CPU: pipelines need
``install(static_engine=True)``). With ``static-gloo-collectives`` applied this fix does
nothing. Applied on a gloo job (:func:`~paddle_ext.compat.ports.backend.job_on_gloo`).

Importing this module imports Paddle (through the static Engine's ports); the table loads it
when the fix is asked or applied.
"""
from __future__ import annotations

import importlib
import logging

import paddle

from ..ports.backend import job_on_gloo
from ..ports.static_collectives import (NO_CPU_KERNEL, NOT_P2P, collective_rings, create_communicators,
                                        eager_barrier, engine_programs, load_gloo_ops, lower_engine_collectives)
from ..ports.static_engine import ENGINE_MODULE
from . import static_gloo_collectives

logger = logging.getLogger("paddle_ext.static")
needed = job_on_gloo


def apply():
    Engine = importlib.import_module(ENGINE_MODULE).Engine
    parallel_pir, init_comm = Engine._parallel_pir, Engine._init_comm

    def _parallel_pir(self, mode):
        result = parallel_pir(self, mode)
        if static_gloo_collectives.APPLIED or getattr(self, "_nranks", 1) <= 1 or not job_on_gloo():
            return result
        programs = engine_programs(self, mode)
        rings = collective_rings(programs)
        if len(rings) > 1 or collective_rings(programs, names=NO_CPU_KERNEL):
            load_gloo_ops()
            counts = lower_engine_collectives(self, mode, names=NOT_P2P)
            self._paddle_ext_rings = True
            logger.info("rank %d: static-gloo-rings: %d rings %s, collectives on gloo ops: %s",
                        paddle.distributed.get_rank(), len(rings), rings, counts)
        return result

    def _init_comm(self):
        result = init_comm(self)  # Paddle's groups, for the ops left to Paddle and later Engines
        if getattr(self, "_paddle_ext_rings", False):
            create_communicators(sockets=False)   # send/recv stay Paddle's here (NOT_P2P)
            eager_barrier()
        return result

    for f, original in ((_parallel_pir, parallel_pir), (_init_comm, init_comm)):
        f.__wrapped__ = original
    Engine._parallel_pir = _parallel_pir
    Engine._init_comm = _init_comm
    return [(Engine, "_parallel_pir", parallel_pir), (Engine, "_init_comm", init_comm)]
