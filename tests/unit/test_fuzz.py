"""Fuzzing the three pure engines with hypothesis: reshard planner, rule engine, schedule generators.

Each property says: the input is either refused with paddle-ext's *named* error for that engine,
or the answer is right against a ground truth computed on simulated ranks.

* reshard: random shapes (uneven, size 0 and 1 dims), 1-D and 2-D meshes of sizes 1-4, every
  placement (all four Partial ops, co-shards), same mesh and across meshes. Either
  ``plan_reshard`` raises ``ReshardPlanError``, or the plan runs on simulated ranks (blocking
  sends, gloo sequence numbers) and ``assemble(dst)`` equals the dense tensor (bit for bit for
  integers, allclose for floats).
* rules: random einsum-like notations (multi-letter factors, ``...``, ``1``, broadcasting,
  reductions with one op, ``replicate``/``even``/``merge: follow`` clauses, one or two outputs,
  single-letter spelling) and random corruptions of them, with random placements. Either the
  engine raises ``ShardingRuleError``, or the dense inputs sharded per the *required* input
  specs, run through the op the notation describes on every simulated rank and assembled per the
  *claimed* output specs, equal the dense result.
* schedules: random ``(name, p, m, v)``. Either ``ScheduleError`` naming the schedule and the
  parameter, or the schedule validates, lowers with ``add_send_recv``, validates again, simulates
  with blocking sends without deadlock, and the makespan is at least every rank's busy time.

Each property runs twice: a bounded, derandomized version (``MAX_EXAMPLES`` each, so a red run
is reproducible) and a long version marked ``slow`` (``LONG_EXAMPLES`` fresh examples over wider
ranges, where new bugs turn up; hypothesis prints the failing example). Both run in CI; deselect
the long ones locally with ``-m "not slow"``.
"""
from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from paddle_ext.errors import ReshardPlanError, ScheduleError, ShardingRuleError
from paddle_ext.passes import (Costs, add_send_recv, compute_only, generate_schedule, get_schedule_info,
                               schedule_names, simulate_schedule, validate_schedule)
from paddle_ext.placements import DistSpec, Partial, Replicate, Shard
from paddle_ext.reshard import format_plan, plan_reshard, simulate_reshard
from paddle_ext.spmd.einsum import infer_einsum
from paddle_ext.spmd.notation import ONE, parse_notation
from paddle_ext.simulated_ranks import assemble, shard_dense, simulate

MAX_EXAMPLES = 60
LONG_EXAMPLES = 500


def long_fuzz(fn):
    """``slow``: runs in CI with the rest; ``-m "not slow"`` leaves it out of a quick local run."""
    return pytest.mark.slow(fn)


# CI: a fixed set of examples per test (derandomized), so a red run is reproducible; the long
# variants draw fresh examples each run and are where new bugs turn up
ci = settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
long = settings(max_examples=LONG_EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
OPS = ("sum", "avg", "max", "min")


# ================================================================================================
# reshard planner
# ================================================================================================
MESHES = [(1,), (2,), (3,), (4,), (1, 1), (1, 2), (2, 1), (2, 2), (1, 3), (3, 1), (2, 3), (3, 2),
          (1, 4), (4, 1)]
MESHES_LONG = MESHES + [(2, 4), (4, 2), (3, 3), (4, 4)]


def placement(ndim: int):
    shard = [st.builds(Shard, st.integers(0, ndim - 1))] if ndim else []
    return st.one_of(st.just(Replicate()), *shard, st.builds(Partial, st.sampled_from(OPS)))


@st.composite
def layouts(draw, meshes=MESHES, max_size=7, cross=False):
    """(src, dst, src_ranks, dst_ranks, dtype); co-shards are drawn on purpose half the time."""
    # ndim >= 1: shard_dense turns a 0-d tensor into shape (1,) (test_shard_dense_keeps_a_0d_shape)
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.sampled_from([0, 1, 2, 3, 4, 5, max_size])) for _ in range(ndim))
    mesh = draw(st.sampled_from(meshes))
    dmesh = draw(st.sampled_from(meshes)) if cross else mesh

    def pls(m):
        out = [draw(placement(ndim)) for _ in m]
        if ndim and len(m) > 1 and draw(st.booleans()):  # co-shard one tensor dim over every mesh dim
            d = draw(st.integers(0, ndim - 1))
            out = [Shard(d) if not isinstance(p, Partial) or draw(st.booleans()) else p for p in out]
        return tuple(out)

    src, dst = DistSpec(shape, mesh, pls(mesh)), DistSpec(shape, dmesh, pls(dmesh))
    s_ranks = d_ranks = None
    if cross:
        world = list(range(max(8, src.world_size, dst.world_size)))
        s_ranks = draw(st.permutations(world))[:src.world_size]
        d_ranks = draw(st.permutations(world))[:dst.world_size]
    dtype = draw(st.sampled_from([np.int32, np.int64, np.float32, np.float64]))
    return src, dst, s_ranks, d_ranks, np.dtype(dtype)


