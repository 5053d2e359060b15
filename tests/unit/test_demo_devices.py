"""Where the demo's ranks run: CPU on gloo, or one GPU per rank; too few GPUs is a named error."""
import pytest

from paddle_ext.cli.demo import rank_devices


@pytest.mark.parametrize("cuda_build, gpus, backend, expected", [
    (False, 0, None, ("CPU", {})),
    (True, 0, None, ("CPU", {"PADDLE_DISTRI_BACKEND": "gloo", "CUDA_VISIBLE_DEVICES": ""})),
    (True, 8, "gloo", ("CPU", {})),            # the user asked for gloo: CPU ranks even with GPUs
    (True, 4, None, ("GPU", {})),
    (True, 8, "nccl", ("GPU", {})),
])
def test_ranks_run_where_the_machine_allows(cuda_build, gpus, backend, expected):
    assert rank_devices(4, cuda_build, gpus, backend) == expected


def test_fewer_gpus_than_ranks_says_what_would_work():
    with pytest.raises(ValueError) as info:
        rank_devices(4, True, 2, None)
    msg = str(info.value)
    assert "4 ranks, one GPU each, but 2 GPU(s) are visible" in msg
    assert "--list-plans" in msg and "PADDLE_DISTRI_BACKEND=gloo" in msg
