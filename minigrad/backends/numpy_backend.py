"""The CPU backend: plain NumPy, plus the cache-blocked batch-norm (also with an activation)
and conv2d kernels."""
import numpy

from .array_batch_norm import ArrayBatchNorm
from .array_batch_norm_act import ArrayBatchNormAct
from .base import Backend
from .numpy_conv import BlockedConv2d
from .special import numpy_erf


class NumpyBackend(Backend):
    name = "numpy"
    device = "cpu"
    xp = numpy

    def __init__(self):
        super().__init__()
        self.kernels["batch_norm"] = ArrayBatchNorm(numpy)
        self.kernels["batch_norm_act"] = ArrayBatchNormAct(numpy)
        self.kernels["conv2d"] = BlockedConv2d(numpy)
        self.kernels["erf"] = numpy_erf

    def _to_numpy(self, array):
        return numpy.asarray(array)
