"""batch_norm.cu on machines without a GPU.

g++ compiles the unmodified .cu with tests/cuda_host/cuda_host.h (every CUDA thread a host
thread, real barriers for __syncthreads and the warp shuffles), and the kernels run through the
same `CudaBatchNorm` planner the GPU uses, against float64 NumPy. The same harness is built with
ThreadSanitizer and AddressSanitizer; altered copies of the kernels (a wrong sign, a missing
barrier, an out-of-bounds loop) show that each check catches what it is there to catch.
"""
import concurrent.futures
import os
import pathlib
import subprocess
import sys
import types

import numpy
import pytest

from minigrad.backends.cuda_batch_norm import SOURCE, CudaBatchNorm, kernel_names

from cuda_host import build, checks
from cuda_host.checks import Case, run_case
from cuda_host.harness import HostLauncher, HostLaunchError, host_kernels

TESTS = pathlib.Path(__file__).resolve().parent
ROOT = TESTS.parent
FLOAT32_NAMES = kernel_names("float")

pytestmark = pytest.mark.skipif(build.compiler() is None,
                                reason="g++ not found: the CUDA host-emulation harness needs it")

# Alterations of batch_norm.cu, by the namespace their kernels get in the test libraries:
# (text that must occur exactly once, its replacement).
WRONG_SIGNS = {
    "dx_sign": ("coef[channels + c] = -k1 * r * sum_gxhat / count;",
                "coef[channels + c] = k1 * r * sum_gxhat / count;"),
    "shift_sign": ("const Acc m = partials[3 * plane + c] + w.mean;",
                   "const Acc m = partials[3 * plane + c] - w.mean;"),
    "reduce_sign": ("    e = v - shift;", "    e = shift - v;"),
    "act_inverse": ("      y = v / param;", "      y = v * param;"),
    "act_slope": ("      d = g * (v + param);", "      d = g * (v - param);"),
}
EARLY_RETURN = ("  acc = block_welford(acc);",
                "  if (threadIdx.x == 5) return;\n  acc = block_welford(acc);")
MISSING_BARRIERS = {
    "no_barrier_block_welford": ("    shared_m2[warp] = a.m2;\n  }\n  __syncthreads();",
                                 "    shared_m2[warp] = a.m2;\n  }"),
    "no_barrier_stats_rows": ("= to_acc(shift.v[v]);\n    }\n  }\n  __syncthreads();",
                              "= to_acc(shift.v[v]);\n    }\n  }"),
}
_LOOP = ("for (unsigned j = begin + threadIdx.x; j {} end; j += BN_BLOCK) {{\n"
         "    const unsigned row = j / inner_packs, col = j - row * inner_packs;\n"
         "    const Pack<T, VEC> p")
PAST_THE_END = (_LOOP.format("<"), _LOOP.format("<="))

# The three libraries the tests use (plain, thread, address): the unmodified kernels, and the
# altered copies each one's tests need, in namespaces.
LIBRARIES = {
    None: {**WRONG_SIGNS, "early_return": EARLY_RETURN},
    "thread": MISSING_BARRIERS,
    "address": {"past_the_end": PAST_THE_END},
}


def _altered_source(directory, name, old, new):
    """A copy of batch_norm.cu with `old` (which must occur exactly once) replaced by `new`."""
    text = SOURCE.read_text()
    assert text.count(old) == 1, f"the alteration no longer matches batch_norm.cu: {old!r}"
    path = directory / f"{name}.cu"
    path.write_text(text.replace(old, new))
    return path


