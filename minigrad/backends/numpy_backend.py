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
        self.kernels["mean"] = mean_of

    def _to_numpy(self, array):
        return numpy.asarray(array)


def mean_of(shape, axes, keepdims):
    """`x.mean(axis=axes, keepdims=keepdims)` for arrays of `shape`, as a function made once
    (for mg.compile's replays): for float32 and float64 arrays whose mean is an array, NumPy's
    own two calls (`_mean` in numpy/_core/_methods.py: the sum, then the division by the count
    as an intp, in place) without the Python around them that works the count and the dtype out
    again on every call, so the same bits. Anything else takes `x.mean` itself."""
    count = 1
    for axis in axes:
        count *= shape[axis]
    count, add, divide = numpy.intp(count), numpy.add.reduce, numpy.true_divide
    whole = len(axes) == len(shape) and not keepdims   # a NumPy scalar: another path

    def mean(x):
        if whole or x.dtype.char not in "fd":
            return x.mean(axis=axes, keepdims=keepdims)
        total = add(x, axes, None, None, keepdims)
        return divide(total, count, out=total, casting="unsafe", subok=False)
    return mean
