#!/usr/bin/env bash
# paddle-ext on a GPU node: one script, one report, under 10 minutes on one node.
#
#   bash tools/gpu_check.sh [--out DIR]          # a GPU build of Paddle and >= 2 visible GPUs
#   bash tools/gpu_check.sh --cpu-double         # no GPU: CPU ranks, get_backend answering "NCCL"
#
# With GPUs it runs: paddle-ext doctor; the reshard matrix on NCCL (paddle-ext vs Paddle native,
# bit-exact per pair); the demo plans on GPU ranks against dense; the dispatch, reshard and
# pipeline benchmarks. Each step has its own timeout and log; the report (DIR/report.md) says
# what ran, what passed and what needs a GPU.
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
    -h|--help) sed -n 2,14p "$0"; exit 0 ;;
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

step() {   # step NAME SECONDS COMMAND...
  local name=$1 secs=$2; shift 2
  local log="$OUT/$name.log"
  echo "== $name (timeout ${secs}s)"
  if timeout "$secs" "$@" > "$log" 2>&1; then
    echo "| $name | ok | $log |" >> "$REPORT"
  else
    local rc=$?
    FAILED=1
    local why="exit $rc"; [ "$rc" = 124 ] && why="timeout after ${secs}s"
    echo "| $name | FAILED ($why): $(tail -1 "$log" | cut -c1-120) | $log |" >> "$REPORT"
  fi
}

needs_gpu() {   # needs_gpu NAME: a step that only means something on GPUs
  echo "| $1 | needs a GPU: not run in --cpu-double mode | |" >> "$REPORT"
}

if [ "$MODE" = gpu ]; then
  GPUS=$($PY -c "import paddle; print(paddle.device.cuda.device_count() if paddle.is_compiled_with_cuda() else 0)" 2>/dev/null || echo 0)
  if [ "${GPUS:-0}" -lt 2 ]; then
    echo "gpu_check.sh: needs a GPU build of Paddle and at least 2 visible GPUs (found ${GPUS:-0}); run with --cpu-double on a CPU machine" >&2
    exit 2
  fi
  step doctor 120 $PY -m paddle_ext doctor
  step reshard_matrix_nccl 240 $PY -m paddle_ext reshard-matrix --nproc 2 --out "$OUT/reshard_matrix.md"
  step demo_plans 240 $PY -m pytest -q tests/multirank/test_demo.py -k "matches_dense"
  step bench_dispatch 90 $PY tools/bench_dispatch.py --calls 200
  step bench_reshard 120 $PY tools/bench_reshard.py --nproc 2 --mib 64 --repeat 5 --json "$OUT/bench_reshard.json"
  step bench_pipeline 120 $PY tools/bench_pipeline.py --nproc 2 --steps 3 --no-split-cost --json "$OUT/bench_pipeline.json"
else
  step doctor 120 $PY -m paddle_ext doctor
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
