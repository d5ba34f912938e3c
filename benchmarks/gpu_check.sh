#!/usr/bin/env bash
# The GPU check, in one go (under 5 minutes on one H200): make sure CuPy is there, run every
# gpu-marked test, then the fused batch-norm benchmark (minigrad's CUDA kernels vs cuDNN and vs
# the copy bandwidth).
#
#   bash benchmarks/gpu_check.sh                 PYTHON=/path/to/python to pick the interpreter
#
# Needs an NVIDIA GPU and driver. Installs what is missing with pip (this checkout in editable
# mode with the test extras; CuPy for the driver's CUDA major version) and says so when it can't.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
export MINIGRAD_DATA="${MINIGRAD_DATA:-$(cd .. && pwd)/shared/data}"

if ! command -v nvidia-smi >/dev/null; then
    echo "gpu_check: nvidia-smi not found: this machine has no NVIDIA driver" >&2
    exit 2
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
cuda_major=$(nvidia-smi | grep -o "CUDA Version: [0-9]*" | grep -o "[0-9]*$")

if ! "$PYTHON" -c "import minigrad, numpy, pytest" 2>/dev/null; then
    echo "gpu_check: installing this checkout with its test extras"
    "$PYTHON" -m pip install -q -e ".[test]" || {
        echo "gpu_check: pip could not install minigrad's test dependencies" >&2; exit 2; }
fi
if ! "$PYTHON" -c "import cupy" 2>/dev/null; then
    extra=$([ "${cuda_major:-12}" -ge 13 ] && echo cuda13 || echo cuda12)
    echo "gpu_check: CuPy missing; installing minigrad[$extra] (driver supports CUDA $cuda_major)"
    "$PYTHON" -m pip install -q -e ".[$extra]" || {
        echo "gpu_check: pip could not install CuPy; install cupy-cuda12x or cupy-cuda13x" \
             "(with its [ctk] extra, or a CUDA toolkit) by hand" >&2; exit 2; }
fi
"$PYTHON" -c "import cupy; print('CuPy', cupy.__version__, cupy.cuda.runtime.getDeviceCount(), 'GPU')" \
    || exit 2

status=0
timeout 180 "$PYTHON" -m pytest -q -m gpu -p no:cacheprovider tests || status=$?
timeout 110 "$PYTHON" benchmarks/bench_batchnorm_gpu.py --reps 20 --rounds 5 || status=$?
exit $status