def _dense(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    if dtype.kind == "i":
        return rng.integers(-50, 50, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def check_reshard(src, dst, s_ranks, d_ranks, dtype, seed=0):
    if dtype.kind == "i" and any(isinstance(p, Partial) and p.op == "avg" for p in src.placements):
        dtype = np.dtype(np.float64)  # an integer P(avg) source has no exact local parts to start from
    dense = _dense(src.shape, dtype, seed)
    try:
        plan = plan_reshard(src, dst, src_ranks=s_ranks, dst_ranks=d_ranks, itemsize=dtype.itemsize, dtype=dtype)
    except ReshardPlanError:
        return None  # refused with the named error: allowed
    local = shard_dense(dense, src, seed=seed)
    out = simulate_reshard(local, src, dst, src_ranks=s_ranks, dst_ranks=d_ranks, plan=plan, timeout=10)
    where = f"{src} -> {dst} ranks {s_ranks} -> {d_ranks}: {format_plan(plan)}"
    if dtype.kind == "i":
        got = assemble(out, dst, rtol=0, atol=0)
        assert got.dtype == dense.dtype and np.array_equal(got, dense), where
    else:
        got = assemble(out, dst)
        assert got.dtype == dense.dtype, where
        assert np.allclose(got, dense, rtol=1e-4, atol=1e-5), where
    return plan


@ci
@given(layouts())
@example((DistSpec((3, 6), (2, 2), "[S(0),S(0)]"), DistSpec((3, 6), (2, 2), "[P(max),P(min)]"), None, None,
          np.dtype(np.int32)))
@example((DistSpec((5,), (2, 2), "[P(min),P(max)]"), DistSpec((5,), (2, 2), "[S(0),S(0)]"), None, None,
          np.dtype(np.float32)))
def test_fuzz_reshard_same_mesh(case):
    check_reshard(*case)


@ci
@given(layouts(cross=True))
@example((DistSpec((5, 7), (2, 2), "[S(0),P(sum)]"), DistSpec((5, 7), (2,), "[S(1)]"), (0, 1, 2, 3), (4, 5),
          np.dtype(np.int64)))
def test_fuzz_reshard_cross_mesh(case):
    check_reshard(*case)


@pytest.mark.parametrize("placements", ["[R]", "[P(sum)]", "[P(max)]"])
def test_shard_dense_keeps_a_0d_shape(placements):
    """shard_dense used to return shape (1,) for a 0-d tensor (np.ascontiguousarray promotes 0-d
    to 1-d), so assemble() refused its own output."""
    spec = DistSpec((), (2,), placements)
    local = shard_dense(np.array(5.0), spec)
    assert all(a.shape == () for a in local.values()), {c: a.shape for c, a in local.items()}
    assert assemble(local, spec) == 5.0


def test_assemble_int64_avg_is_exact():
    """assemble used to reduce P(avg) of int64 through a float64 mean, which rounds values beyond
    2**53 (e.g. the P(min) neutral iinfo(int64).max that S->P(min) writes became -2**63)."""
    big = np.iinfo(np.int64).max
    assert assemble({(0,): np.array([big], np.int64)}, DistSpec((1,), (1,), "[P(avg)]"))[0] == big
    # found by the fuzz: [S(0),R] -> [P(min),P(avg)] on mesh 2x1 rebuilt 35 as -2**63
    src, dst = DistSpec((1,), (2, 1), "[S(0),R]"), DistSpec((1,), (2, 1), "[P(min),P(avg)]")
    out = simulate_reshard(shard_dense(np.array([35], np.int64), src), src, dst)
    assert assemble(out, dst, rtol=0, atol=0)[0] == 35


@pytest.mark.parametrize("src,dst,values", [
    ("[S(0),S(0)]", "[P(avg),P(max)]", [7, -24]),
    ("[S(0),S(0)]", "[P(avg),P(min)]", [7, 24]),
    ("[S(0),P(sum)]", "[P(min),R]", [35]),
], ids=["avg-over-max", "avg-over-min", "min-over-sum"])
def test_int_max_min_neutral_overflows(src, dst, values):
    """On integer tensors the P(max)/P(min) neutral element (iinfo.min/max, written by S->P(max|min))
    used to meet sum/avg arithmetic on another mesh dim (x n for S->P(avg), + for P(sum)) and wrap
    around (int32 min * 2 == 0), so [S(0),S(0)] -> [P(avg),P(max)] rebuilt -24 as 0. Given the dtype,
    the planner now routes such plans through R instead."""
    dense = np.array(values, np.int32)
    src, dst = DistSpec(dense.shape, (2, 2), src), DistSpec(dense.shape, (2, 2), dst)
    out = simulate_reshard(shard_dense(dense, src), src, dst)
    assert np.array_equal(assemble(out, dst, rtol=0, atol=0), dense), format_plan(plan_reshard(src, dst))


@long_fuzz
@long
@given(layouts(meshes=MESHES_LONG, max_size=9))
def test_fuzz_reshard_same_mesh_long(case):
    check_reshard(*case)


@long_fuzz
@long
@given(layouts(meshes=MESHES_LONG, max_size=9, cross=True))
def test_fuzz_reshard_cross_mesh_long(case):
    check_reshard(*case)


# ================================================================================================
# rule engine
# ================================================================================================
NAMES = ("a", "b", "k", "m", "n", "x", "hid", "seq", "batch", "k2", "d_model", "vocab")


@st.composite
def notations(draw, max_inputs=3, max_rank=3):
    """(text, shapes) of a well-defined random notation: product of the inputs, then one
    reduction op over the factors absent from the outputs; a second output permutes the first."""
    single = draw(st.booleans())
    pool = list("abkmnxyz") if single else list(NAMES)
    factors = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=5, unique=True))
    sizes = {f: draw(st.sampled_from([0, 1, 2, 3, 4, 5, 6])) for f in factors}
    use_ell = not single and draw(st.integers(0, 3)) == 0
    n_batch = draw(st.integers(1, 2)) if use_ell else 0
    batch = [draw(st.sampled_from([1, 2, 3, 4])) for _ in range(n_batch)]
    n_in = draw(st.integers(1, max_inputs))
    inputs, shapes = [], []
    for i in range(n_in):
        facts = draw(st.lists(st.sampled_from(factors), min_size=0 if n_in > 1 else 1,
                              max_size=min(max_rank, len(factors)), unique=True))
        shape = [1 if draw(st.integers(0, 4)) == 0 else sizes[f] for f in facts]  # size 1: broadcast
        ones = draw(st.integers(0, 5)) == 0 and not single
        if ones:  # a literal '1' dim
            pos = draw(st.integers(0, len(facts)))
            facts, shape = facts[:pos] + [ONE] + facts[pos:], shape[:pos] + [1] + shape[pos:]
        ell = use_ell and draw(st.booleans())
        if ell:
            k = draw(st.integers(0, n_batch))
            extra = [1 if draw(st.integers(0, 3)) == 0 else s for s in batch[n_batch - k:]]
            facts, shape = ["..."] + facts, extra + shape
        inputs.append(facts)
        shapes.append(tuple(shape))
    assume(any(f not in ("...", ONE) for facts in inputs for f in facts) or any(shapes))
    used = list(dict.fromkeys(f for facts in inputs for f in facts if f not in ("...", ONE)))
    has_ell = any("..." in facts for facts in inputs)
    out = draw(st.lists(st.sampled_from(used), max_size=len(used), unique=True)) if used else []
    if has_ell:  # always kept: a '...' in no output is refused (test_dropped_ellipsis_is_refused)
        out = ["..."] + out
    if not single and draw(st.integers(0, 5)) == 0:
        out = out + [ONE]
    outputs = [out]
    if draw(st.integers(0, 4)) == 0 and out:
        outputs.append(draw(st.permutations(out)))
    reduced = [f for f in used if f not in out]
    op = draw(st.sampled_from(OPS))
    clauses = []
    if reduced and (op != "sum" or draw(st.booleans())):
        clauses.append(f"reduce({op}): " + " ".join(reduced) if op != "sum" or draw(st.booleans())
                       else "reduce: " + " ".join(reduced))
    rep = draw(st.lists(st.sampled_from(used), max_size=2, unique=True)) if used else []
    if rep:
        clauses.append("replicate: " + " ".join(rep))
    even = draw(st.lists(st.sampled_from(used), max_size=2, unique=True)) if used else []
    if even:
        clauses.append("even: " + " ".join(even))
    if draw(st.integers(0, 3)) == 0:
        clauses.append("merge: follow")
    compact = single and not clauses and all(len(f) == 1 for facts in inputs + outputs for f in facts) \
        and all(facts for facts in inputs)
    if compact:
        body = ",".join("".join(f) for f in inputs) + "->" + ",".join("".join(f) for f in outputs)
    else:
        body = ", ".join(" ".join(f) for f in inputs) + " -> " + ", ".join(" ".join(f) for f in outputs)
    text = " | ".join([body] + clauses)
    return text, shapes


