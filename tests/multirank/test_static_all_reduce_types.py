"""The static Engine's all_reduce on gloo (compat/ports/static_collectives.py lowers
``pd_op.all_reduce`` to paddle-ext's ``pe_gloo_all_reduce``): every reduce type the lowering
accepts reduces as its name says, against numpy, on 2 ranks. (Its table once took another enum's
numbering: max reduced by min, min by product.)"""
import numpy as np
import pytest

from paddle_ext.testing import run_ranks

pytestmark = pytest.mark.multirank

# phi::ReduceType codes, as pd_op.all_reduce's reduce_type attribute holds them
PHI_REDUCE = {"sum": 0, "max": 1, "min": 2, "prod": 3}


def _values(rank: int):
    return np.array([rank + 2.0, 5.0 - rank, -1.0 - rank], dtype="float32")


def lowered_all_reduce():
    import paddle
    import paddle.distributed as dist

    from paddle_ext.compat.ports.static_collectives import _GLOO_REDUCE, load_gloo_ops

    dist.init_parallel_env()
    ops = load_gloo_ops()
    x = paddle.to_tensor(_values(dist.get_rank()))
    return {name: ops.pe_gloo_all_reduce(x, "0", _GLOO_REDUCE[code]).numpy() for name, code in PHI_REDUCE.items()}


def test_every_reduce_type_reduces_as_named(tmp_path):
    res = run_ranks(lowered_all_reduce, nproc=2, timeout=300, log_dir=tmp_path)
    both = np.stack([_values(0), _values(1)])
    want = {"sum": both.sum(0), "max": both.max(0), "min": both.min(0), "prod": both.prod(0)}
    for r in res:
        for name in PHI_REDUCE:
            np.testing.assert_array_equal(r[name], want[name], err_msg=name)
