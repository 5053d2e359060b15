"""The receive plans the static Engine's gloo receives are posted ahead from
(``static_collectives.recv_plans``): per channel into a rank, the byte sizes of its receives in
one step, in the job list's order; none for a channel with a dynamic shape, none at all with
``PADDLE_EXT_RECV_AHEAD=0``. Job programs and groups are stand-ins with the attributes the
Engine's ``recv_v2`` ops carry (the multi-rank test checks real ones)."""
from types import SimpleNamespace

import paddle
import pytest

from paddle_ext.compat.ports import static_collectives as sc


class Op:
    def __init__(self, name, **attrs):
        self._name, self._attrs = name, attrs

    def name(self):
        return self._name

    def attrs(self):
        return self._attrs


def recv(ring_id, shape, dtype=paddle.float32):
    return Op("pd_op.recv_v2", ring_id=ring_id, peer=0, out_shape=shape, dtype=dtype)


class Plan:
    """A ``core.Plan`` stand-in: job types, one program (its ops) per type, the job list."""

    def __init__(self, programs, jobs):
        self.programs, self.jobs = programs, jobs

    def job_types(self):
        return list(self.programs)

    def ir_program(self, t):
        return SimpleNamespace(global_block=lambda: SimpleNamespace(ops=self.programs[t]))

    def job_list(self):
        return [SimpleNamespace(type=lambda t=t: t) for t, _ in self.jobs]


@pytest.fixture
def groups(monkeypatch):
    # ring 5: global ranks [2, 1] (2 sends to 1); ring 6: [0, 1]; ring 7: a group of one rank
    table = {5: SimpleNamespace(ranks=[2, 1]), 6: SimpleNamespace(ranks=[0, 1]), 7: SimpleNamespace(ranks=[1])}
    monkeypatch.setattr(sc, "get_process_group", table.get)
    monkeypatch.delenv("PADDLE_EXT_RECV_AHEAD", raising=False)


def test_a_channels_plan_follows_the_job_list_not_the_program_order(groups):
    plan = Plan({"recv_forward0": [recv(5, [4, 8])],
                 "recv_backward1": [Op("pd_op.scale"), recv(6, [4, 8], paddle.float16), recv(5, [2, 8])],
                 "forward0": [Op("pd_op.matmul")]},
                [("recv_forward0", 0), ("forward0", 0), ("recv_backward1", 0), ("recv_forward0", 1)])
    assert sc.recv_plans(plan, rank=1) == {"paddle_ext:p2p:2>1": [128, 64, 128], "paddle_ext:p2p:0>1": [64]}


def test_a_dynamic_dimension_leaves_only_its_channel_without_a_plan(groups):
    plan = Plan({"a": [recv(5, [-1, 8]), recv(6, [3, 8])], "b": [recv(5, [4, 8]), recv(7, [4, 8])]},
                [("a", 0), ("b", 0)])
    assert sc.recv_plans(plan, rank=1) == {"paddle_ext:p2p:0>1": [96]}


@pytest.mark.parametrize("value", ["0", "off"])
def test_switched_off_or_without_a_job_list_there_is_no_plan(groups, monkeypatch, value):
    plan = Plan({"a": [recv(5, [4, 8])]}, [("a", 0)])
    assert sc.recv_plans(None, rank=1) == {}
    monkeypatch.setenv("PADDLE_EXT_RECV_AHEAD", value)
    assert sc.recv_plans(plan, rank=1) == {}