@pytest.fixture(scope="module")
def libraries(tmp_path_factory):
    """sanitizer (None, "thread", "address") -> future of its library's path. They compile
    concurrently (a compile is mostly fixed cost), the plain one first, while tests run."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2)
    futures = {}
    for sanitizer, alterations in LIBRARIES.items():
        if sanitizer and build.sanitizer_runtime(sanitizer) is None:
            continue
        directory = tmp_path_factory.mktemp(sanitizer or "plain")
        altered = {name: (_altered_source(directory, name, *change), FLOAT32_NAMES)
                   for name, change in alterations.items()}
        futures[sanitizer] = pool.submit(build.build, directory, sanitizer, altered)
    yield futures
    pool.shutdown(wait=True)


@pytest.fixture
def kernels(libraries):
    return host_kernels(libraries[None].result())


# ---------------------------------------------------------------- the kernels against NumPy

@pytest.mark.parametrize("case", checks.CASES, ids=lambda case: case.id)
def test_kernels_match_float64_reference(kernels, case):
    run_case(kernels, case)


def test_cases_cover_every_kernel_instance_and_layout(kernels):
    """Plans only (the launcher records, runs nothing): the cases reach every kernel instance,
    split channels over several blocks and use several channel blocks in the rows layout."""
    log = []
    kernels._launch = lambda ctype, name, grid, block, args: log.append((name, grid))
    for case in checks.CASES:
        axis = case.axis % len(case.shape)
        x = checks.to_storage(numpy.zeros(case.shape), case.dtype)
        c, acc = case.shape[axis], checks.acc_dtype(case.dtype)
        stats = numpy.ones(c, acc)
        kernels.forward_train(x, stats, stats, axis, 1e-5)
        kernels.forward_infer(x, stats, stats, stats, stats, axis, 1e-5)
        kernels.backward(x, x, stats, stats, stats, axis, *case.needs)
    assert {name for name, _ in log} == set(kernel_names())
    assert any(grid[1] > 1 for name, grid in log if "_planar" in name)
    rows = [grid for name, grid in log if "_rows" in name]
    assert any(grid[0] > 1 for grid in rows) and any(grid[1] > 1 for grid in rows)


def test_more_blocks_per_channel_than_values(libraries):
    """min_work=0 splits tiny channels over up to target_blocks blocks, most of them empty."""
    kernels = host_kernels(libraries[None].result(), target_blocks=32, min_work=0)
    for case in (Case((1, 4, 1, 1), 1), Case((2, 3, 2, 2), 1), Case((5, 3), 1, "float16")):
        run_case(kernels, case)
    assert max(grid[1] for name, grid in kernels.launcher.log if "reduce" in name) >= 16


def test_misaligned_and_strided_inputs_take_the_scalar_path(kernels):
    rng = numpy.random.default_rng(1)
    storage = rng.standard_normal(4 * 3 * 8 * 8 + 1).astype(numpy.float32)
    x = storage[1:].reshape(4, 3, 8, 8)   # 4 bytes past an aligned address
    assert x.ctypes.data % 16 != 0
    y, mean, var, _ = kernels.forward_train(x, None, None, 1, 1e-5)
    assert all(name.endswith(", 1>") for name, _ in kernels.launcher.log if "," in name)
    numpy.testing.assert_allclose(mean, x.mean(axis=(0, 2, 3)), rtol=1e-5, atol=1e-6)
    numpy.testing.assert_allclose(var, x.var(axis=(0, 2, 3)), rtol=1e-5)
    transposed = numpy.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    y2, mean2, _, _ = kernels.forward_train(transposed, None, None, 1, 1e-5)
    numpy.testing.assert_allclose(y2, y, rtol=1e-6, atol=1e-6)
    numpy.testing.assert_allclose(mean2, mean, rtol=1e-6, atol=1e-7)


def test_for_cupy_compiles_one_module_per_input_type(libraries, monkeypatch):
    """CudaBatchNorm.for_cupy, the GPU's entry point, with a stand-in CuPy: NumPy arrays and a
    RawModule whose functions run the host library."""
    from minigrad.backends import cuda_batch_norm

    launcher = HostLauncher(libraries[None].result())
    monkeypatch.setattr(cuda_batch_norm, "BLOCK", launcher.block)
    compiled = []

    class RawModule:
        def __init__(self, code, options, name_expressions):
            assert code == SOURCE.read_text()
            compiled.append((options, name_expressions))
            self.names = name_expressions

        def get_function(self, name):
            assert name in self.names
            return lambda grid, block, args: launcher(None, name, grid, block, args)

    device = types.SimpleNamespace(attributes={"MultiProcessorCount": 2})
    cupy = types.SimpleNamespace(RawModule=RawModule, ndarray=numpy.ndarray,
                                 cuda=types.SimpleNamespace(Device=lambda: device),
                                 **{name: getattr(numpy, name)
                                    for name in ("ascontiguousarray", "empty", "empty_like")})
    kernels = CudaBatchNorm.for_cupy(cupy)
    for case in (Case((4, 3, 8, 8), 1), Case((3, 5, 7, 8), 3, "float16"),
                 Case((6, 3, 100), 1, "float16")):
        run_case(kernels, case)
    assert [names for _, names in compiled] == [kernel_names("float"), kernel_names("__half")]
    assert all(f"-DBN_BLOCK={launcher.block}" in options for options, _ in compiled)
    assert kernels.target_blocks == 8 and kernels.block == launcher.block


def test_nothing_asked_nothing_launched(kernels):
    x = numpy.ones((2, 3, 4), numpy.float32)
    stats = numpy.zeros(3, numpy.float32)
    assert kernels.backward(x, x, stats, stats, None, 1, False, False, False) == (None,) * 3
    assert kernels.launcher.log == []


def test_bad_inputs_are_clear_errors(kernels):
    x = numpy.ones((2, 3, 4), numpy.float32)
    with pytest.raises(TypeError, match="int32"):
        kernels.forward_train(x.astype(numpy.int32), None, None, 1, 1e-5)
    with pytest.raises(ValueError, match=r"gamma has shape \(4,\); expected \(3,\)"):
        kernels.forward_train(x, numpy.ones(4, numpy.float32), None, 1, 1e-5)
    with pytest.raises(ValueError, match="no values per channel"):
        kernels.forward_train(numpy.ones((0, 3, 4), numpy.float32), None, None, 1, 1e-5)
    with pytest.raises(ValueError, match="axis 3 is out of range"):
        kernels.forward_infer(x, None, None, x[0, :, 0], x[0, :, 0], 3, 1e-5)
    with pytest.raises(ValueError, match="gradient has shape"):
        kernels.backward(x[:1], x, x[0, :, 0], x[0, :, 0], None, 1, True, False, False)
    with pytest.raises(HostLaunchError, match="no kernel instance named"):
        kernels.launcher("int", "bn_apply<int, 1>", (1,), (kernels.block,), ())


# ---------------------------------------------------------------- altered kernels fail

@pytest.mark.parametrize("namespace, message, activation", [
    ("dx_sign", "dx differs", None), ("shift_sign", "mean differs", None),
    ("reduce_sign", "dgamma differs", None), ("act_inverse", "dgamma differs", "leaky_relu"),
    ("act_slope", "dgamma differs", "elu"), ("dx_sign", "dx differs", "elu")])
def test_a_wrong_sign_fails_the_reference_check(libraries, namespace, message, activation):
    kernels = host_kernels(libraries[None].result(), namespace)
    with pytest.raises(AssertionError, match=message):
        run_case(kernels, Case((4, 3, 8, 8), 1, activation=activation))


def test_an_early_return_before_a_shuffle_is_reported(libraries):
    kernels = host_kernels(libraries[None].result(), "early_return")
    with pytest.raises(HostLaunchError, match="reads lane 5, which has exited"):
        run_case(kernels, Case((4, 3, 8, 8), 1))


# ---------------------------------------------------------------- sanitizers

def _sanitized(sanitizer, library, *case_ids):
    """Run checks.py on `library` in a fresh Python with the sanitizer runtime preloaded."""
    runtime = build.sanitizer_runtime(sanitizer)
    env = dict(os.environ, LD_PRELOAD=str(runtime), OPENBLAS_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), str(TESTS)]),
               TSAN_OPTIONS="halt_on_error=1 exitcode=66",
               ASAN_OPTIONS="detect_leaks=0 exitcode=67")
    return subprocess.run([sys.executable, "-m", "cuda_host.checks", str(library), *case_ids],
                          cwd=TESTS, env=env, capture_output=True, text=True, timeout=600)


def _sanitizer_library(libraries, sanitizer):
    """The library built with `sanitizer`; skips where the runtime is missing or does not start
    in a Python process."""
    runtime = build.sanitizer_runtime(sanitizer)
    if runtime is None:
        pytest.skip(f"g++ has no {sanitizer} sanitizer runtime")
    probe = subprocess.run([sys.executable, "-c", "pass"], capture_output=True, text=True,
                           env=dict(os.environ, LD_PRELOAD=str(runtime),
                                    ASAN_OPTIONS="detect_leaks=0"))
    if probe.returncode != 0:
        pytest.skip(f"the {sanitizer} sanitizer runtime does not start here: "
                    f"{probe.stderr.strip()[:300]}")
    return libraries[sanitizer].result()


@pytest.mark.parametrize("sanitizer", ["thread", "address"])
def test_kernels_are_clean_under_sanitizer(libraries, sanitizer):
    result = _sanitized(sanitizer, _sanitizer_library(libraries, sanitizer))
    assert result.returncode == 0, result.stdout + result.stderr[-6000:]
    assert result.stdout.count("ok ") == len(checks.SANITIZER_CASES)
    assert "Sanitizer" not in result.stderr, result.stderr[-6000:]


@pytest.mark.parametrize("namespace, case_id", [
    ("no_barrier_block_welford", "4x3x8x8-axis1-float32-gamma-beta"),
    ("no_barrier_stats_rows", "300x5-axis1-float32-gamma-beta")])
def test_thread_sanitizer_catches_a_missing_barrier(libraries, namespace, case_id):
    library = _sanitizer_library(libraries, "thread")
    # TSan keeps a few accesses per memory word, so with many threads touching one word a race
    # can be evicted unseen (it was, once in a full run, with 4 repetitions in one process): up
    # to 5 processes of 8 repetitions each, stopping at the first that reports the race.
    for _ in range(5):
        result = _sanitized("thread", f"{library}:{namespace}", *[case_id] * 8)
        if "ThreadSanitizer: data race" in result.stderr:
            break
    assert "ThreadSanitizer: data race" in result.stderr, result.stderr[-3000:]
    assert result.returncode != 0


def test_address_sanitizer_catches_reading_past_the_end(libraries):
    library = _sanitizer_library(libraries, "address")
    result = _sanitized("address", f"{library}:past_the_end", "4x3x8x8-axis1-float32-gamma-beta")
    assert result.returncode != 0
    assert "AddressSanitizer: heap-buffer-overflow" in result.stderr, result.stderr[-3000:]


@pytest.mark.parametrize("shape, axis", [((16, 3, 32, 32), 1), ((512, 8), 1)])
def test_a_large_mean_next_to_a_small_spread_keeps_its_digits(kernels, shape, axis):
    """float32 data of mean 1e3 and sd 1: y = a*(x - p) + b with p the channel's first value
    stays within a few float32 ulps of 1 of the float64 answer (a*x + (beta - mean*a), rounded
    at 1e3, is off by ~3e-5), in training and in inference with the float64 statistics."""
    rng = numpy.random.default_rng(0)
    x = (1e3 + rng.standard_normal(shape)).astype(numpy.float32)
    axes = tuple(i for i in range(len(shape)) if i != axis)
    x64 = x.astype(numpy.float64)
    mean, var = x64.mean(axis=axes, keepdims=True), x64.var(axis=axes, keepdims=True)
    reference = (x64 - mean) / numpy.sqrt(var + 1e-5)
    y = kernels.forward_train(x, None, None, axis, 1e-5)[0]
    assert numpy.abs(y - reference).max() < 4e-6
    y = kernels.forward_infer(x, None, None, mean.reshape(-1).astype(numpy.float32),
                              var.reshape(-1).astype(numpy.float32), axis, 1e-5)
    assert numpy.abs(y - reference).max() < 1e-4     # the given mean is rounded at 1e3 here
