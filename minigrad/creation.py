"""Functions that make tensors: from data, filled, random (from a `Generator`), ranges.

Every function takes `dtype=`, `device=` ("cpu" | "cuda") and, where it makes sense,
`requires_grad=`; the random ones take `generator=` (minigrad/random.py; default: the default
generator). Without a dtype, filled and random tensors have the default float dtype
(float32, `mg.set_default_dtype`) and the rest follow the rules of `tensor` (minigrad/tensor.py).
"""
import numbers

import numpy

from . import tracing
from .backends import get_backend
from .batched import wrapped
from .dtypes import as_dtype, get_default_dtype, is_floating
from .random import numpy_generator
from .shapes import check_sizes
from .tensor import Tensor, as_tensor, from_data, legacy_tensor, shape_from_args
from .vmap_levels import batch_sizes, random_levels


def tensor(data, requires_grad=False, dtype=None, device=None):
    """A new tensor with its own copy of `data` (a number, a nested list, an array or a tensor).

    Python floats get the default float dtype and ints int64; arrays keep their dtype unless
    `dtype` is given.
    """
    return from_data(data, dtype, device, copy=True, requires_grad=requires_grad)


def from_numpy(array):
    """A CPU tensor sharing memory with the NumPy array `array` (its dtype kept)."""
    if not isinstance(array, numpy.ndarray):
        raise TypeError(f"from_numpy: expected a numpy.ndarray, got {type(array).__name__}")
    return as_tensor(array)


def _shape(op, args):
    """The checked shape meant by `op(2, 3)` or `op((2, 3))`."""
    return check_sizes(op, shape_from_args(args))


def _made(array, backend, requires_grad):
    return from_data(array, device=backend.device, requires_grad=requires_grad)


def zeros(*shape, dtype=None, device=None, requires_grad=False):
    backend = get_backend(device)
    array = backend.xp.zeros(_shape("zeros", shape), as_dtype(dtype) or get_default_dtype())
    return _made(array, backend, requires_grad)


def ones(*shape, dtype=None, device=None, requires_grad=False):
    backend = get_backend(device)
    array = backend.xp.ones(_shape("ones", shape), as_dtype(dtype) or get_default_dtype())
    return _made(array, backend, requires_grad)


def full(shape, value, dtype=None, device=None, requires_grad=False):
    """`shape` filled with `value`; the dtype follows `value` as in `tensor` (7 -> int64,
    0.5 -> the default float dtype) unless given."""
    backend = get_backend(device)
    if not isinstance(value, numbers.Number):
        raise TypeError(f"full: the fill value must be a number, got {value!r}")
    dtype = as_dtype(dtype) or from_data(value).dtype
    array = backend.xp.full(_shape("full", (shape,)), value, dtype)
    return _made(array, backend, requires_grad)


def zeros_like(t, dtype=None, requires_grad=False):
    return zeros(t.shape, dtype=dtype or t.dtype, device=t.device, requires_grad=requires_grad)


def ones_like(t, dtype=None, requires_grad=False):
    return ones(t.shape, dtype=dtype or t.dtype, device=t.device, requires_grad=requires_grad)


def full_like(t, value, dtype=None, requires_grad=False):
    return full(t.shape, value, dtype=dtype or t.dtype, device=t.device,
                requires_grad=requires_grad)


def _random(op, draw, shape, dtype, device, requires_grad):
    """Floating samples `draw(shape)` as a tensor."""
    dtype = as_dtype(dtype) or get_default_dtype()
    if not is_floating(dtype):
        raise TypeError(f"{op}: samples need a floating-point dtype, not {dtype}")
    at = random_levels(op, batchable=True)   # inside vmap with randomness='different'
    samples = _from_samples(draw(batch_sizes(at) + _shape(op, shape)), dtype, device,
                            requires_grad)
    return wrapped(samples, at)


def _from_samples(samples, dtype, device, requires_grad):
    # Drawn on the CPU so that a seed gives the same numbers on every device.
    backend = get_backend(device)
    array = backend.asarray(samples.astype(dtype, copy=False))
    return _made(array, backend, requires_grad)


def randn(*shape, generator=None, dtype=None, device=None, requires_grad=False):
    """Standard normal samples (drawn on the CPU from `generator`; mg.compile draws again at
    each replay)."""
    return tracing.run(_drawn, "randn", generator, "standard_normal", shape, dtype, device,
                       requires_grad)


def rand(*shape, generator=None, dtype=None, device=None, requires_grad=False):
    """Uniform samples in [0, 1) (drawn on the CPU from `generator`)."""
    return tracing.run(_drawn, "rand", generator, "random", shape, dtype, device, requires_grad)


def _drawn(op, generator, method, shape, dtype, device, requires_grad):
    draw = getattr(numpy_generator(generator, op, batchable=True), method)
    return _random(op, draw, shape, dtype, device, requires_grad)


def randn_like(t, dtype=None, requires_grad=False, generator=None):
    return randn(t.shape, generator=generator, dtype=dtype or t.dtype, device=t.device,
                 requires_grad=requires_grad)


def rand_like(t, dtype=None, requires_grad=False, generator=None):
    return rand(t.shape, generator=generator, dtype=dtype or t.dtype, device=t.device,
                requires_grad=requires_grad)


