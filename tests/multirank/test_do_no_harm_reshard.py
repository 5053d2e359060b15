"""Do no harm: paddle-ext's reshard on real gloo ranks where it used to fail first.

* No ``dist.init_parallel_env()`` (Paddle's own auto-parallel tests and many user scripts): the
  same script launched with ``paddle.distributed.launch`` on 2 ranks, Paddle alone and with
  ``paddle_ext.install()``, gives the same values (and those are the dense tensor's); S->S, which
  Paddle alone cannot run on CPU (no all_to_all kernel), runs exactly with paddle-ext.
* Odd groups: S(0)->S(1), P->S and S->P on 3 and 5 ranks, and on a 3-rank sub-mesh group inside a
  world of 6, bit-exact against dense (they raised "need an even number of ranks" before).
* The backend decides (``paddle.distributed.get_backend``, a test double answering "NCCL"):
  what Paddle does exactly on NCCL goes to Paddle's native reshard, the kept cases run
  paddle-ext's executor; with "GLOO" nothing changes.
"""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import do_no_harm_ranks as dr
from paddle_ext.reshard.checks import Case, assemble_case, expected_bytes
from paddle_ext.testing import run_ranks

pytestmark = pytest.mark.multirank
HERE = Path(__file__).resolve().parent


def _launch_no_init(out: Path, mode: str) -> None:
    cmd = [sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", "2",
           "--log_dir", str(out / f"log_{mode}"), str(HERE / "do_no_harm_ranks.py"), str(out), mode]
    proc = subprocess.run(cmd, cwd=HERE, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    logs = "".join(p.read_text(errors="replace")[-2000:] for p in sorted((out / f"log_{mode}").glob("workerlog.*")))
    assert proc.returncode == 0, f"{mode} run failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{logs}"


def test_without_init_parallel_env_values_match_paddle_alone(tmp_path):
    _launch_no_init(tmp_path, "paddle")
    _launch_no_init(tmp_path, "ext")
    dense = dr._dense((4, 6))
    want = {"S0->R": [dense, dense], "R->S1": [dense[:, :3], dense[:, 3:]], "R->S0": [dense[:2], dense[2:]],
            "P->R": [dense, dense]}
    for rank in (0, 1):
        alone, ext = np.load(tmp_path / f"paddle_{rank}.npz"), np.load(tmp_path / f"ext_{rank}.npz")
        assert int(ext["is_initialized"][0]) == 0  # paddle-ext did not initialise anything
        # S->S goes to Paddle's own reshard either way: alone its CPU all_to_all only throws,
        # with paddle-ext the cpu-collectives hook serves it, exactly
        assert "all_to_all" in str(alone["S0->S1 error"][0]), alone["S0->S1 error"]
        assert str(ext["S0->S1 error"][0]) == "none" and np.array_equal(ext["S0->S1"], want["R->S1"][rank])
        for key, per_rank in want.items():
            assert np.array_equal(alone[key], ext[key]), (rank, key)
            assert np.allclose(ext[key], per_rank[rank], rtol=0, atol=1e-5), (rank, key)
    log = "".join(p.read_text(errors="replace") for p in (tmp_path / "log_ext").glob("workerlog.*"))
    assert log.count("parallel environment is not initialized") == 2  # once per process


ODD_PAIRS = [("[S(0)]", "[S(1)]"), ("[S(1)]", "[S(0)]"), ("[P(sum)]", "[S(0)]"), ("[P(avg)]", "[S(1)]"),
             ("[S(0)]", "[P(sum)]"), ("[S(1)]", "[P(max)]")]


def _cases(mesh, shapes, tag):
    return [Case(f"{tag}:{shape}:{a}->{b}", shape, mesh, a, mesh, b)
            for shape in shapes for a, b in ODD_PAIRS]


def _check(cases, res):
    bad = []
    for c in cases:
        ok, why = assemble_case(c, [r[c.id] for r in res])
        if not ok:
            bad.append(f"{c.id}: {why}")
    assert not bad, f"{len(bad)} of {len(cases)} failed:\n" + "\n".join(bad[:20])


@pytest.mark.parametrize("n", [3, 5])
def test_odd_worlds_are_bit_exact(n, tmp_path):
    cases = _cases(tuple(range(n)), [(2 * n, 3 * n), (n + 2, 2 * n - 1)], f"w{n}")
    res = run_ranks(dr.odd_world, nproc=n, args=(cases,), timeout=400, log_dir=tmp_path)
    _check(cases, res)
    even = [c for c in cases if c.shape == (2 * n, 3 * n) and "P(" not in c.dst]
    for c in even:  # even splits: a scatter's chunks carry no padding, so exactly the plan's bytes
        assert max(r[c.id].received for r in res) <= expected_bytes(c), c.id


def test_a_3_rank_group_in_a_world_of_6(tmp_path):
    rows = ((0, 1, 2), (3, 4, 5))
    cases = _cases(rows[0], [(6, 9), (5, 4)], "row0") + _cases(rows[1], [(6, 9)], "row1") + [
            Case("2x3:[R,S(0)]->[R,S(1)]", (6, 9), rows, "[R, S(0)]", rows, "[R, S(1)]"),
            Case("2x3:[S(1),P(sum)]->[S(1),S(0)]", (6, 9), rows, "[S(1), P(sum)]", rows, "[S(1), S(0)]")]
    res = run_ranks(dr.odd_world, nproc=6, args=(cases, [rows]), timeout=500, log_dir=tmp_path)
    _check(cases, res)


M01, M10 = (0, 1), (1, 0)
NATIVE_ON_NCCL = {  # Paddle does these exactly on NCCL; on CPU its all_to_all (S->S) and reduce_scatter
    # (P->S) run on install()'s cpu-collectives hook, so every case is checked against dense
    "R->S(0)": Case("R->S(0)", (4, 6), M01, "[R]", M01, "[S(0)]"),
    "S(0)->R": Case("S(0)->R", (4, 6), M01, "[S(0)]", M01, "[R]"),
    "P(sum)->R": Case("P(sum)->R", (4, 6), M01, "[P(sum)]", M01, "[R]"),
    "S(0)->S(1)": Case("S(0)->S(1)", (4, 6), M01, "[S(0)]", M01, "[S(1)]"),
    "P(sum)->S(0)": Case("P(sum)->S(0)", (4, 6), M01, "[P(sum)]", M01, "[S(0)]"),
}
KEPT_ON_NCCL = [  # what Paddle gets wrong or cannot do: paddle-ext's executor on every backend
    Case("partial-target-op:R->P(avg)", (4, 6), M01, "[R]", M01, "[P(avg)]"),
    Case("partial-target-op:S(0)->P(max)", (4, 6), M01, "[S(0)]", M01, "[P(max)]"),
    Case("s-to-p:S(1)->P(sum)", (4, 6), M01, "[S(1)]", M01, "[P(sum)]"),
    Case("uneven:S(0)->R", (5, 7), M01, "[S(0)]", M01, "[R]"),
    Case("uneven:S(0)->S(1)", (5, 7), M01, "[S(0)]", M01, "[S(1)]"),
    Case("r-to-p-off-rank-0:R->P(sum)", (4, 6), M10, "[R]", M10, "[P(sum)]"),
    Case("cross-mesh:S(0)->S(1)", (4, 6), M01, "[S(0)]", M10, "[S(1)]"),
]


@pytest.fixture(scope="module")
def backend_runs(tmp_path_factory):
    cases = list(NATIVE_ON_NCCL.values()) + KEPT_ON_NCCL
    out = {}
    for answer in ("NCCL", "GLOO"):
        out[answer] = run_ranks(dr.backend_double, nproc=2, args=(cases, answer), timeout=300,
                                log_dir=tmp_path_factory.mktemp(f"backend_{answer}"))
    return cases, out


def test_on_nccl_what_paddle_does_exactly_goes_to_paddle(backend_runs):
    _, runs = backend_runs
    res = runs["NCCL"]
    for cid, case in NATIVE_ON_NCCL.items():
        assert all(r[cid].extra["native"] for r in res), f"{cid} did not go to Paddle's native reshard"
        ok, why = assemble_case(case, [r[cid] for r in res])
        assert ok, f"{cid}: {why}"


def test_on_nccl_the_kept_cases_run_paddle_ext(backend_runs):
    _, runs = backend_runs
    res = runs["NCCL"]
    for case in KEPT_ON_NCCL:
        assert not any(r[case.id].extra["native"] for r in res), f"{case.id} went to Paddle"
        ok, why = assemble_case(case, [r[case.id] for r in res])
        assert ok, f"{case.id}: {why}"


def test_on_gloo_nothing_changes(backend_runs):
    cases, runs = backend_runs
    for case in cases:  # 1-D meshes of the whole world: paddle-ext's executor, bit-exact
        assert not any(r[case.id].extra["native"] for r in runs["GLOO"]), case.id
        ok, why = assemble_case(case, [r[case.id] for r in runs["GLOO"]])
        assert ok, f"GLOO {case.id}: {why}"


def test_bfloat16_and_bool_gather_bit_exact(tmp_path):
    res = run_ranks(dr.gather_dtypes, nproc=2, timeout=200, log_dir=tmp_path)
    dense = dr._dense((4, 6))
    want = {"bfloat16": dense, "bool": (dense > 0).astype("float32")}  # small integers: exact in bf16
    for r in res:
        assert len(r) == 4
        for key, (value, dtype, plan, gathers) in r.items():
            name = key.split(":")[0]
            assert name in dtype and plan != "native", (key, dtype, plan)
            assert np.array_equal(value, want[name]), key
            if "S(0)" in key:  # dim-0 slabs: one gloo all_gather straight into the output
                assert gathers == 1, (key, gathers)
