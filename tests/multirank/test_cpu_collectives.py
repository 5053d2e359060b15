"""Fix cpu-collectives: Paddle's own C++ P -> S and S -> S reshards on 2 CPU ranks, exact, and
reversible (one launch for both)."""
import numpy as np
import pytest

import cpu_collectives_ranks as cr
from paddle_ext.testing import run_ranks

pytestmark = pytest.mark.multirank


def test_paddles_c_plus_plus_p_to_s_and_s_to_s_run_exactly_with_the_hook_and_fail_without(tmp_path):
    per_rank = run_ranks(cr.without_then_with_the_hook, nproc=2, timeout=240, log_dir=tmp_path / "log")
    for rank, result in enumerate(per_rank):
        # Paddle's CPU kernel, before the hook and after unhook(): the error Paddle alone gives
        for phase in ("without", "after"):
            assert "CReduceScatterOp" in result[phase], (rank, phase, result[phase])
        assert result["installed"], "install() in a 2-rank gloo job did not apply cpu-collectives"
        assert result["calls"] == len(cr.CASES), result["calls"]
        for dtype, dim in cr.CASES:
            total = cr.partial_value(0, dtype) + cr.partial_value(1, dtype)
            block = np.split(total, 2, axis=dim)[rank]
            local, placements = result["out"][f"{dtype}/{dim}"]
            assert placements == [f"Shard(dim={dim})"], placements
            assert local.dtype == block.dtype and np.array_equal(local, block), (rank, dtype, dim)
        # S(i) -> S(j): Paddle's all_to_all, before the hook and after unhook(), then exact with it
        for phase in ("without_s", "after_s"):
            assert "all_to_all" in result[phase], (rank, phase, result[phase])
        assert result["calls_s"] >= len(cr.S_TO_S), result["calls_s"]
        for dtype, src, dst in cr.S_TO_S:
            block = np.split(cr.whole_value(dtype), 2, axis=dst)[rank]
            local, placements = result["out"][f"{dtype}/{src}->{dst}"]
            assert placements == [f"Shard(dim={dst})"], placements
            assert local.dtype == block.dtype and np.array_equal(local, block), (rank, dtype, src, dst)
