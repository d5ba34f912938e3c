"""benchmarks/gpu_check.sh dry-run here: stand-ins for the GPU machine's `nvidia-smi`,
`compute-sanitizer`, CuPy and the GPU-bound Python steps (pytest -m gpu, the on-device kernel
cases, the MNIST training, the GPU benchmark) prove the no-install path: the script checks what
is there, never calls pip, runs every step under a time limit, and writes the summary where it
is told."""
import json
import os
import pathlib
import re
import stat
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"

FAKE_PYTHON = r"""#!/usr/bin/env bash
# The GPU machine's python3: GPU-bound steps give canned results, the rest runs for real.
echo "python $*" >> "$CALLS"
case " $* " in
  *" -m pip "*) echo "pip must not run" >&2; exit 1 ;;
  *" -m pytest "*)
    for arg in "$@"; do case $arg in --junitxml=*) xml=${arg#--junitxml=} ;; esac; done
    echo '<testsuites><testsuite tests="7" failures="1" errors="0" skipped="2"/></testsuites>' \
        > "$xml"
    echo "4 passed, 1 failed, 2 skipped"; exit 1 ;;
  *" -m cuda_host.on_device "*) echo "ok 4x3x8x8"; echo "44 passed, 0 failed"; exit 0 ;;
  *mnist_lenet_bn.py*" --device cuda "*)
    echo "epoch 1/1: loss 0.3012  acc 91.20%  12,345 examples/s"
    echo "epoch 1: 0.8 s, test accuracy 95.50% (eval mode), 95.10% (train-mode BN)"; exit 0 ;;
  *bench_batchnorm_gpu.py*)
    while [ $# -gt 0 ]; do [ "$1" = --json ] && json=$2; shift; done
    echo '{"copy_gbs": 4000, "rows": [{"shape": [64, 6, 28, 28], "dtype": "float32",
      "layout": "NCHW", "kernels_ms": 0.05, "cudnn_ms": 0.1, "share_of_copy": 0.4}]}' > "$json"
    exit 0 ;;
esac
exec "$REAL_PYTHON" "$@"
"""
FAKE_SANITIZER = r"""#!/usr/bin/env bash
echo "compute-sanitizer $*" >> "$CALLS"
tool=$2; shift 4   # --tool TOOL --error-exitcode N
"$@"; status=$?
errors=0; [ "$tool" = "$FAILING_TOOL" ] && errors=2
echo "========= ERROR SUMMARY: $errors errors"
[ $errors -eq 0 ] && exit $status || exit 3
"""
FAKE_CUPY = """__version__ = "14.0.0-stand-in"


class cuda:
    class runtime:
        @staticmethod
        def getDeviceCount():
            return 1
"""


def _executable(path, text):
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def machine(tmp_path):
    """A stand-in GPU machine: bin/ with the fakes, a fake CuPy, and where the calls go."""
    bin_dir, modules = tmp_path / "bin", tmp_path / "modules"
    (modules / "cupy").mkdir(parents=True)
    bin_dir.mkdir()
    (modules / "cupy" / "__init__.py").write_text(FAKE_CUPY)
    _executable(bin_dir / "python3", FAKE_PYTHON)
    _executable(bin_dir / "nvidia-smi", "#!/bin/sh\necho 'NVIDIA H200, 575.0, 143771 MiB'\n")
    _executable(bin_dir / "compute-sanitizer", FAKE_SANITIZER)
    for pip in ("pip", "pip3"):
        _executable(bin_dir / pip, '#!/bin/sh\necho "pip $*" >> "$CALLS"\nexit 1\n')
    return tmp_path


def run_check(machine, sanitizer=True, cupy=True, failing_tool=""):
    out = machine / "out"
    bin_dir = machine / "bin"
    if not sanitizer:
        (bin_dir / "compute-sanitizer").unlink()
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
               CALLS=str(machine / "calls.log"), REAL_PYTHON=sys.executable,
               GPU_CHECK_OUT=str(out), FAILING_TOOL=failing_tool,
               PYTHONPATH=str(machine / "modules") if cupy else "")
    env.pop("PYTHON", None)
    done = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True,
                          timeout=240, cwd=machine)
    calls = (machine / "calls.log").read_text() if (machine / "calls.log").exists() else ""
    summary = (out / "summary.txt").read_text() if (out / "summary.txt").exists() else ""
    return done, calls, summary


def test_the_full_check_runs_without_installing_and_writes_the_summary(machine):
    done, calls, summary = run_check(machine)
    assert done.returncode == 1, done.stdout + done.stderr   # one test failed
    assert "pip" not in calls.replace("gpu_summary", "")
    assert "cupy: 14.0.0-stand-in" in summary and "GPUs seen by CuPy: 1" in summary
    assert "gpu-marked tests: 4 passed, 1 failed, 0 errors, 2 skipped" in summary
    for tool in ("memcheck", "racecheck", "synccheck", "initcheck"):
        assert f"--tool {tool} --error-exitcode 3 " in calls
        assert f"{tool}: 0 errors; kernel cases 44 passed, 0 failed" in summary
    assert "(64, 6, 28, 28) float32 NCHW: vs cuDNN 2.00x, 40% of copy" in summary
    assert "examples/mnist_lenet_bn.py --device cuda --epochs 1 --limit 10000" in calls
    assert ("MNIST on the GPU (LeNet-5 + BN, 1 epoch of 10,000 images): test accuracy 95.50%, "
            "12,345 images/s") in summary and re.search(r"mnist: ok", summary)
    assert re.search(r"tests: 1 \(\d+ s\)", summary) and re.search(r"bench: ok", summary)
    assert json.loads((machine / "out" / "bench.json").read_text())["copy_gbs"] == 4000


def test_a_sanitizer_error_fails_the_check_and_shows_in_the_summary(machine):
    done, _, summary = run_check(machine, failing_tool="racecheck")
    assert done.returncode == 1
    assert "racecheck: 2 errors" in summary and "sanitizer-racecheck: 3" in summary
    assert "memcheck: 0 errors" in summary


def test_without_cupy_or_sanitizer_it_says_what_is_missing_and_installs_nothing(machine):
    done, calls, summary = run_check(machine, sanitizer=False, cupy=False)
    assert done.returncode == 2
    assert "cupy: MISSING (needed: minigrad's GPU backend)" in summary
    assert "missing: cupy; nothing is installed by the check" in summary
    assert "pip" not in calls.replace("gpu_summary", "")
    assert "-m pytest" not in calls   # stopped before the tests


def test_every_command_in_the_script_runs_under_a_time_limit():
    joined = SCRIPT.read_text().replace("\\\n", " ")   # continuation lines as one
    lines = [line.strip() for line in joined.splitlines()
             if line.strip() and not line.strip().startswith("#")]
    for line in lines:
        if re.search(r'"\$PYTHON"|compute-sanitizer --|nvidia-smi --', line):
            assert re.search(r"\bstep\b|\btimeout\b", line), line
    assert "pip" not in SCRIPT.read_text().replace("pipefail", "")
    limits = [int(n) for n in re.findall(r"\bstep [a-z]+ (\d+) ", SCRIPT.read_text())]
    sanitizer = int(re.search(r'step "sanitizer-\$tool" (\d+)', SCRIPT.read_text()).group(1))
    summary = int(re.search(r"timeout (\d+) \"\$PYTHON\" benchmarks/gpu_summary.py \"",
                            SCRIPT.read_text()).group(1))
    grace = 5 * (len(limits) + 4 + 1)
    assert sum(limits) + 4 * sanitizer + summary + grace <= 8 * 60
