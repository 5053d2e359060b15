#!/usr/bin/env bash
# paddle-ext on a GPU node: one script, one report, at most 10 minutes on one node. Every step
# has a limit; in each mode the limits, each step's grace after its limit (timeout's 10 s before
# KILL, then 1 s before its leftover processes are ended) and the 30 s GPU probe add up to at most
# 600 s (--dry-run prints the sum).
#
#   bash tools/gpu_check.sh [--out DIR]          # a GPU build of Paddle and >= 1 visible GPU
#   bash tools/gpu_check.sh --cpu-double         # no GPU: CPU ranks, get_backend answering "NCCL"
#   bash tools/gpu_check.sh --dry-run [--gpus N | --cpu-double]
#                                                # print the steps, their limits and the total; run nothing
#
# With 2 or more GPUs it runs: paddle-ext doctor; the reshard matrix on NCCL (paddle-ext vs Paddle
# native, bit-exact per pair; the native bisection stops at its own time limit, inside the step's);
# the 2-rank documented demo plans on GPU ranks against dense (the 3-rank odd-world test and the
# 4-rank plans are not selected); the dispatch, reshard and pipeline benchmarks. With one GPU it
# runs what one process can check: doctor; dispatch and the 0-byte reshard plans in one process on
# GPU tensors; the compiled dispatch key built against the CUDA wheel; the dispatch benchmark in
# one process (per-call overhead). Numeric steps run with NVIDIA_TF32_OVERRIDE=0 (bit-exact
# comparisons need full fp32).
# Each step has its own timeout and log; a step's processes are found by a marker in their
# environment and ended when it stops (launched ranks run in their own sessions, out of
# timeout's reach). The report (DIR/report.md) says what ran, what passed and what needs more GPUs.
# In --cpu-double mode the routing decisions are what is checked: the backend query answers
# "NCCL" through a test double on CPU ranks, so every transition Paddle does exactly on NCCL must
# go to Paddle's native reshard (which then fails on CPU with Paddle's own missing-kernel error,
# as expected), and every case paddle-ext keeps must still run paddle-ext's path.
set -uo pipefail

BUDGET=600   # seconds, the whole check in the worst case
GRACE=11     # seconds per step after its limit: timeout -k 10, then 1 s before its leftovers are ended
PROBE=30     # seconds: the GPU count probe

end_step_processes() {   # every process a step started (its environment carries MARK), by id
  local sig=$1 pid
  for pid in $(grep -lsz "^PADDLE_EXT_GPU_CHECK_STEP=$MARK\$" /proc/[0-9]*/environ | cut -d/ -f3); do
    [ "$pid" != "$$" ] && kill "-$sig" "$pid" 2>/dev/null
  done
}

step() {   # step NAME SECONDS COMMAND...
  local name=$1 secs=$2; shift 2
  TOTAL=$((TOTAL + secs + GRACE)); STEPS=$((STEPS + 1))
  if [ "$DRY" = 1 ]; then
    echo "step $name limit ${secs}s: $*"
    return 0
  fi
  local log="$OUT/$name.log"
  echo "== $name (timeout ${secs}s)"
  if PADDLE_EXT_GPU_CHECK_STEP=$MARK timeout -k 10 "$secs" "$@" > "$log" 2>&1; then
    echo "| $name | ok | $log |" >> "$REPORT"
  else
    local rc=$?
    FAILED=1
    local why="exit $rc"; [ "$rc" = 124 ] && why="timeout after ${secs}s"
    echo "| $name | FAILED ($why): $(tail -1 "$log" | cut -c1-120) | $log |" >> "$REPORT"
  fi
  end_step_processes TERM; sleep 1; end_step_processes KILL   # orphaned ranks would hold the GPUs
}

note() {   # note TEXT: a report row for what is not run
  if [ "$DRY" = 1 ]; then echo "not run: $1"; else echo "| $1 | |" >> "$REPORT"; fi
}

steps_multi_gpu() {
  step doctor 40 $PY -m paddle_ext doctor
  step reshard_matrix_nccl 160 env NVIDIA_TF32_OVERRIDE=0 $PY -m paddle_ext reshard-matrix --nproc 2 \
    --max-launches 4 --time-limit 140 --out "$OUT/reshard_matrix.md"
  step demo_plans 125 env NVIDIA_TF32_OVERRIDE=0 $PY -m pytest -q \
    "tests/multirank/test_demo.py::test_every_documented_plan_matches_dense[2]"
  step bench_dispatch 60 $PY tools/bench_dispatch.py --calls 200
  step bench_reshard 65 $PY tools/bench_reshard.py --per-call --nproc 2 --rounds 3 --sizes-kib 4 1024 16384 \
    --json "$OUT/bench_reshard.json"
  step bench_pipeline 50 $PY tools/bench_pipeline.py --nproc 2 --steps 3 --no-split-cost --json "$OUT/bench_pipeline.json"
}