def arange(start, stop=None, step=1, dtype=None, device=None, requires_grad=False):
    """Like numpy.arange (`arange(n)`, `arange(start, stop, step)`); integer arguments give
    int64, others the default float dtype."""
    for name, value in (("start", start), ("stop", stop), ("step", step)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
            raise TypeError(f"arange: {name} must be a real number, got {value!r}")
    if step == 0:
        raise ValueError("arange: step must not be 0")
    backend = get_backend(device)
    data = backend.xp.arange(start, stop, step)
    default = {"i": "int64", "f": get_default_dtype()}.get(data.dtype.kind)
    return _made(data.astype(as_dtype(dtype) or default, copy=False), backend, requires_grad)


def empty(*shape, dtype=None, device=None, requires_grad=False):
    """An uninitialised tensor of `shape` (as torch.empty: fill it before reading it)."""
    backend = get_backend(device)
    array = backend.xp.empty(shape_from_args(shape), as_dtype(dtype) or get_default_dtype())
    return _made(array, backend, requires_grad)


def eye(n, m=None, dtype=None, device=None, requires_grad=False):
    """The (n, m) identity matrix (m = n by default)."""
    backend = get_backend(device)
    array = backend.xp.eye(n, m, dtype=as_dtype(dtype) or get_default_dtype())
    return _made(array, backend, requires_grad)


def linspace(start, end, steps, dtype=None, device=None, requires_grad=False):
    """`steps` evenly spaced values from start to end, both included (float32 by default)."""
    if not isinstance(steps, int) or steps < 0:
        raise ValueError(f"linspace: steps must be a non-negative int, got {steps!r}")
    backend = get_backend(device)
    array = backend.xp.linspace(start, end, steps, dtype="float64")
    return _made(array.astype(as_dtype(dtype) or get_default_dtype()), backend, requires_grad)


def randint(low, high=None, size=None, generator=None, dtype=None, device=None,
            requires_grad=False):
    """Integers drawn uniformly from [low, high) (`randint(high, size)` starts at 0), int64 by
    default, from `generator`."""
    if size is None:   # randint(high, size)
        low, high, size = 0, low, high
    if size is None or high is None or high <= low:
        raise ValueError(f"randint: expected randint(low, high, size) with low < high, got "
                         f"low={low}, high={high}, size={size}")
    samples = numpy_generator(generator, "randint").integers(low, high, shape_from_args((size,)))
    return _from_samples(samples, as_dtype(dtype) or "int64", device, requires_grad)


def randperm(n, generator=None, dtype=None, device=None, requires_grad=False):
    """A random permutation of 0..n-1 (int64 by default), from `generator`."""
    samples = numpy_generator(generator, "randperm").permutation(n)
    return _from_samples(samples, as_dtype(dtype) or "int64", device, requires_grad)


def multinomial(input, num_samples, replacement=False, generator=None):
    """`input.multinomial(...)`: indices drawn by the weights in each row of `input`."""
    return input.multinomial(num_samples, replacement, generator=generator)


def bernoulli(input, p=None, generator=None):
    """`input.bernoulli(...)`: 1 with probability `input` (or `p`), else 0."""
    return input.bernoulli(p, generator=generator)


def normal(mean, std, size, generator=None, dtype=None, device=None, requires_grad=False):
    """Samples of N(mean, std^2) (numbers) of shape `size`."""
    draw = numpy_generator(generator, "normal", batchable=True).normal
    return _random("normal", lambda shape: draw(mean, std, shape), (size,), dtype, device,
                   requires_grad)


class _LegacyType(type):
    """The type of `mg.FloatTensor` and friends, PyTorch's typed legacy constructors: calling
    one makes a tensor of its dtype as `Tensor(...)` does (`LongTensor([1, 2])`,
    `FloatTensor(3, 4)`), and `isinstance(t, mg.FloatTensor)` asks whether t is a CPU tensor of
    that dtype."""

    def __call__(cls, *args, device=None):
        return legacy_tensor(cls.__name__, args, cls.dtype, device)

    def __instancecheck__(cls, value):
        return isinstance(value, Tensor) and value.dtype == cls.dtype and value.device == "cpu"


def _legacy_type(name, dtype):
    return _LegacyType(name, (), {"dtype": as_dtype(dtype), "__module__": __name__})


FloatTensor, DoubleTensor, HalfTensor = (_legacy_type(f"{n}Tensor", n.lower())
                                         for n in ("Float", "Double", "Half"))
LongTensor, IntTensor = _legacy_type("LongTensor", "int64"), _legacy_type("IntTensor", "int32")
ShortTensor, CharTensor = _legacy_type("ShortTensor", "int16"), _legacy_type("CharTensor", "int8")
ByteTensor, BoolTensor = _legacy_type("ByteTensor", "uint8"), _legacy_type("BoolTensor", "bool")


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """True when |a - b| <= atol + rtol * |b| everywhere (tensors, arrays or numbers)."""
    def host(value):
        return value.numpy(force=True) if isinstance(value, Tensor) else numpy.asarray(value)

    return bool(numpy.allclose(host(a), host(b), rtol=rtol, atol=atol, equal_nan=equal_nan))