@st.composite
def corrupted(draw):
    text, shapes = draw(notations())
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(text)))
        kind = draw(st.sampled_from(["delete", "insert", "swap", "dup"]))
        if kind == "delete" and text:
            i = min(i, len(text) - 1)
            text = text[:i] + text[i + 1:]
        elif kind == "insert":
            piece = draw(st.sampled_from([",", "-", ">", "->", "|", ".", "...", " ", "1", "(", ")", ":", "z",
                                          "reduce(max): ", "replicate: ", "even: ", "merge: ", "| reduce: a"]))
            text = text[:i] + piece + text[i:]
        elif kind == "swap" and len(text) > 1:
            i = min(i, len(text) - 2)
            text = text[:i] + text[i + 1] + text[i] + text[i + 2:]
        elif kind == "dup":
            j = draw(st.integers(i, min(len(text), i + 6)))
            text = text[:j] + text[i:j] + text[j:]
    return text, shapes


RULE_MESHES = [(1,), (2,), (3,), (4,), (2, 2), (1, 2), (2, 3), (3, 2)]


@st.composite
def specs_for(draw, shapes, meshes=RULE_MESHES):
    mesh = draw(st.sampled_from(meshes))
    return [DistSpec(s, mesh, tuple(draw(placement(len(s))) for _ in mesh)) for s in shapes]


