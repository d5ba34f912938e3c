"""The CUDA batch-norm kernels on a real GPU (through CuPy) behind NumPy in, NumPy out, so the
host-emulation cases (checks.py) run unchanged there. Used by tests/test_gpu.py and, as a script,
by benchmarks/gpu_check.sh under compute-sanitizer (which must start the Python process):

    python -m cuda_host.on_device [host | CASE_ID ...]    (from tests/; every case by
                        default, `host`: the host-emulation cases; exit status 1 on failure)
"""
import sys

from minigrad.backends.cuda_batch_norm import STORAGE, CudaBatchNorm

from . import checks

# The host cases plus GPU-sized ones: several blocks per channel, half types, odd sizes.
GPU_CASES = checks.CASES + [
    checks.Case((64, 6, 28, 28), 1), checks.Case((64, 6, 28, 28), 1, "float16"),
    checks.Case((32, 14, 14, 64), 3), checks.Case((32, 14, 14, 64), 3, "bfloat16"),
    checks.Case((256, 64), 1, "float16"), checks.Case((8, 256, 14, 14), 1, "float64"),
    checks.Case((2, 3, 4097), 1), checks.Case((4097, 3), 1, needs=(True, False, True)),
    checks.Case((16, 32, 9, 9), 1, loc=1000.0, spread=0.01),
]


class DeviceKernels:
    """The CUDA kernel object behind NumPy in, NumPy out. bfloat16 data travels as uint16 bits,
    as in the host harness."""

    def __init__(self, kernels):
        self.kernels = kernels
        self.xp = kernels.xp

    def _in(self, a):
        return None if a is None else self.xp.asarray(a)

    def _out(self, a):
        return None if a is None else a.get()

    def forward_train(self, x, gamma, beta, axis, eps, activation=None):
        return tuple(map(self._out, self.kernels.forward_train(
            *map(self._in, (x, gamma, beta)), axis, eps, activation)))

    def forward_infer(self, x, gamma, beta, mean, var, axis, eps, activation=None):
        return self._out(self.kernels.forward_infer(*map(self._in, (x, gamma, beta, mean, var)),
                                                    axis, eps, activation))

    def backward_from_output(self, g, z, rstd, gamma, beta, axis, activation, training, eps,
                             need_dx, need_dgamma, need_dbeta):
        return tuple(map(self._out, self.kernels.backward_from_output(
            *map(self._in, (g, z, rstd, gamma, beta)), axis, activation, training, eps, need_dx,
            need_dgamma, need_dbeta)))

    def backward(self, g, x, mean, rstd, gamma, axis, need_dx, need_dgamma, need_dbeta):
        return tuple(map(self._out, self.kernels.backward(
            *map(self._in, (g, x, mean, rstd, gamma)), axis, need_dx, need_dgamma, need_dbeta)))


class _BitsBatchNorm(CudaBatchNorm):
    storage = {**STORAGE, "uint16": ("__nv_bfloat16", "float32")}


def device_kernels(backend):
    """DeviceKernels around the CUDA backend's batch-norm kernels (bfloat16 as uint16 bits)."""
    real = backend.kernel("batch_norm")
    if not isinstance(real, CudaBatchNorm):
        raise TypeError(f"the CUDA backend's batch_norm kernel is a {type(real).__name__}")
    return DeviceKernels(_BitsBatchNorm(real.xp, real._launch, real.target_blocks, real.block,
                                        real.min_work))


def main(argv):
    import minigrad as mg

    kernels = device_kernels(mg.get_backend("cuda"))
    by_id = {case.id: case for case in GPU_CASES}
    cases = checks.CASES if argv == ["host"] else [by_id[i] for i in argv] or GPU_CASES
    failures = 0
    for case in cases:
        try:
            checks.run_case(kernels, case)
        except AssertionError as error:
            failures += 1
            print(f"FAIL {error}", flush=True)
        else:
            print(f"ok {case.id}", flush=True)
    print(f"{len(cases) - failures} passed, {failures} failed", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
