"""Fix cpu-reduce-scatter: Paddle's own C++ P -> S reshard on 2 CPU ranks, exact, and reversible."""
import numpy as np
import pytest

import cpu_reduce_scatter_ranks as cr
from paddle_ext.testing import run_ranks

pytestmark = pytest.mark.multirank


def test_paddles_c_plus_plus_p_to_s_runs_exactly_with_the_hook_and_fails_without(tmp_path):
    per_rank = run_ranks(cr.p_to_s_without_then_with_the_hook, nproc=2, timeout=240, log_dir=tmp_path / "log")
    for rank, result in enumerate(per_rank):
        # Paddle's CPU kernel, before the hook and after unhook(): the error Paddle alone gives
        for phase in ("without", "after"):
            assert "CReduceScatterOp" in result[phase], (rank, phase, result[phase])
        assert result["installed"], "install() in a 2-rank gloo job did not apply cpu-reduce-scatter"
        assert result["calls"] == len(cr.CASES), result["calls"]
        for dtype, dim in cr.CASES:
            total = cr.partial_value(0, dtype) + cr.partial_value(1, dtype)
            block = np.split(total, 2, axis=dim)[rank]
            local, placements = result["out"][f"{dtype}/{dim}"]
            assert placements == [f"Shard(dim={dim})"], placements
            assert local.dtype == block.dtype and np.array_equal(local, block), (rank, dtype, dim)