def _apply(binding_inputs, outputs, op, arrays):
    """The op a well-defined notation describes: broadcast product, then reduce with ``op``."""
    factors = list(dict.fromkeys(f for facts in binding_inputs for f in facts if f != ONE))
    full = np.ones([1] * len(factors))
    for facts, arr in zip(binding_inputs, arrays):
        keep = [d for d, f in enumerate(facts) if f != ONE]
        a = np.asarray(arr, dtype=np.float64).reshape([arr.shape[d] for d in keep])
        pos = [factors.index(facts[d]) for d in keep]
        order = sorted(range(len(pos)), key=lambda k: pos[k])
        a = a.transpose(order)
        shape = [1] * len(factors)
        for k in order:
            shape[pos[k]] = arr.shape[keep[k]]
        full = full * a.reshape(shape)
    results = []
    for out in outputs:
        named = [f for f in out if f != ONE]
        axes = tuple(k for k, f in enumerate(factors) if f not in named)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # mean of an empty shard
            if op == "sum":
                r = full.sum(axis=axes)
            elif op == "avg":
                r = full.mean(axis=axes) if axes else full
            elif op == "max":
                r = full.max(axis=axes, initial=-np.inf)
            else:
                r = full.min(axis=axes, initial=np.inf)
        kept = [f for f in factors if f in named]
        r = r.transpose([kept.index(f) for f in named]) if named else r
        for k, f in enumerate(out):
            if f == ONE:
                r = np.expand_dims(r, k)
        results.append(np.asarray(r))
    return tuple(results)


