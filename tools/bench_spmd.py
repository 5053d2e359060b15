"""Forward-inference time: paddle-ext's engine (uncached and cached) vs Paddle's C++ rule from Python.

    python tools/bench_spmd.py [--n 20000]

Prints one markdown table (best of 7 runs of n calls each, microseconds per call):

* ``ext uncached``  -- the rule function + notation/DimTrans engine, cache bypassed;
* ``ext cached``    -- ``rule.infer(specs, attrs)``: the cache is keyed on the frozen specs plus
  the declared static attributes (checked and normalised on every call);
* ``ext cached (pre-bound)`` -- the cache lookup alone, arguments already bound;
* ``paddle C++``    -- ``core.get_phi_spmd_rule(op).infer_forward(DistTensorSpec..., attrs)``
  with the DistTensorSpecs built once (Python binding overhead included);
* ``paddle C++ + conversion`` -- the same, building DistTensorSpecs from DistSpecs each call.
"""
from __future__ import annotations

import argparse
import statistics
import time
import warnings


def _time(fn, n: int) -> float:
    runs = []
    for _ in range(7):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        runs.append((time.perf_counter() - t) / n * 1e6)
    return min(runs)  # best of 7: the machine is shared, noise only adds time


def main(argv=None) -> None:
    warnings.filterwarnings("ignore")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20000)
    args = ap.parse_args(argv)

    from paddle_ext.compat.ports.spmd import dist_tensor_spec, phi_rule
    from paddle_ext.placements import DistSpec
    from paddle_ext.spmd import get_spmd_rule

    cases = {
        "matmul": ([DistSpec((64, 128), (2, 2), "[S(0),S(1)]"), DistSpec((128, 32), (2, 2), "[R,R]")],
                   {"trans_x": False, "trans_y": False}, lambda s: [False, False]),
        "reshape": ([DistSpec((8, 16, 32), (2, 2), "[S(0),S(1)]")], {"shape": [128, 32]},
                    lambda s: [[128, 32]]),
    }
    print("| op | ext uncached | ext cached | ext cached (pre-bound) | paddle C++ | paddle C++ + conversion |")
    print("|---|---:|---:|---:|---:|---:|")
    for op, (specs, attrs, pattrs) in cases.items():
        rule = get_spmd_rule(op, "ext")
        targs, avals = rule.bind(specs, attrs)
        uncached = _time(lambda: rule._infer_uncached(targs, avals), max(args.n // 10, 200))
        rule.infer(specs, attrs)
        cached = _time(lambda: rule.infer(specs, attrs), args.n)
        prebound = _time(lambda: rule._cached(targs, avals), args.n)
        prule = phi_rule(op)
        dts = [dist_tensor_spec(s) for s in specs]
        extra = pattrs(specs)
        paddle = _time(lambda: prule.infer_forward(*dts, *extra), args.n)
        paddle_conv = _time(lambda: prule.infer_forward(*[dist_tensor_spec(s) for s in specs], *extra),
                            max(args.n // 10, 200))
        print(f"| {op} | {uncached:.1f} µs | {cached:.2f} µs | {prebound:.2f} µs | {paddle:.1f} µs | "
              f"{paddle_conv:.1f} µs |")


if __name__ == "__main__":
    main()
