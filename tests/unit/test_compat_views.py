"""The reshard executor writes into slices of its output; with Paddle's stride kernels off a
slice is a copy, so paddle-ext must refuse instead of returning zeros."""
import os
import subprocess
import sys

import pytest

PROBE = """
from paddle_ext.compat.ports.views import views_write_through, require_writable_views
from paddle_ext.errors import CompatError
print("writes_through", views_write_through())
try:
    require_writable_views("reshard of x")
    print("accepted")
except CompatError as exc:
    print("refused", exc)
"""


@pytest.mark.parametrize("flag", ["1", "0"])
def test_views_probe_follows_the_stride_kernel_flag(flag):
    env = {**os.environ, "FLAGS_use_stride_kernel": flag}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    if flag == "1":
        assert "writes_through True" in out.stdout and "accepted" in out.stdout, out.stdout
    else:
        assert "writes_through False" in out.stdout, out.stdout
        assert "refused reshard of x: tensor slices are copies" in out.stdout, out.stdout
        assert "FLAGS_use_stride_kernel=1" in out.stdout, out.stdout
