"""``install(ranks_outside_mesh=True)`` refuses, with a named CompatError and before anything is
patched or registered, where the fix was not verified (docs/compatibility.md, "Ranks outside a
mesh"). Its effect on 2 ranks is tests/multirank/test_outside_mesh.py."""
import paddle
import pytest
from paddle.base import core

import paddle_ext
from paddle_ext.compat import outside_mesh
from paddle_ext.errors import CompatError


def _refuses(match):
    backward = paddle.Tensor.backward
    with pytest.raises(CompatError, match=match):
        paddle_ext.install(ranks_outside_mesh=True)
    assert paddle.Tensor.backward is backward
    assert not outside_mesh.FIXES["ranks-outside-mesh"].is_applied()
    assert "no_device" not in core.get_all_custom_device_type()


def test_refuses_outside_a_multi_rank_job():   # the pytest process, like the launcher: world size 1
    _refuses(r"not one \(world size 1\).*launcher")


def test_refuses_other_paddle_versions(monkeypatch):
    monkeypatch.setattr(paddle, "__version__", "3.2.0")
    _refuses(r"verified on Paddle 3\.3\.1 only.*found Paddle 3\.2\.0")


def test_refuses_gpu_builds(monkeypatch):
    monkeypatch.setattr(paddle, "is_compiled_with_cuda", lambda: True)
    _refuses(r"CPU wheel of Paddle; this Paddle is a GPU/XPU build")


def test_refuses_when_a_real_custom_device_is_registered(monkeypatch):
    monkeypatch.setattr(core, "get_all_custom_device_type", lambda: ["npu"])
    _refuses(r"a real custom device is registered \(npu\)")
