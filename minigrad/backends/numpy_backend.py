"""The CPU backend: plain NumPy."""
import numpy

from .base import Backend


class NumpyBackend(Backend):
    name = "numpy"
    device = "cpu"
    xp = numpy

    def to_numpy(self, array):
        return numpy.asarray(array)
