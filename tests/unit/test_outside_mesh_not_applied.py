"""``install(pipeline_by_annotation=True)`` where the fix was not verified, or is not needed (one
process): one log line naming the reason, nothing patched or registered, and the rest of
``install()`` in effect (docs/compatibility.md, "Ranks outside a mesh"). Its effect on 2 ranks is
tests/multirank/test_outside_mesh.py."""
import logging
import re

import paddle
import pytest
from paddle.base import core

import paddle_ext
from paddle_ext.compat.ports import backend
from paddle_ext.compat.fixes import table


def _leaves_paddle_alone(caplog, match):
    backward = paddle.Tensor.backward
    backend._NOTED.discard("ranks-outside-mesh")
    with caplog.at_level(logging.WARNING, logger="paddle_ext"):
        names = paddle_ext.install(ranks_outside_mesh=True)
    assert paddle.Tensor.backward is backward
    assert not table.OPT_IN["ranks-outside-mesh"].is_applied()
    assert "ranks-outside-mesh" not in names and "dygraph-reshard" in names
    assert "no_device" not in core.get_all_custom_device_type()
    lines = [r.getMessage() for r in caplog.records if "pipeline_by_annotation" in r.getMessage()]
    assert len(lines) == 1 and "not applied" in lines[0]
    assert re.search(match, lines[0]), lines


def test_one_process_runs_as_on_paddle_alone(caplog):   # the pytest process: world size 1
    _leaves_paddle_alone(caplog, r"world size 1")
    # and a program on one process still runs (a pp dim of size 1: every rank in every mesh)
    mesh = paddle.distributed.ProcessMesh([0], dim_names=["pp"])
    x = paddle.distributed.shard_tensor(paddle.ones([2, 3]), mesh, [paddle.distributed.Replicate()])
    assert float((x @ x.T).sum()) == 12.0   # ones(2, 3) @ ones(3, 2): four 3s


def test_other_paddle_versions(caplog, monkeypatch):
    monkeypatch.setattr(paddle, "__version__", "3.2.0")
    _leaves_paddle_alone(caplog, r"verified on Paddle 3\.3\.1 only.*found Paddle 3\.2\.0")


def test_gpu_builds(caplog, monkeypatch):
    monkeypatch.setattr(paddle, "is_compiled_with_cuda", lambda: True)
    _leaves_paddle_alone(caplog, r"CPU wheel of Paddle; on this GPU/XPU build")


def test_a_real_custom_device(caplog, monkeypatch):
    monkeypatch.setattr(core, "get_all_custom_device_type", lambda: ["npu"])
    _leaves_paddle_alone(caplog, r"a real custom device is registered \(npu\)")