def _well_defined(n) -> str | None:
    """The one reduction op of a notation this fuzz can compute densely, or None."""
    ops = {o for _, o in n.reduce}
    if len(ops) > 1:
        return None
    outs = [frozenset(o.factors) - {ONE} for o in n.outputs]
    if len(set(outs)) > 1:
        return None
    if any(len(o.factors) != len(set(o.factors)) for o in n.inputs + n.outputs):
        return None
    return next(iter(ops), "sum")


def check_rule(text, specs):
    try:
        result = infer_einsum(text, specs, op="fuzz")
    except ShardingRuleError:
        return None  # refused with the named error: allowed
    n = parse_notation(text)
    binding = n.bind([s.shape for s in specs])
    assert len(result.inputs) == len(specs) and len(result.outputs) == len(n.outputs), str(result)
    assert tuple(result.given) == tuple(specs)
    for s, r in zip(specs, result.inputs):
        assert r.shape == s.shape and r.mesh_shape == s.mesh_shape, str(result)
    for o, shape in zip(result.outputs, binding.output_shapes):
        assert o.shape == shape, f"{result}: output shape {o.shape} != {shape}"
    assert {r.index for r in result.reshards} == {i for i, (g, q) in enumerate(zip(specs, result.inputs))
                                                  if g.placements != q.placements}
    op = _well_defined(n)
    if op is None:
        return result
    rng = np.random.default_rng(len(text))
    dense = [rng.integers(-3, 4, size=s.shape).astype(np.float64) for s in specs]
    want = _apply(binding.inputs, binding.outputs, op, dense)
    got = simulate(lambda *xs: _apply(binding.inputs, binding.outputs, op, xs), dense, result.inputs,
                   result.outputs)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and np.allclose(g, w, rtol=1e-6, atol=1e-6, equal_nan=True), \
            f"{text!r} on shapes {[s.shape for s in specs]}: {result} -- output {k} does not rebuild the dense value"
    return result


@st.composite
def rule_cases(draw, source=notations(), meshes=RULE_MESHES):
    text, shapes = draw(source)
    return text, draw(specs_for(shapes, meshes))


@ci
@given(rule_cases())
@example(("m k, k n -> m n | reduce(max): k", [DistSpec((4, 5), (2,), "[S(1)]"), DistSpec((5, 3), (2,), "[R]")]))
@example(("batch hid -> batch | reduce(avg): hid",
          [DistSpec((3, 6), (2, 2), "[S(1),S(1)]")]))
@example(("... x, x -> ... x", [DistSpec((2, 1, 5), (2, 2), "[S(1),P(sum)]"), DistSpec((5,), (2, 2), "[S(0),R]")]))
def test_fuzz_rule_engine_valid_notations(case):
    check_rule(*case)


