"""Functions that make tensors: from data, filled, random (one seeded generator), ranges."""
import numpy

from .backends import get_backend
from .tensor import Tensor

_generator = numpy.random.default_rng()


def manual_seed(seed):
    """Seed the generator behind `randn`, `rand`, parameter initialisation and dropout."""
    global _generator
    _generator = numpy.random.default_rng(seed)


def generator():
    """The NumPy generator minigrad draws its random numbers from."""
    return _generator


def tensor(data, requires_grad=False, dtype=None, device=None):
    """A tensor from a number, a nested list or an array; Python floats become float32."""
    return Tensor(data, requires_grad=requires_grad, dtype=dtype, device=device)


def _shape(shape):
    return tuple(shape[0]) if len(shape) == 1 and not isinstance(shape[0], int) else shape


def _filled(make, shape, dtype, device, requires_grad):
    backend = get_backend(device)
    data = make(backend.xp, _shape(shape), backend.xp.dtype(dtype or "float32"))
    return Tensor(data, requires_grad=requires_grad, device=device)


def zeros(*shape, dtype=None, device=None, requires_grad=False):
    return _filled(lambda xp, s, d: xp.zeros(s, d), shape, dtype, device, requires_grad)


def ones(*shape, dtype=None, device=None, requires_grad=False):
    return _filled(lambda xp, s, d: xp.ones(s, d), shape, dtype, device, requires_grad)


def full(shape, value, dtype=None, device=None, requires_grad=False):
    return _filled(lambda xp, s, d: xp.full(s, value, d), (shape,), dtype, device, requires_grad)


def zeros_like(t, dtype=None, requires_grad=False):
    return zeros(t.shape, dtype=dtype or t.dtype, device=t.device, requires_grad=requires_grad)


def ones_like(t, dtype=None, requires_grad=False):
    return ones(t.shape, dtype=dtype or t.dtype, device=t.device, requires_grad=requires_grad)


def randn(*shape, dtype=None, device=None, requires_grad=False):
    """Standard normal samples (drawn on the CPU from the seeded generator)."""
    data = _generator.standard_normal(_shape(shape)).astype(dtype or "float32")
    return Tensor(data, requires_grad=requires_grad, device=device)


def rand(*shape, dtype=None, device=None, requires_grad=False):
    """Uniform samples in [0, 1)."""
    data = _generator.random(_shape(shape)).astype(dtype or "float32")
    return Tensor(data, requires_grad=requires_grad, device=device)


def arange(start, stop=None, step=1, dtype=None, device=None):
    """Like numpy.arange; integer arguments give int64, others float32."""
    backend = get_backend(device)
    data = backend.xp.arange(start, stop, step) if stop is not None else backend.xp.arange(start)
    if dtype is None and data.dtype.kind == "f":
        dtype = "float32"
    return Tensor(data, dtype=dtype, device=device)


def from_numpy(array):
    """A CPU tensor sharing memory with a NumPy array (its dtype kept)."""
    return Tensor(numpy.asarray(array), dtype=array.dtype)
