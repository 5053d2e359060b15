"""``static-gloo-groups``: the static Engine's process groups on gloo.

The static Engine's ``ProcessGroup.instantiate`` only knows NCCL/BKCL/XCCL ("AssertionError: No
CUDA device found"). On a gloo job it now creates gloo comm contexts, never re-creating ring 0
(or any id that already has a dygraph gloo group), whose second rendezvous fails with
AlreadyExists or times out; each ring meets on a TCPStore of its own (:mod:`.gloo_groups`).
``needed`` is :func:`~paddle_ext.compat.ports.backend.job_on_gloo`, asked again on every call:
another backend gets Paddle's original.

Importing this module imports no Paddle.
"""
from __future__ import annotations

from ..ports.backend import job_on_gloo
from ..version import require_paddle
from .gloo_groups import group_store


def apply():
    paddle = require_paddle("fix static-gloo-groups")
    core = paddle.base.core
    pg = paddle.distributed.auto_parallel.static.process_group
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


needed = job_on_gloo
