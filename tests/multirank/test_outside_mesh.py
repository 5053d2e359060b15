"""Issue 15 item 2, ranks outside a mesh: ``paddle_ext.install(ranks_outside_mesh=True)``.

On Paddle 3.3.1 CPU, any op on a DistTensor whose mesh excludes this rank dies with SIGSEGV
(``GetDefaultPlace`` reads an empty custom-device list). With the opt-in fix, on 2 gloo ranks:

* a matmul on mesh [0] runs on both ranks; rank 1's output has the global shape, mesh [0], [R]
  and no local data; rank 0's has the dense values;
* ``uninstall()`` restores ``Tensor.backward``, ``set_value`` and the comparisons, and then a
  non-member's ``loss.backward()``, ``set_value`` and ``labels != 0`` fail with Paddle's errors
  again (the patches are needed and reversible);
* ``set_value`` and ``set_state_dict`` into a layer of mesh [1] run on rank 0 without writing
  (rank 1 holds the values); a value of the wrong shape is refused on both ranks alike (an
  AssertionError: Paddle's on rank 1, paddle-ext's named one on rank 0);
* ``labels.unsqueeze(1) != 0`` on a tensor of mesh [1] (a causal-LM loss's ignore mask) runs on
  rank 0 too: a bool DistTensor of mesh [1], the right values on rank 1;
* a 2-stage model annotated for pipeline parallelism (every rank runs the whole forward, stage 0
  on mesh [0], stage 1 and the loss on mesh [1]) gives the dense model's loss and grads on the
  ranks that own them;
* a plain parameter that only a ``LocalLayer`` sees (PaddleNLP's MoE gate weight), declared
  with a Partial(sum) gradient over the ranks that split the tokens: both ranks get the dense
  gradient of all the tokens, over two steps (Paddle alone leaves each rank its own tokens' part,
  so data-parallel ranks stepped different gate weights);
* without the option the same matmul still kills rank 1 as Paddle alone does (the option is
  what makes the difference, and the default changes nothing), but first each rank holding a
  tensor whose mesh excludes it prints the one-line hint naming
  ``install(pipeline_by_annotation=True)``.
"""
import numpy as np
import pytest

import outside_mesh_ranks as om
from paddle_ext.errors import HarnessError
from paddle_ext.testing import run_ranks

pytestmark = pytest.mark.multirank


def test_ranks_outside_mesh_run_ops_and_pipeline_grads_equal_dense():
    ranks = run_ranks(om.with_fix, nproc=2, timeout=120)
    for rank, res in enumerate(ranks):
        assert "ranks-outside-mesh" in res["names"]
        assert res["device_types"] == ["no_device"] and res["env_device_type"] == "no_device"  # documented
        mm = res["matmul"]
        assert mm["shape"] == [2, 4] and mm["mesh"] == [0] and mm["placements"] == ["Replicate()"]
        assert mm["local_numel"] == (8 if rank == 0 else 0)
        # the seed patch is what lets a non-member's backward run: reverted, Paddle's seed fails
        assert "Place(cpu) != dst_place:Place(no_device:0)" in res["unpatched_backward"], res["unpatched_backward"]
    np.testing.assert_array_equal(ranks[0]["matmul"]["local"], np.full((2, 4), 6.0, "float32"))
    for rank, res in enumerate(ranks):
        cmp = res["compare"]
        assert cmp["mesh"] == [1] and cmp["shape"] == [4, 1] and cmp["dtype"] == "paddle.bool", cmp
    np.testing.assert_array_equal(ranks[1]["compare"]["local"], [[False], [True], [True], [False]])
    assert "Place(cpu) != dst_place:Place(no_device:0)" in ranks[0]["unpatched_compare"], ranks[0]["unpatched_compare"]
    assert ranks[1]["unpatched_compare"] == "[4, 1]"  # a member never needed the patch
    # set_value and set_state_dict: the member holds the values, the non-member ran without writing
    np.testing.assert_array_equal(ranks[1]["loaded"][0], np.arange(6, dtype="float32").reshape(3, 2) + 1)
    np.testing.assert_array_equal(ranks[1]["loaded"][1], np.ones(2, "float32"))
    assert ranks[0]["wrong_shape"].startswith("ValueMismatchError: set_value of") and "[3, 2]" in ranks[0]["wrong_shape"]
    assert ranks[1]["wrong_shape"].startswith("AssertionError: ")   # Paddle's own check on the member
    assert "memory's size is 0" in ranks[0]["unpatched_set_value"], ranks[0]["unpatched_set_value"]
    assert ranks[1]["unpatched_set_value"] == "ok"

    want_gate = om.dense_gate_grad()
    for rank, res in enumerate(ranks):
        gate = res["local_gate"]
        assert not gate["is_dist"] and gate["is_leaf"], gate   # the parameter itself is left as it was
        for grad in gate["grads"]:
            np.testing.assert_allclose(grad, want_gate, rtol=1e-5, atol=1e-6, err_msg=f"rank {rank}")

    want = om.dense()
    assert ranks[0]["loss_mesh"] == ranks[1]["loss_mesh"] == [1]
    assert ranks[0]["loss"] is None
    np.testing.assert_allclose(ranks[1]["loss"], want["loss"], rtol=1e-6)
    assert sorted(ranks[0]["grads"]) == ["emb", "w1"] and sorted(ranks[1]["grads"]) == ["w2"]
    for rank in (0, 1):
        for name, grad in ranks[rank]["grads"].items():
            np.testing.assert_allclose(grad, want[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_without_the_option_rank_outside_the_mesh_dies_as_with_paddle_alone(tmp_path):
    with pytest.raises(HarnessError) as info:
        run_ranks(om.without_fix, nproc=2, timeout=90, exit_timeout=30, log_dir=tmp_path)
    message = str(info.value)
    assert "rank 1" in message, message[-3000:]
    assert "exit code -11" in message or "Segmentation fault" in message, message[-3000:]
    # plain install()'s hint: one line on each rank, before the op that kills rank 1
    for rank, mesh in ((0, [1]), (1, [0])):
        log = (tmp_path / f"workerlog.{rank}").read_text()
        hint = f"paddle-ext: rank {rank} holds a DistTensor on mesh {mesh}, which excludes it"
        assert log.count(hint) == 1 and "install(pipeline_by_annotation=True) after" in log, log[-3000:]
        if rank == 1:
            assert log.index(hint) < log.index("SIGSEGV (@"), log[-3000:]
