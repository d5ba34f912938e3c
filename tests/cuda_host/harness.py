"""Call the host-emulation library through ctypes, behind the same `CudaBatchNorm` planner the
GPU uses: only the launch transport differs (ctypes instead of cupy.RawModule)."""
import ctypes

import numpy

from minigrad.backends.cuda_batch_norm import STORAGE, CudaBatchNorm

_C_SCALARS = {numpy.uint32: ctypes.c_uint32, numpy.int32: ctypes.c_int32,
              numpy.uint64: ctypes.c_uint64, numpy.float32: ctypes.c_float,
              numpy.float64: ctypes.c_double}


class HostLaunchError(RuntimeError):
    """The emulation reported a bad launch, a bad shuffle or a deadlock."""


class HostLauncher:
    """launch(ctype, name, grid, block, args) for a library built by build.py (which holds every
    input type, so `ctype` picks nothing), running the kernels of `namespace` (an altered copy)
    or the unmodified ones. Keeps a log of (name, grid) per launch for tests of the plan."""

    def __init__(self, path, namespace=None):
        self.prefix = f"{namespace}::" if namespace else ""
        self.lib = ctypes.CDLL(str(path))
        self.lib.cuda_host_launch.argtypes = [ctypes.c_char_p] + [ctypes.c_uint] * 6 + [
            ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p, ctypes.c_size_t]
        self.lib.cuda_host_launch.restype = ctypes.c_int
        self.block = self.lib.cuda_host_block_size()
        self.log = []

    def __call__(self, ctype, name, grid, block, args):
        values = [ctypes.c_void_p(a.ctypes.data) if isinstance(a, numpy.ndarray)
                  else _C_SCALARS[type(a)](a) for a in args]
        pointers = (ctypes.c_void_p * len(values))(*(ctypes.addressof(v) for v in values))
        grid3, block3 = (tuple(grid) + (1, 1))[:3], (tuple(block) + (1, 1))[:3]
        message = ctypes.create_string_buffer(1024)
        status = self.lib.cuda_host_launch((self.prefix + name).encode(), *grid3, *block3,
                                           pointers, message, len(message))
        self.log.append((name, grid3))
        if status != 0:
            raise HostLaunchError(f"{name} grid {grid3} block {block3}: "
                                  f"{message.value.decode()} (status {status})")


class HostBatchNorm(CudaBatchNorm):
    """CudaBatchNorm on NumPy arrays. NumPy has no bfloat16, so bfloat16 data travels as its
    uint16 bit patterns."""

    storage = {**STORAGE, "uint16": ("__nv_bfloat16", "float32")}


def host_kernels(library, namespace=None, target_blocks=8, min_work=1):
    """The batch-norm kernel object backed by `library` (the kernels of `namespace`, if given).
    Small targets and min_work=1 make even small test inputs split each channel over several
    blocks."""
    launcher = HostLauncher(library, namespace)
    kernels = HostBatchNorm(numpy, launcher, target_blocks=target_blocks, block=launcher.block,
                            min_work=min_work)
    kernels.launcher = launcher
    return kernels
