"""CPU process settings: minigrad's threads and glibc's allocator thresholds.

minigrad's CPU ops are NumPy, which runs in one thread except for matrix products: those go to
the BLAS library NumPy was built with (OpenBLAS in the pip wheels), which has its own pool of
threads. minigrad's own pool, the kernel threads (kernel_threads.py), runs the blocks of its
convolution kernels side by side.

`set_num_threads(n)` gives the kernel threads n threads and keeps BLAS at one thread a product:
OpenBLAS's workers spin for a while after each product, and beside a second kernel thread they
take the core it needs (a ResNet-20 step at two threads: 180 ms with one BLAS thread, 218 ms with
two; 179 ms with two when OPENBLAS_THREAD_TIMEOUT shortens the spin). `get_num_threads` reads the
kernel threads' count. BLAS gains little from a second thread at minigrad's sizes anyway (a
LeNet-5 or ResNet-20 at batch 64), and on a busy machine its spinning makes each product several
times slower (benchmarks/README.md has the measurements).

At import minigrad sets BLAS to one thread, unless the user chose a count with one of the
variables in THREAD_VARIABLES; the kernel threads start at one either way.

`tune_cpu` is the one helper the example and the benchmarks call: threads, plus glibc's malloc
thresholds raised so freed NumPy temporaries are reused rather than mapped afresh each step.
"""
import ctypes
import ctypes.util
import os

from .kernel_threads import kernel_threads

# Variables through which a user picks the BLAS (or OpenMP) thread count: when one is set, the
# import-time default leaves the pool alone.
THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                    "BLIS_NUM_THREADS", "GOTO_NUM_THREADS")
DEFAULT_THREADS = 1
# glibc's mallopt options (malloc.h) and the value tune_cpu gives both: 1 GiB.
_MALLOPT_OPTIONS = {"MALLOC_MMAP_THRESHOLD_": -3, "MALLOC_TRIM_THRESHOLD_": -1}
_MALLOC_THRESHOLD = 1 << 30


def _blas_pools():
    """threadpoolctl's controllers of the BLAS libraries loaded in this process."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        raise ImportError("minigrad's thread control needs threadpoolctl, a dependency of "
                          "minigrad that is not installed: pip install threadpoolctl") from None
    return ThreadpoolController().select(user_api="blas").lib_controllers


def set_num_threads(n):
    """Run minigrad's CPU kernels on `n` threads: the blocks of a convolution side by side
    (kernel_threads.py), each matrix product on one BLAS thread (every BLAS library loaded,
    NumPy's OpenBLAS among them; see the module docstring for why one)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"set_num_threads: expected a positive int, got {n!r}")
    for pool in _blas_pools():
        pool.set_num_threads(1)
    kernel_threads.resize(n)


def get_num_threads():
    """The number of threads minigrad's CPU kernels run on (set_num_threads)."""
    return kernel_threads.count


def apply_default_threads():
    """One BLAS thread unless a THREAD_VARIABLES entry is set; skipped without threadpoolctl
    (minigrad still works, at the BLAS library's own default). Run once, at import."""
    if any(name in os.environ for name in THREAD_VARIABLES):
        return
    try:
        set_num_threads(DEFAULT_THREADS)
    except ImportError:
        pass


def _mallopt():
    """glibc's mallopt, or None on other C libraries."""
    name = ctypes.util.find_library("c")
    return getattr(ctypes.CDLL(name), "mallopt", None) if name else None


def tune_malloc():
    """Raise glibc's mmap and trim thresholds (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_)
    to 1 GiB, so freed blocks stay in the heap for the next step. A variable set in the
    environment wins. Returns {variable: what is in force}."""
    mallopt, in_force = _mallopt(), {}
    for name, option in _MALLOPT_OPTIONS.items():
        if name in os.environ:
            in_force[name] = os.environ[name] + " (environment)"
        elif mallopt is not None and mallopt(option, _MALLOC_THRESHOLD) == 1:
            in_force[name] = f"{_MALLOC_THRESHOLD} (mallopt)"
        else:
            in_force[name] = "library default (no mallopt)"
    return in_force


def blas_threads():
    """The number of threads a matrix product uses (1 when NumPy's BLAS has no thread pool)."""
    return max((pool.num_threads for pool in _blas_pools()), default=1)


def tune_cpu(threads=None, malloc=True):
    """Settings for CPU training, in one call: `threads` threads (`set_num_threads`, when given;
    otherwise the count in force stays, one by default) and, with `malloc`, glibc's allocator
    thresholds raised (`tune_malloc`). Returns {setting: value in force}, for printing."""
    if threads is not None:
        set_num_threads(threads)
    settings = {"threads": str(get_num_threads())}
    try:
        settings["blas_threads"] = str(blas_threads())
    except ImportError:
        settings["blas_threads"] = "library default (threadpoolctl not installed)"
    if malloc:
        settings.update(tune_malloc())
    return settings
