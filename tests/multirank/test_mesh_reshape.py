"""A mesh reshape moves no data: 2x1 <-> 1x2, 1-D <-> 2-D, 2x2 <-> 4 of the same ranks, each rank
keeping its slice, runs locally after ``install()`` with and without ``dist.init_parallel_env()``
(Paddle alone raises "Can not reshard" for 2x1 <-> 1x2 unless FLAGS_enable_moe_utils=true; before
this, paddle-ext refused every one without init). Values against the dense tensor's slices,
gradients against the dense gradient (d sum(y * w) / dx = w), both on every rank."""
import numpy as np
import pytest

import mesh_reshape_ranks as mr
from paddle_ext.testing import run_ranks

pytestmark = pytest.mark.multirank


def _slice(full, mesh, names, rank):
    ids = np.array(mesh)
    coord = [int(c[0]) for c in np.nonzero(ids == rank)]
    index = [slice(None)] * full.ndim
    for dim, name in enumerate(names):
        if name != "R":
            d, n = int(name[1]), ids.shape[dim]
            step = full.shape[d] // n
            start = (index[d].start or 0) + coord[dim] * step if index[d] != slice(None) else coord[dim] * step
            if index[d] != slice(None):
                step = (index[d].stop - index[d].start) // n
                start = index[d].start + coord[dim] * step
            index[d] = slice(start, start + step)
    return full[tuple(index)]


def _check(cases, res):
    full = mr.dense()
    weight = np.arange(full.size, dtype="float32").reshape(full.shape) / full.size
    for rank, out in enumerate(res):
        for name, a, pa, b, pb in cases:
            got = out[name]
            assert "error" not in got, (rank, name, got)
            assert np.array_equal(got["local"], _slice(full, b, pb, rank)), (rank, name)
            assert np.array_equal(got["local"], _slice(full, a, pa, rank)), (rank, name)  # a pure reshape
            assert got["mesh"] == list(np.array(b).shape), (rank, name, got["mesh"])
            assert np.array_equal(got["grad"], _slice(weight, a, pa, rank)), (rank, name)


@pytest.mark.parametrize("init", [False, True], ids=["no-init", "init"])
def test_two_ranks(init, tmp_path):
    res = run_ranks(mr.run, nproc=2, args=(mr.CASES_2, init), timeout=240, log_dir=tmp_path)
    assert all(out["initialized"] == init for out in res)   # paddle-ext initialised nothing
    _check(mr.CASES_2, res)


def test_four_ranks_without_init(tmp_path):
    res = run_ranks(mr.run, nproc=4, args=(mr.CASES_4, False), timeout=300, log_dir=tmp_path)
    _check(mr.CASES_4, res)


def test_paddle_alone_refuses_what_install_runs(tmp_path):
    """The baseline this improves on: Paddle alone, no init, no flag: 2x1 -> 1x2 raises."""
    res = run_ranks(mr.run, nproc=2, args=(mr.CASES_2[:1], False, False), timeout=240, log_dir=tmp_path)
    assert all("Can not reshard" in out[mr.CASES_2[0][0]].get("error", "") for out in res), res


def test_a_change_that_moves_data_without_init_is_a_named_error(tmp_path):
    res = run_ranks(mr.not_a_reshape, nproc=2, timeout=240, log_dir=tmp_path)
    for msg in res:
        assert msg.startswith("ReshardPlanError") and "dist.init_parallel_env()" in msg, msg
