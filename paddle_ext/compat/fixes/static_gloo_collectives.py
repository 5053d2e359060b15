"""``static-gloo-collectives``: the static Engine's collectives and send/recv on gloo ops (CPU).

Two CPU gaps, one fix. ``send_v2``/``recv_v2`` have only throwing CPU kernels ("Do not support
send for cpu kernel now."), and every CPU collective kernel takes its communicator from the one
shared CPU DeviceContext, which the executor binds to the *first* collective it builds
(``SetDeviceCommContext``: "if (!dev_ctx->GetCommContext())"), so all rings of a process
silently share one communicator. After the Engine has built what it runs (the pipeline plan's
job programs, else the dense program), every ``send_v2``, ``recv_v2``, ``all_reduce``,
``all_gather``, ``broadcast`` and ``reduce_scatter`` (ZeRO's gradient reshard, which has no CPU
kernel either) is rewritten into a small C++ op (built once with ``paddle.utils.cpp_extension``,
cached) that looks its ring up in ``CommContextManager`` when it runs
(:mod:`paddle_ext.compat.ports.static_collectives`). Communicators are named by their ordered
ranks, not by ring id (Paddle numbers static groups in a rank-dependent order, so two groups can
share an id on different ranks), and ``Engine._init_comm`` creates them in one global order.
Point-to-point uses one 2-rank channel per direction (a FIFO); a send enqueues a copy and
returns, like NCCL's, and a per-channel thread does the blocking gloo send, so a rank only waits
in receives: any job order whose sends and receives agree in order per channel runs (Paddle's
FThenB, 1F1B, VPP and paddle-ext's lowered IR schedules do). The rewrite runs after the pipeline
pass, which therefore still sees ``send_v2``/``recv_v2`` and classifies its jobs by op name.

Applied by ``paddle_ext.install(static_engine=True)`` on a gloo job
(:func:`~paddle_ext.compat.ports.backend.job_on_gloo`). Importing this module imports Paddle
(through the static Engine's ports); the table loads it when the fix is asked or applied.
"""
from __future__ import annotations

import importlib
import logging
import sys

from paddle.distributed.auto_parallel.static.process_group import get_all_process_groups
import paddle

from ..ports.backend import job_on_gloo
from ..ports.static_collectives import (NOT_P2P, create_communicators, eager_barrier, load_gloo_ops,
                                        lower_collectives, lower_engine_collectives)
from ..ports.static_engine import ENGINE_MODULE

logger = logging.getLogger("paddle_ext.static")
needed = job_on_gloo
APPLIED = False   # read by static-gloo-rings, which does nothing while this fix is applied


def apply():
    engine_mod = importlib.import_module(ENGINE_MODULE)
    Engine = engine_mod.Engine
    parallel_pir, init_comm = Engine._parallel_pir, Engine._init_comm
    remove_pass = engine_mod.remove_unuseful_comm_op_pass
    load_gloo_ops()  # build now, not in the middle of the first step

    def _parallel_pir(self, mode):
        result = parallel_pir(self, mode)
        if getattr(self, "_nranks", 1) > 1:
            lower_engine_collectives(self, mode)
        return result

    def _init_comm(self):
        if getattr(self, "_nranks", 1) <= 1 or not getattr(self, "_in_pir_mode", False):
            return init_comm(self)

        made = create_communicators()
        for group in get_all_process_groups():
            group._is_instantiate = True
        logger.info("rank %d: gloo communicators %s", paddle.distributed.get_rank(), made)
        eager_barrier()  # gloo waits 30 s at most: start the slow build phases together

    def remove_unuseful_comm_op_pass(program):
        # every program the Engine runs passes here (dense main twice, startup once): collectives
        # other than send/recv move to the gloo ops now; send/recv stay visible to the
        # pipeline pass and are rewritten in its job programs afterwards
        remove_pass(program)
        if paddle.distributed.get_world_size() > 1:
            lower_collectives(program, paddle.distributed.get_rank(), names=NOT_P2P)

    for f, original in ((_parallel_pir, parallel_pir), (_init_comm, init_comm),
                        (remove_unuseful_comm_op_pass, remove_pass)):
        f.__wrapped__ = original
    Engine._parallel_pir = _parallel_pir
    Engine._init_comm = _init_comm
    engine_mod.remove_unuseful_comm_op_pass = remove_unuseful_comm_op_pass
    module = sys.modules[__name__]
    module.APPLIED = True
    return [(Engine, "_parallel_pir", parallel_pir), (Engine, "_init_comm", init_comm),
            (engine_mod, "remove_unuseful_comm_op_pass", remove_pass), (module, "APPLIED", False)]
