"""Reshard output buffers and transparent huge pages (paddle_ext.compat.ports.buffers).

The kernel's own accounting is the witness: after the first write, /proc/self/smaps shows the
buffer's mapping backed by huge pages (AnonHugePages) only when paddle-ext advised it, and the
buffer's contents are exactly what was written."""
import os
import subprocess
import sys

import numpy as np
import pytest

import paddle  # noqa: E402 - required: a broken install fails here, never skips

from paddle_ext.compat.ports import buffers as memory  # noqa: E402

PROBE = r"""
import numpy as np, paddle
from paddle_ext.compat.ports import buffers as memory

def huge_kib(ptr):
    # AnonHugePages of the mapping that holds ptr, in KiB
    cur = None
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and ":" not in head:
                lo, hi = (int(v, 16) for v in head.split("-"))
                cur = lo <= ptr < hi
            elif cur and line.startswith("AnonHugePages:"):
                return int(line.split()[1])
    return -1

src = paddle.to_tensor(np.arange(4 << 20, dtype="float32").reshape(4096, 1024))   # 16 MiB
out = memory.fresh(paddle, [4096, 1024], src.dtype)
advised = memory._madvise() is not None
paddle.assign(src, output=out)
inner = (out.data_ptr() + (2 << 20) - 1) & ~((2 << 20) - 1)   # the advice covers the 2 MiB-aligned part
print("mode", memory.huge_pages_mode(), "advised", advised, "huge_kib", huge_kib(inner),
      "equal", bool((out.numpy() == src.numpy()).all()))
small = memory.fresh(paddle, [16, 16], "float32")
print("small_advised", memory.advise_huge(small, 16 * 16 * 4))
"""


def _probe(env_extra):
    env = {**os.environ, **env_extra}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("mode")][0].split()
    fields = dict(zip(line[0::2], line[1::2]))
    small = [ln for ln in out.stdout.splitlines() if ln.startswith("small_advised")][0].split()[1]
    return fields, small


def test_fresh_buffer_gets_huge_pages_when_the_kernel_offers_them():
    fields, small = _probe({"PADDLE_EXT_HUGE_PAGES": "1"})
    assert fields["equal"] == "True"
    assert small == "False"                         # below MIN_BYTES: no syscall
    if fields["mode"] == "madvise":
        assert fields["advised"] == "True"
        assert int(fields["huge_kib"]) >= 2048, fields   # at least one 2 MiB page backs it
    else:                                           # always / never / no THP: plain paddle.empty
        assert fields["advised"] == "False"


def test_off_switch_leaves_plain_pages():
    fields, _ = _probe({"PADDLE_EXT_HUGE_PAGES": "0"})
    assert fields["advised"] == "False" and fields["equal"] == "True"
    if memory.huge_pages_mode() == "madvise":
        assert int(fields["huge_kib"]) == 0, fields      # without the advice the kernel uses 4 KiB pages


def test_fresh_shapes_and_dtypes():
    for shape, dtype in (([0], "float32"), ([3, 5], "int64"), ([1 << 20, 2], "float64")):
        t = memory.fresh(paddle, shape, dtype)
        assert list(t.shape) == shape and str(t.dtype).endswith(dtype)
    t = memory.fresh(paddle, [1 << 21], "float32")
    t.fill_(3.0)
    np.testing.assert_array_equal(t.numpy()[:: 1 << 18], np.full(8, 3.0, "float32"))
