"""The GPU backend: CuPy arrays on the current CUDA device, the fused batch-norm kernels (also
with an activation: "batch_norm_act") and conv2d's whole-array products. No bfloat16: CuPy has
no such arrays, so moving a bfloat16 tensor here is a clear error.

Imported only when a tensor asks for device "cuda" (backends/__init__.py first checks that CuPy
imports and sees a GPU, and says which is missing), so minigrad never needs CuPy otherwise.
"""
import cupy
import cupyx.scipy.special
import numpy

from .array_conv import ArrayConv2d
from .base import Backend
from .cuda_batch_norm import CudaBatchNorm


class CupyBackend(Backend):
    name = "cupy"
    device = "cuda"
    xp = cupy
    defers_checks = True   # a check read per call would wait for the GPU every time

    def __init__(self):
        super().__init__()
        batch_norm = CudaBatchNorm.for_cupy(cupy)   # one compiled module for both
        self.kernels["batch_norm"] = self.kernels["batch_norm_act"] = batch_norm
        self.kernels["conv2d"] = ArrayConv2d(cupy)
        self.kernels["erf"] = cupyx.scipy.special.erf
        self.kernels["mean"] = mean_of

    def asarray(self, data, dtype=None):
        wanted = dtype if dtype is not None else getattr(data, "dtype", None)
        if wanted is not None and numpy.dtype(wanted).kind == "V":   # ml_dtypes' bfloat16
            raise TypeError("device 'cuda': a bfloat16 tensor cannot move to the GPU (CuPy has "
                            "no bfloat16 arrays); keep it on the CPU, or cast it first: "
                            "x.float().to('cuda')")
        return super().asarray(data, dtype)

    def _to_numpy(self, array):
        return array.get()


def mean_of(shape, axes, keepdims):
    """`x.mean(axis=axes, keepdims=keepdims)` as a function (the contract of numpy_backend's
    `mean_of`): CuPy's method is one call already."""
    return lambda x: x.mean(axis=axes, keepdims=keepdims)
