"""Rank functions for tests/multirank/test_reshard_fast_path.py (run through run_ranks)."""
from __future__ import annotations

import numpy as np

from paddle_ext.reshard.checks import Outcome, make_source, specs


def _outcome(y, d_ranks):
    import paddle.distributed as dist

    from paddle_ext.placements import format_placements
    from paddle_ext.reshard.dygraph import placements_of

    out = Outcome(placements=format_placements(placements_of(y)))
    if dist.get_rank() in d_ranks:
        out.local = y._local_value().numpy().copy()
    return out


def repeated_calls(cases, calls: int = 3, gather_below=None, native_gather=None):
    """Every case ``calls`` times through ``dist.reshard`` after install() (check=False) and through
    ``paddle_ext.reshard`` (check=True): the first call fills the cache, the others hit it.
    ``gather_below``: ``fast.GATHER_BELOW[2]`` for the run (0: S -> S by the exchange of blocks).
    ``native_gather``: True waits for the compiled one-call gloo runners and counts their calls by
    name (``out["native_calls"]``), False runs without them (Paddle's collectives).
    ``out["runners"]``: the names of the cached paddle-ext runners (which ways ran)."""
    import inspect

    import paddle.distributed as dist
    import paddle_ext
    from paddle_ext.compat.ports.convert import to_paddle_placements
    from paddle_ext.reshard import fast

    dist.init_parallel_env()
    paddle_ext.install()
    if gather_below is not None:
        fast.GATHER_BELOW[2] = gather_below
    out = {"native_calls": {}}
    if native_gather is not None:
        from types import SimpleNamespace

        from paddle_ext.compat.native import fast_key

        fast_key.start(wait=True)
        real = fast_key.GLOO_NATIVE[0]
        if native_gather and real is None:
            raise RuntimeError(f"the compiled gloo runners are not loaded: {fast_key.status()}")

        def counted(name):
            def call(*args):
                out["native_calls"][name] = out["native_calls"].get(name, 0) + 1
                return getattr(real, name)(*args)
            return call
        out["native_calls"] = {}
        fast_key.GLOO_NATIVE[0] = SimpleNamespace(
            sole_owner=real.sole_owner, free_slot=real.free_slot, **{n: counted(n) for n in ("gather_take", "all_gather_into", "all_reduce_into")}
        ) if native_gather else None
    for c in cases:
        _, dst, _, d_ranks = specs(c)
        # one local slice on one mesh (the fast path's slice runner): a copy, never a view of the
        # source (the per-rank executor's multi-step and cross-mesh plans may hand out views)
        slices = c.src_mesh == c.dst_mesh and c.src.replace("R", "").strip("[], ") == "" \
            and c.dst.count("S(") == 1 and "P(" not in c.dst
        mesh = dist.ProcessMesh(np.array(c.dst_mesh).tolist())
        for way, fn in (("dist", lambda x: dist.reshard(x, mesh, to_paddle_placements(dst.placements))),
                        ("ext", lambda x: paddle_ext.reshard(x, mesh, to_paddle_placements(dst.placements)))):
            for i in range(calls):
                x = make_source(c)
                before = x._local_value().numpy().copy()
                try:
                    y = fn(x)
                    o = _outcome(y, d_ranks)
                    if slices and o.local is not None and o.local.shape != before.shape and y._local_value().data_ptr() == x._local_value().data_ptr():
                        o.error = "the result shares memory with the source"
                    if not np.array_equal(x._local_value().numpy(), before):
                        o.error = "the source was written"
                except Exception as exc:  # reported per case
                    o = Outcome(error=f"{type(exc).__name__}: {exc}"[:300])
                out[(c.id, way, i)] = o
    out["overwritten"] = _held_results_survive(cases, dst_of=lambda c: to_paddle_placements(specs(c)[1].placements))
    out["cached"] = len(fast._CACHE)
    out["runners"] = sorted({getattr(inspect.getclosurevars(e).nonlocals.get("values"), "__name__", "-")
                             for e in fast._CACHE.values()})
    return out


def _held_results_survive(cases, dst_of) -> list:
    """Per case, a result held while the same reshard runs again on a source of other values
    (twice the first's): the cases whose held result changed (a later call wrote into it)."""
    import paddle.distributed as dist

    changed = []
    for c in cases:
        mesh = dist.ProcessMesh(np.array(c.dst_mesh).tolist())
        first = dist.reshard(make_source(c), mesh, dst_of(c))
        held = first._local_value().numpy().copy()
        other = make_source(c)
        other._local_value().scale_(2.0)
        dist.reshard(other, mesh, dst_of(c))
        if not np.array_equal(first._local_value().numpy(), held):
            changed.append(c.id)
    return changed


def mismatch_on_hits():
    """Both ranks fill the cache with two keys, then ask for different ones at once: with
    check=True every rank raises the named error before any data moves, and stays in step."""
    import paddle
    import paddle.distributed as dist
    import paddle_ext
    from paddle_ext.errors import ReshardPlanError

    dist.init_parallel_env()
    paddle_ext.install()
    rank = dist.get_rank()
    mesh = dist.ProcessMesh([0, 1])
    a = dist.shard_tensor(paddle.arange(24, dtype="float32").reshape([4, 6]), mesh, [dist.Shard(0)])
    b = dist.shard_tensor(paddle.arange(36, dtype="float32").reshape([6, 6]), mesh, [dist.Shard(0)])
    for t in (a, b):   # same keys on both ranks: cached, checked
        paddle_ext.reshard(t, mesh, [dist.Replicate()])
    errors = []
    for _ in range(2):
        try:   # rank 0 asks for a's key, rank 1 for b's: both are cache hits
            paddle_ext.reshard(a if rank == 0 else b, mesh, [dist.Replicate()])
            errors.append("no error")
        except ReshardPlanError as exc:
            errors.append(str(exc))
    y = paddle_ext.reshard(a, mesh, [dist.Replicate()])   # still in step
    return errors, y._local_value().numpy()


