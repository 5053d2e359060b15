"""``checkpoint-cpu-load``: ``dist.load_state_dict`` on a CPU (gloo) job.

``dist.load_state_dict`` moves every tensor it reshards to the GPU with ``Tensor.cuda()``
("ValueError: No available device found." on CPU builds). On a gloo job the load runs with
``cuda()`` keeping tensors where they are, so a checkpoint saved under one plan loads under
another (the data moves by gloo broadcasts). ``needed`` is
:func:`~paddle_ext.compat.ports.backend.job_on_gloo`, asked again on every load: a GPU job gets
Paddle's loader as it is.

Importing this module imports no Paddle.
"""
from __future__ import annotations

from ..ports.backend import job_on_gloo
from ..version import require_paddle


def _stay_on_cpu(tensor, *args, **kwargs):
    """``Tensor.cuda`` during a checkpoint load on a CPU build: the tensor stays on the CPU."""
    return tensor


def apply():
    paddle = require_paddle("fix checkpoint-cpu-load")
    dist = paddle.distributed
    dcp_load = dist.flex_checkpoint.dcp.load_state_dict
    original = dcp_load.load_state_dict

    def load_state_dict(*args, **kwargs):
        if not job_on_gloo():  # a GPU job: Paddle's loader moves tensors to the GPU, as it should
            return original(*args, **kwargs)
        cuda = paddle.Tensor.cuda
        paddle.Tensor.cuda = _stay_on_cpu
        try:
            return original(*args, **kwargs)
        finally:
            paddle.Tensor.cuda = cuda

    load_state_dict.__doc__ = original.__doc__
    load_state_dict.__wrapped__ = original
    dcp_load.load_state_dict = load_state_dict
    dist.load_state_dict = load_state_dict
    return [(dcp_load, "load_state_dict", original), (dist, "load_state_dict", original)]


needed = job_on_gloo
