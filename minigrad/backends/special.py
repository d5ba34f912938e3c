"""Special functions that NumPy lacks, as backend kernels ("erf").

NumPy has no erf; CuPy has one in cupyx.scipy.special. The CPU kernel evaluates erf with whole-
array NumPy operations (a Python call per element, math.erf, cost most of a small GPT's step):

    erf(x) = x * f(|x|),  f(a) = erf(a) / a, smooth and even, and erf(x) = sign(x) for |x| >= 6
    (1 in float64). On each interval [0, 0.5), [0.5, 1), ... [5.5, 6), f is a polynomial in the
    interval's own coordinate t in [-1, 1): the interpolant at the Chebyshev nodes, whose
    values come from math.erf once, at import. Degree 16 in float64 and 7 in float32 give erf
    to within 2e-15 and 3 units in the last place of the C library's (tests/test_activations.py).

Dividing by a first keeps the relative accuracy for tiny x, where erf(x) ~ 2x / sqrt(pi).

In float32 (and float16, computed in float32) the values with |x| < 2, nearly all of a layer's
activations, take a faster road: one polynomial in x^2 on all of [0, 4) (degree 9: within 2
units in the last place), whole-array steps without the per-interval gathers; the rest go
through the intervals above.
"""
import math

import numpy

_WIDTH, _END = 0.5, 6.0


def _interpolants(degree, dtype):
    """(degree + 1, intervals) table: row j holds the coefficient of t^j on each interval."""
    nodes = numpy.cos(numpy.pi * (numpy.arange(degree + 1) + 0.5) / (degree + 1))
    rows = []
    for start in numpy.arange(0.0, _END, _WIDTH):
        points = start + (nodes + 1) * _WIDTH / 2
        chebyshev = numpy.polynomial.chebyshev.chebfit(
            nodes, [math.erf(a) / a for a in points], degree)
        rows.append(numpy.polynomial.chebyshev.cheb2poly(chebyshev))
    return numpy.ascontiguousarray(numpy.array(rows).T.astype(dtype))


_TABLES = {numpy.dtype(numpy.float64): _interpolants(16, numpy.float64),
           numpy.dtype(numpy.float32): _interpolants(7, numpy.float32)}


def _central_polynomial(degree, dtype):
    """Coefficients (t^0 first) of erf(x)/x as a polynomial in t = x^2 / 2 - 1 over |x| < 2:
    the interpolant at the Chebyshev nodes, from math.erf."""
    nodes = numpy.cos(numpy.pi * (numpy.arange(degree + 1) + 0.5) / (degree + 1))
    roots = numpy.sqrt(2 * (nodes + 1))
    chebyshev = numpy.polynomial.chebyshev.chebfit(
        nodes, [math.erf(r) / r for r in roots], degree)
    return numpy.polynomial.chebyshev.cheb2poly(chebyshev).astype(dtype)


_CENTRAL = _central_polynomial(9, numpy.float32)


def numpy_erf(x):
    """erf(x) elementwise for a floating NumPy array, in x's dtype (float16 through float32)."""
    table = _TABLES.get(x.dtype)
    if table is None:
        return numpy_erf(x.astype(numpy.float32)).astype(x.dtype)
    if x.dtype == numpy.float32 and x.size:
        return _float32_erf(x)
    return _erf_by_intervals(x, table)


def _float32_erf(x):
    """erf on float32: the central polynomial, then the intervals where |x| >= 2 (or inf)."""
    flat = x.reshape(-1)
    with numpy.errstate(over="ignore", invalid="ignore"):   # (those values are replaced)
        t = flat * flat
        t *= numpy.float32(0.5)
        t -= numpy.float32(1)
        f = t * _CENTRAL[-1]
        for coefficient in _CENTRAL[-2:0:-1]:
            f += coefficient
            f *= t
        f += _CENTRAL[0]
        f *= flat
    outer = numpy.flatnonzero(numpy.abs(flat) >= 2)
    if outer.size:
        f[outer] = _erf_by_intervals(flat[outer], _TABLES[flat.dtype])
    return f.reshape(x.shape)


def _erf_by_intervals(x, table):
    """erf by the Chebyshev interpolants on the intervals of width 0.5 (see above)."""
    flat = x.reshape(-1)   # 1-D, so that every step below stays an array
    a = numpy.abs(flat)
    # fmin: a NaN takes the last interval, and stays NaN through a and t
    interval = (numpy.fmin(a, x.dtype.type(_END - _WIDTH)) * x.dtype.type(1 / _WIDTH)).astype(
        numpy.intp)
    a = numpy.minimum(a, x.dtype.type(_END))   # erf(a) = 1 from 6 on, inf included
    t = a * x.dtype.type(2 / _WIDTH) - (2 * interval + 1).astype(x.dtype)
    f = table[-1][interval]
    for coefficients in table[-2::-1]:   # Horner's rule, each element with its interval's row
        f *= t
        f += coefficients[interval]
    return numpy.copysign(f * a, flat).reshape(x.shape)