def debug_and_hand_back():
    """The debug switch sends every call through the full path; a hand-back is served from the
    cache and still reaches Paddle's reshard (and its listeners) on every call."""
    import paddle
    import paddle.distributed as dist
    import paddle_ext
    from paddle_ext.reshard import dygraph, fast
    from paddle_ext.reshard import install as inst

    dist.init_parallel_env()
    paddle_ext.install()
    full_calls, native_calls, heard = [], [], []
    real_full, real_native = dygraph.reshard, inst._SAVED["dist"]
    dygraph.reshard = lambda *a, **k: full_calls.append(1) or real_full(*a, **k)
    inst._SAVED["dist"] = lambda *a, **k: native_calls.append(1) or real_native(*a, **k)
    inst.NATIVE_LISTENERS.append(lambda *a: heard.append(1))
    sub = dist.ProcessMesh([0, 1], dim_names=["x"])
    try:
        x = dist.shard_tensor(paddle.arange(24, dtype="float32").reshape([4, 6]), sub, [dist.Replicate()])
        counts = {}
        for debug in (False, True):
            old = fast.set_debug(debug)
            before = len(full_calls)
            for _ in range(3):
                y = dist.reshard(x, sub, [dist.Shard(0)])
            fast.set_debug(old)
            counts[f"full path, debug={debug}"] = len(full_calls) - before
        # R -> S on a 2-D mesh, evenly: Paddle's own reshard is exact there (route: "native")
        m2 = dist.ProcessMesh([[0, 1]], dim_names=["a", "b"])
        z = dist.shard_tensor(paddle.arange(24, dtype="float32").reshape([4, 6]), m2,
                              [dist.Replicate(), dist.Replicate()])
        before = len(native_calls)
        for _ in range(3):
            w = dist.reshard(z, m2, [dist.Replicate(), dist.Shard(1)])
        counts["native calls"] = len(native_calls) - before
        counts["heard"] = len(heard)
        return counts, y._local_value().numpy(), w._local_value().numpy()
    finally:
        dygraph.reshard, inst._SAVED["dist"] = real_full, real_native
        inst.NATIVE_LISTENERS.pop()


def reused_results():
    """The one-collective runners (S(0) -> R, P -> R sum, small S(0) -> S(1)) on a 2-rank gloo
    world, with results that need no gradient: per case, a loop ``y = dist.reshard(x_k, ...)``
    over sources of other values each call, then the hazards of writing into an earlier result:
    a kept ``_local_value()`` of a dropped result, a dropped result that was given a gradient.
    Returns per case the local values (each call, and what the kept parts hold at the end), the
    ``stop_gradient``/``grad`` of the results after the one given a gradient, and how often an
    earlier result was found free (``free_slot`` >= 0)."""
    from types import SimpleNamespace

    import paddle
    import paddle.distributed as dist
    import paddle_ext
    from paddle.distributed.auto_parallel.api import dtensor_from_local
    from paddle_ext.compat.native import fast_key

    dist.init_parallel_env()
    paddle_ext.install()
    fast_key.start(wait=True)
    real = fast_key.GLOO_NATIVE[0]
    if real is None:
        raise RuntimeError(f"the compiled gloo runners are not loaded: {fast_key.status()}")
    hits = []

    def free_slot(slots):
        i = real.free_slot(slots)
        hits.append(i >= 0)
        return i
    fast_key.GLOO_NATIVE[0] = SimpleNamespace(**{n: getattr(real, n) for n in fast_key.NATIVE_FUNCTIONS
                                                 if n != "free_slot"}, free_slot=free_slot)
    rank, mesh = dist.get_rank(), dist.ProcessMesh([0, 1])
    dense = np.arange(64, dtype="float32").reshape(8, 8)
    cases = {"S(0)->R": ([dist.Shard(0)], [dist.Replicate()], lambda g: g[4 * rank:4 * rank + 4]),
             "P->R": ([dist.Partial()], [dist.Replicate()], lambda g: g * (rank + 1)),
             "S(0)->S(1)": ([dist.Shard(0)], [dist.Shard(1)], lambda g: g[4 * rank:4 * rank + 4])}
    out = {}
    for name, (src, dst, local_of) in cases.items():
        def reshard(k):
            x = dtensor_from_local(paddle.to_tensor(local_of(dense * k)), mesh, src)
            return dist.reshard(x, mesh, dst)
        before = len(hits)
        seen = []
        for k in range(1, 6):
            y = reshard(k)
            seen.append(y._local_value().numpy().copy())
        del y
        kept = reshard(10)._local_value()   # the result is dropped, a part of it is kept
        later = [reshard(k)._local_value().numpy().copy() for k in (11, 12, 13)]
        graded = reshard(20)
        graded.stop_gradient = False
        (graded * 2.0).sum().backward()
        del graded
        after = [reshard(k) for k in (21, 22, 23)]
        out[name] = {"seen": seen, "kept": kept.numpy().copy(), "later": later,
                     "after": [(r.stop_gradient, r.grad is None, r._local_value().numpy().copy()) for r in after],
                     "reused": sum(hits[before:])}
    return out
