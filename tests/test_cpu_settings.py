"""CPU process settings (minigrad/backends/cpu_settings.py): the thread API (the kernel threads
and BLAS), its import-time default, the malloc helper, and the example and benchmarks using them
instead of their own."""
import os
import pathlib
import subprocess
import sys

import pytest

import minigrad as mg
from minigrad.backends import cpu_settings
from minigrad.backends.kernel_threads import kernel_threads

# a dependency of minigrad, but the GPU machines' Python may lack it (gpu_check.sh runs there)
threadpool_info = pytest.importorskip("threadpoolctl").threadpool_info
ROOT = pathlib.Path(__file__).resolve().parents[1]


def _blas_threads():
    return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]


@pytest.fixture
def restore_threads():
    before = mg.get_num_threads()
    yield
    mg.set_num_threads(before)


def test_set_num_threads_sizes_the_kernel_threads_and_keeps_blas_at_one(restore_threads):
    mg.set_num_threads(2)
    assert mg.get_num_threads() == kernel_threads.count == 2 and set(_blas_threads()) == {1}
    mg.set_num_threads(1)
    assert mg.get_num_threads() == kernel_threads.count == 1 and set(_blas_threads()) == {1}


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True, None])
def test_set_num_threads_rejects_what_is_not_a_positive_int(bad):
    with pytest.raises(ValueError, match="set_num_threads: expected a positive int"):
        mg.set_num_threads(bad)


def _python(code, **env_changes):
    """Run `code` in a fresh interpreter with minigrad on the path; its stripped stdout."""
    env = {k: v for k, v in os.environ.items() if k not in cpu_settings.THREAD_VARIABLES}
    env.update(env_changes, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


READ_POOLS = ("import minigrad as mg; from threadpoolctl import threadpool_info; "
              "print(mg.get_num_threads(), sorted({p['num_threads'] for p in threadpool_info() "
              "if p['user_api'] == 'blas'}))")


def test_import_defaults_the_pool_to_one_thread():
    assert _python(READ_POOLS) == "1 [1]"


def test_a_blas_thread_count_from_the_environment_is_left_alone():
    assert _python(READ_POOLS, OPENBLAS_NUM_THREADS="2") == "1 [2]"


def test_without_threadpoolctl_minigrad_imports_and_says_what_is_missing():
    code = ("import sys; sys.modules['threadpoolctl'] = None\n"
            "import minigrad as mg\n"
            "print(mg.tune_cpu(malloc=False))\n"
            "try:\n    mg.set_num_threads(2)\nexcept ImportError as e:\n    print(e)\n")
    printed = _python(code).splitlines()
    assert printed[0] == str({"threads": "1",
                              "blas_threads": "library default (threadpoolctl not installed)"})
    assert "needs threadpoolctl" in printed[1] and "pip install threadpoolctl" in printed[1]


def test_tune_malloc_uses_mallopt_and_lets_the_environment_win(monkeypatch):
    if cpu_settings._mallopt() is None:
        pytest.skip("not glibc: no mallopt")
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "12345")
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    assert mg.tune_cpu(malloc=True) == {
        "threads": str(mg.get_num_threads()), "blas_threads": "1",
        "MALLOC_MMAP_THRESHOLD_": f"{1 << 30} (mallopt)",
        "MALLOC_TRIM_THRESHOLD_": "12345 (environment)"}


def test_tune_cpu_sets_threads_when_asked(restore_threads):
    assert mg.tune_cpu(threads=2, malloc=False) == {"threads": "2", "blas_threads": "1"}
    assert kernel_threads.count == 2 and _blas_threads() == [1] * len(_blas_threads())


@pytest.mark.parametrize("script", ["examples/mnist_lenet_bn.py", "benchmarks/bench_lenet.py",
                                    "benchmarks/bench_resnet.py"])
def test_scripts_carry_no_allocator_or_blas_plumbing(script):
    source = (ROOT / script).read_text()
    assert "mg.tune_cpu(" in source
    for plumbing in ("mallopt", "ctypes", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        assert plumbing not in source, f"{script} handles {plumbing} itself"
