#!/usr/bin/env bash
# The GPU check, in one go, from a plain checkout with no install step (every step has a time
# limit; together they add up to under 8 minutes):
#   1. the driver and the Python modules there (nothing is installed: what is missing is said)
#   2. every gpu-marked test (with DDP and SyncBatchNorm through NCCL on one rank)
#   3. the fused batch-norm kernels on the test cases under compute-sanitizer: memcheck,
#      racecheck, synccheck, initcheck (tests/cuda_host/on_device.py)
#   4. a short MNIST training on the GPU: LeNet-5 + BN, one epoch of 10,000 images
#      (examples/mnist_lenet_bn.py; needs MNIST in $MINIGRAD_DATA, else the step fails saying so)
#   5. the fused batch-norm benchmark (CUDA kernels vs cuDNN and vs the copy bandwidth)
# and a short summary (pass/fail counts, MNIST accuracy and images/s, kernel-vs-cuDNN ratios,
# share of copy bandwidth) in $GPU_CHECK_OUT/summary.txt, beside each step's log.
#
#   GPU_CHECK_OUT=/some/folder bash benchmarks/gpu_check.sh
#
# PYTHON picks the interpreter (default python3); minigrad is imported from this checkout
# (PYTHONPATH). GPU_CHECK_OUT defaults to $OUT, else runs/gpu_check.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PYTHON=${PYTHON:-python3}
OUT_DIR=${GPU_CHECK_OUT:-${OUT:-runs/gpu_check}}
mkdir -p "$OUT_DIR" && OUT_DIR=$(cd "$OUT_DIR" && pwd)
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export MINIGRAD_DATA="${MINIGRAD_DATA:-$(cd .. && pwd)/shared/data}"
STEPS="$OUT_DIR/steps.tsv"
: > "$STEPS"

# step NAME SECONDS COMMAND...: run under `timeout`, log to NAME.log, record the outcome.
step() {
    local name=$1 limit=$2 start status
    shift 2
    start=$(date +%s)
    echo "== $name (limit ${limit}s): $*"
    timeout --kill-after=5 "$limit" "$@" > "$OUT_DIR/$name.log" 2>&1
    status=$?
    [ $status -eq 124 ] || [ $status -eq 137 ] && status=timeout
    printf '%s\t%s\t%s\n' "$name" "$status" "$(( $(date +%s) - start ))" >> "$STEPS"
    tail -n 3 "$OUT_DIR/$name.log"
    [ "$status" = 0 ]
}

skip() {   # skip NAME REASON
    printf '%s\tskipped: %s\t0\n' "$1" "$2" >> "$STEPS"
    echo "== $1 skipped: $2"
}

summarize() {
    timeout 20 "$PYTHON" benchmarks/gpu_summary.py "$OUT_DIR" || echo "gpu_check: no summary"
}

if command -v nvidia-smi > /dev/null; then
    step driver 15 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
else
    skip driver "nvidia-smi not found: no NVIDIA driver on this machine"
fi
# What this Python has; exit status 3 when a module the check needs is missing.
if ! step modules 20 "$PYTHON" benchmarks/gpu_summary.py --modules; then
    echo "gpu_check: missing what the check needs (see $OUT_DIR/modules.log); nothing installed"
    summarize
    exit 2
fi

status=0
step tests 130 "$PYTHON" -m pytest -q -m gpu -p no:cacheprovider -rs \
    --junitxml="$OUT_DIR/tests.xml" tests || status=1
if command -v compute-sanitizer > /dev/null; then
    for tool in memcheck racecheck synccheck initcheck; do
        # the host-emulation cases: small shapes, every layout, storage type and option
        (cd tests && step "sanitizer-$tool" 40 compute-sanitizer --tool "$tool" \
            --error-exitcode 3 "$PYTHON" -m cuda_host.on_device host) || status=1
    done
else
    skip sanitizers "compute-sanitizer not found (it ships with the CUDA toolkit)"
fi
step mnist 30 "$PYTHON" examples/mnist_lenet_bn.py --device cuda --epochs 1 --limit 10000 \
    --plain --out "$OUT_DIR/mnist" || status=1
step bench 55 "$PYTHON" benchmarks/bench_batchnorm_gpu.py --reps 10 --rounds 3 \
    --json "$OUT_DIR/bench.json" || status=1
summarize
exit $status