@pytest.mark.parametrize("text,specs", [
    ("... a -> a", [DistSpec((4, 3), (2,), "[S(0)]")]),
    ("... a, a -> a", [DistSpec((4, 3), (2,), "[S(0)]"), DistSpec((3,), (2,), "[R]")]),
    ("... a, 1 -> 1, 1 | merge: follow", [DistSpec((1, 1), (2,), "[S(0)]"), DistSpec((1,), (2,), "[R]")]),
], ids=["reduce-batch", "with-vector", "found-by-fuzz"])
def test_dropped_ellipsis_is_refused(text, specs):
    """A '...' in the inputs but in no output was neither a reduction nor refused, so sharded batch
    dims gave a Replicate claim for what is a per-rank partial sum; the notation is now refused."""
    with pytest.raises(ShardingRuleError, match=r"'\.\.\.' \(the batch dims\) appears in an input but in no output"):
        parse_notation(text)
    with pytest.raises(ShardingRuleError, match=re.escape(repr(text))):
        infer_einsum(text, specs, op="fuzz")
    # the spelling the error suggests (name the batch dim, declare it a reduction) is right on simulated ranks
    if "|" not in text:
        assert check_rule(text.replace("...", "b", 1) + " | reduce: b", specs) is not None


@ci
@given(rule_cases(source=corrupted()))
def test_fuzz_rule_engine_corrupted_notations(case):
    check_rule(*case)


@long_fuzz
@long
@given(rule_cases(source=notations(max_inputs=4, max_rank=4), meshes=RULE_MESHES + [(4, 2), (2, 2, 2)]))
def test_fuzz_rule_engine_valid_notations_long(case):
    check_rule(*case)


@long_fuzz
@long
@given(rule_cases(source=corrupted(), meshes=RULE_MESHES + [(4, 2), (2, 2, 2)]))
def test_fuzz_rule_engine_corrupted_notations_long(case):
    check_rule(*case)


# ================================================================================================
# schedule generators
# ================================================================================================
def _names():
    out = []
    for name in schedule_names():
        info = get_schedule_info(name)
        out += [name, name.lower(), name.upper()] + list(info.aliases)
    return out


_CONSTRAINT = re.compile(r"\b(n_ranks|n_microbatches|n_chunks)\b")


@st.composite
def schedule_cases(draw, max_p=6, max_m=16, max_v=4):
    name = draw(st.sampled_from(_names()))
    p = draw(st.integers(1, max_p))
    m = draw(st.integers(1, max_m))
    v = draw(st.one_of(st.none(), st.integers(1, max_v)))
    costs = draw(st.one_of(st.none(), st.builds(Costs, *(st.sampled_from([0.5, 1.0, 1.5, 2.0, 3.0])
                                                         for _ in range(3)))))
    latency = draw(st.sampled_from([0.0, 0.0, 0.25, 1.0]))
    return name, p, m, v, costs, latency


def check_schedule(name, p, m, v, costs, latency):
    info = get_schedule_info(name)
    try:
        schedule = generate_schedule(name, p, m, v)
    except ScheduleError as exc:
        msg = str(exc)
        assert msg.startswith(f"{info.name}: ") and _CONSTRAINT.search(msg), \
            f"{name} p={p} m={m} v={v}: the error should name the schedule and the parameter: {msg}"
        return None
    chunks = info.default_chunks if v is None else v
    n_stages = p * chunks
    validate_schedule(schedule, n_stages, m)
    lowered = add_send_recv(schedule, costs=costs, comm_latency=latency)
    assert compute_only(lowered) == {r: [a for a in acts if a is not None] for r, acts in schedule.items()}
    validate_schedule(lowered, n_stages, m)
    result = simulate_schedule(lowered, costs=costs, comm_latency=latency, blocking_sends=True)
    c = costs or Costs()
    for i, rank in enumerate(result.ranks):
        busy = sum(c.of(a.kind) for a in lowered[rank] if a is not None and a.is_compute)
        assert abs(result.busy[i] - busy) < 1e-9, (name, p, m, v, rank, result.busy[i], busy)
        assert result.makespan >= busy - 1e-9, (name, p, m, v, rank, result.makespan, busy)
    return result


@ci
@given(schedule_cases())
@example(("DualPipeV", 4, 8, None, None, 0.0))
@example(("VPP", 4, 6, None, None, 0.0))
@example(("zbv", 1, 1, 2, Costs(2.0, 0.5, 3.0), 1.0))
def test_fuzz_schedules(case):
    check_schedule(*case)


@long_fuzz
@long
@given(schedule_cases(max_p=10, max_m=40, max_v=6))
def test_fuzz_schedules_long(case):
    check_schedule(*case)