steps_one_gpu() {   # one GPU: what one process can check
  step doctor 40 $PY -m paddle_ext doctor
  step dispatch_one_process 190 env NVIDIA_TF32_OVERRIDE=0 $PY -m pytest -q tests/unit/test_dispatch.py \
    tests/unit/test_dispatch_lookup_route.py
  step zero_byte_plans_one_process 50 env NVIDIA_TF32_OVERRIDE=0 $PY -m pytest -q tests/unit/test_backend_routing.py \
    -k "job_of_one"
  step dispatch_cpp_key_cuda_wheel 180 env NVIDIA_TF32_OVERRIDE=0 $PY -m pytest -q tests/unit/test_dispatch_fast_key.py
  step bench_dispatch_one_process 55 $PY tools/bench_dispatch.py --nproc 1 --calls 200
  note "reshard_matrix_nccl, demo_plans, bench_reshard, bench_pipeline | need 2 GPUs: not run ($GPUS visible)"
}

steps_cpu_double() {
  step doctor 40 $PY -m paddle_ext doctor
  step routing_table_nccl_double 280 $PY -m pytest -q tests/unit/test_backend_routing.py \
    tests/multirank/test_do_no_harm_reshard.py
  step demo_plan_cpu 220 $PY -m paddle_ext demo --plan tp2 --steps 2 --out "$OUT/demo"
  note "reshard_matrix_nccl | needs a GPU: not run in --cpu-double mode"
  note "demo_plans_on_gpus | needs a GPU: not run in --cpu-double mode"
  note "bench_dispatch_bench_reshard_bench_pipeline_on_nccl | needs a GPU: not run in --cpu-double mode"
}

main() {
  cd "$(dirname "$0")/.."
  MODE=gpu OUT=gpu_check_out DRY=0 GPUS=
  while [ $# -gt 0 ]; do
    case "$1" in
      --cpu-double) MODE=cpu-double ;;
      --dry-run) DRY=1 ;;
      --gpus) GPUS="${2:-}"; shift ;;
      --out) OUT="$2"; shift ;;
      -h|--help) sed -n 2,25p "$0"; exit 0 ;;
      *) echo "gpu_check.sh: unknown argument $1 (use --cpu-double, --dry-run [--gpus N] or --out DIR)" >&2; exit 2 ;;
    esac
    shift
  done
  if [ -n "$GPUS" ] && { [ "$DRY" = 0 ] || ! [[ "$GPUS" =~ ^[0-9]+$ ]]; }; then
    echo "gpu_check.sh: --gpus N (a number) only goes with --dry-run; a real run counts the GPUs itself" >&2
    exit 2
  fi
  PY=${PYTHON:-python}
  FAILED=0 TOTAL=0 STEPS=0
  MARK="gpu_check.$$.$(date +%s)"
  if [ "$DRY" = 0 ]; then
    mkdir -p "$OUT"
    REPORT="$OUT/report.md"
    { echo "# paddle-ext GPU check ($MODE), $(date -u +%Y-%m-%dT%H:%MZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
      echo; echo "| step | result | log |"; echo "|---|---|---|"; } > "$REPORT"
  fi
  if [ "$MODE" = gpu ]; then
    if [ -z "$GPUS" ]; then
      GPUS=$(timeout -k 5 "$((PROBE - 5))" $PY -c "import paddle; print(paddle.device.cuda.device_count() if paddle.is_compiled_with_cuda() else 0)" 2>/dev/null || echo 0)
    fi
    if [ "${GPUS:-0}" -lt 1 ]; then
      echo "gpu_check.sh: needs a GPU build of Paddle and at least 1 visible GPU (2 for the multi-GPU steps; found ${GPUS:-0}); run with --cpu-double on a CPU machine" >&2
      exit 2
    fi
    TOTAL=$PROBE
    if [ "$GPUS" -ge 2 ]; then steps_multi_gpu; else steps_one_gpu; fi
  else
    steps_cpu_double
  fi
  if [ "$DRY" = 1 ]; then
    echo "total: ${TOTAL}s worst case ($STEPS steps, each with ${GRACE}s grace$([ "$MODE" = gpu ] && echo ", and the ${PROBE}s GPU probe")); budget ${BUDGET}s"
    [ "$TOTAL" -le "$BUDGET" ]
    return
  fi
  echo >> "$REPORT"
  if [ "$FAILED" = 0 ]; then echo "every step that ran passed" >> "$REPORT"; else echo "some steps FAILED: see their logs" >> "$REPORT"; fi
  cat "$REPORT"
  return $FAILED
}

# run as a script; sourcing it only defines the functions (tests use step and end_step_processes)
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  main "$@"
  exit $?
fi
