"""Special functions that NumPy lacks, as backend kernels ("erf").

NumPy has no erf; CuPy has one in cupyx.scipy.special. The CPU kernel maps the C library's erf
(Python's math.erf) over the array: exact to the last bit, but a Python call per element, so it
suits activations (GELU) on moderate sizes rather than the hot path of a large model.
"""
import math

import numpy

_math_erf = numpy.frompyfunc(math.erf, 1, 1)


def numpy_erf(x):
    """erf(x) elementwise for a floating NumPy array, in x's dtype."""
    return numpy.asarray(_math_erf(x), dtype=object).astype(x.dtype)
