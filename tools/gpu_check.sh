#!/usr/bin/env bash
# paddle-ext on a GPU node: one script, one report, under 10 minutes on one node (the step
# limits add up to 600 s in each mode).
#
#   bash tools/gpu_check.sh [--out DIR]          # a GPU build of Paddle and >= 1 visible GPU
#   bash tools/gpu_check.sh --cpu-double         # no GPU: CPU ranks, get_backend answering "NCCL"
#
# With 2 or more GPUs it runs: paddle-ext doctor; the reshard matrix on NCCL (paddle-ext vs Paddle
# native, bit-exact per pair; native bisection capped); every documented demo plan on GPU ranks
# against dense; the dispatch, reshard and pipeline benchmarks. With one GPU it runs what one
# process can check: doctor; dispatch and the 0-byte reshard plans in one process on GPU tensors;
# the compiled dispatch key built against the CUDA wheel; the dispatch benchmark (per-call
# overhead). Numeric steps run with NVIDIA_TF32_OVERRIDE=0 (bit-exact comparisons need full fp32).
# Each step has its own timeout and log; a step's processes are found by a marker in their
# environment and ended when it stops (launched ranks run in their own sessions, out of
# timeout's reach). The report (DIR/report.md) says what ran, what passed and what needs more GPUs.
# In --cpu-double mode the routing decisions are what is checked: the backend query answers
# "NCCL" through a test double on CPU ranks, so every transition Paddle does exactly on NCCL must
# go to Paddle's native reshard (which then fails on CPU with Paddle's own missing-kernel error,
# as expected), and every case paddle-ext keeps must still run paddle-ext's path.
set -uo pipefail
cd "$(dirname "$0")/.."
MODE=gpu
OUT=gpu_check_out
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu-double) MODE=cpu-double ;;
    --out) OUT="$2"; shift ;;
    -h|--help) sed -n 2,22p "$0"; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument $1 (use --cpu-double or --out DIR)" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$OUT"
REPORT="$OUT/report.md"
PY=${PYTHON:-python}
FAILED=0
echo "# paddle-ext GPU check ($MODE), $(date -u +%Y-%m-%dT%H:%MZ), load $(cut -d' ' -f1-3 /proc/loadavg)" > "$REPORT"
echo >> "$REPORT"
echo "| step | result | log |" >> "$REPORT"
echo "|---|---|---|" >> "$REPORT"

MARK="gpu_check.$$.$(date +%s)"

end_step_processes() {   # every process a step started (its environment carries MARK), by id
  local sig=$1 pid
  for pid in $(grep -lsz "^PADDLE_EXT_GPU_CHECK_STEP=$MARK\$" /proc/[0-9]*/environ | cut -d/ -f3); do
    [ "$pid" != "$$" ] && kill "-$sig" "$pid" 2>/dev/null
  done
}

step() {   # step NAME SECONDS COMMAND...
  local name=$1 secs=$2; shift 2
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

needs_gpu() {   # needs_gpu NAME: a step that only means something on GPUs
  echo "| $1 | needs a GPU: not run in --cpu-double mode | |" >> "$REPORT"
}

if [ "$MODE" = gpu ]; then
  GPUS=$($PY -c "import paddle; print(paddle.device.cuda.device_count() if paddle.is_compiled_with_cuda() else 0)" 2>/dev/null || echo 0)
  if [ "${GPUS:-0}" -lt 1 ]; then
    echo "gpu_check.sh: needs a GPU build of Paddle and at least 1 visible GPU (2 for the multi-GPU steps; found ${GPUS:-0}); run with --cpu-double on a CPU machine" >&2
    exit 2
  fi
  step doctor 60 $PY -m paddle_ext doctor
  if [ "$GPUS" -ge 2 ]; then
    NVIDIA_TF32_OVERRIDE=0 step reshard_matrix_nccl 180 $PY -m paddle_ext reshard-matrix --nproc 2 --max-launches 4 --out "$OUT/reshard_matrix.md"
    NVIDIA_TF32_OVERRIDE=0 step demo_plans 150 $PY -m pytest -q tests/multirank/test_demo.py -k "test_every_documented_plan_matches_dense"
    step bench_dispatch 60 $PY tools/bench_dispatch.py --calls 200
    step bench_reshard 90 $PY tools/bench_reshard.py --per-call --nproc 2 --rounds 3 --sizes-kib 4 1024 16384 --json "$OUT/bench_reshard.json"
    step bench_pipeline 60 $PY tools/bench_pipeline.py --nproc 2 --steps 3 --no-split-cost --json "$OUT/bench_pipeline.json"
  else   # one GPU: what one process can check
    NVIDIA_TF32_OVERRIDE=0 step dispatch_one_process 200 $PY -m pytest -q tests/unit/test_dispatch.py tests/unit/test_dispatch_lookup_route.py
    NVIDIA_TF32_OVERRIDE=0 step zero_byte_plans_one_process 60 $PY -m pytest -q tests/unit/test_backend_routing.py -k "job_of_one"
    step dispatch_cpp_key_cuda_wheel 200 $PY -m pytest -q tests/unit/test_dispatch_fast_key.py
    step bench_dispatch 80 $PY tools/bench_dispatch.py --calls 200
    echo "| reshard_matrix_nccl, demo_plans, bench_reshard, bench_pipeline | need 2 GPUs: not run ($GPUS visible) | |" >> "$REPORT"
  fi
else
  step doctor 60 $PY -m paddle_ext doctor
  step routing_table_nccl_double 300 $PY -m pytest -q tests/unit/test_backend_routing.py tests/multirank/test_do_no_harm_reshard.py
  step demo_plan_cpu 240 $PY -m paddle_ext demo --plan tp2 --steps 2 --out "$OUT/demo"
  needs_gpu reshard_matrix_nccl
  needs_gpu demo_plans_on_gpus
  needs_gpu bench_dispatch_bench_reshard_bench_pipeline_on_nccl
fi
echo >> "$REPORT"
if [ "$FAILED" = 0 ]; then echo "every step that ran passed" >> "$REPORT"; else echo "some steps FAILED: see their logs" >> "$REPORT"; fi
cat "$REPORT"
exit $FAILED
