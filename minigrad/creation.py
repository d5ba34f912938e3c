"""Functions that make tensors: from data, filled, random (one seeded generator), ranges.

Every function takes `dtype=`, `device=` ("cpu" | "cuda") and, where it makes sense,
`requires_grad=`. Without a dtype, filled and random tensors have the default float dtype
(float32, `mg.set_default_dtype`) and the rest follow the rules of `tensor` (minigrad/tensor.py).
"""
import copy
import numbers

import numpy

from .backends import get_backend
from .dtypes import as_dtype, get_default_dtype
from .ops._shapes import check_sizes
from .tensor import Tensor, shape_from_args

_generator = numpy.random.default_rng()
_seed = None
_device_generators = {}   # backend -> its own generator, for draws made on the device


def manual_seed(seed):
    """Seed the generator behind `randn`, `rand`, parameter initialisation and dropout (and the
    GPU's generator for dropout masks)."""
    global _generator, _seed
    _generator, _seed = numpy.random.default_rng(seed), seed
    _device_generators.clear()


def generator(backend=None):
    """The generator minigrad draws its random numbers from (ask again after `manual_seed`:
    seeding makes a new one). On the CPU: NumPy's. For another backend (the GPU): that array
    library's own (`xp.random.default_rng`, same seed), so a draw such as a dropout mask is made
    on the device with no copy from the host; its numbers differ from the CPU's."""
    if backend is None or backend.device == "cpu":
        return _generator
    if backend not in _device_generators:
        _device_generators[backend] = backend.xp.random.default_rng(_seed)
    return _device_generators[backend]


def get_rng_state():
    """A copy of the state of minigrad's CPU generator: NumPy's bit-generator state, a dict of
    strings and ints, which `set_rng_state` puts back (e.g. when resuming from a checkpoint).
    Like PyTorch's `torch.get_rng_state`, it does not cover the GPU's own generator (dropout
    masks drawn on the device)."""
    return copy.deepcopy(_generator.bit_generator.state)


def set_rng_state(state):
    """Continue minigrad's random numbers from `state`, as `get_rng_state()` returned it."""
    global _generator
    _generator = generator_from_state(state, "set_rng_state")


def generator_from_state(state, where):
    """A NumPy generator whose bit generator is in `state`, or a clear error naming `where`."""
    name = state.get("bit_generator") if isinstance(state, dict) else None
    bit_generator_type = getattr(numpy.random, str(name), None)
    if not isinstance(bit_generator_type, type) or \
            not issubclass(bit_generator_type, numpy.random.BitGenerator):
        raise ValueError(f"{where}: expected a NumPy bit-generator state (a dict with "
                         f"'bit_generator', e.g. from get_rng_state()), got {state!r:.200}")
    bit_generator = bit_generator_type()
    try:
        bit_generator.state = copy.deepcopy(state)
    except (TypeError, ValueError, KeyError) as error:
        raise ValueError(f"{where}: not a valid {name} state ({error})") from error
    return numpy.random.Generator(bit_generator)


def tensor(data, requires_grad=False, dtype=None, device=None):
    """A new tensor with its own copy of `data` (a number, a nested list, an array or a tensor).

    Python floats get the default float dtype and ints int64; arrays keep their dtype unless
    `dtype` is given.
    """
    return Tensor(data, requires_grad=requires_grad, dtype=dtype, device=device, copy=True)


def from_numpy(array):
    """A CPU tensor sharing memory with the NumPy array `array` (its dtype kept)."""
    if not isinstance(array, numpy.ndarray):
        raise TypeError(f"from_numpy: expected a numpy.ndarray, got {type(array).__name__}")
    return Tensor(array)


def _shape(op, args):
    """The checked shape meant by `op(2, 3)` or `op((2, 3))`."""
    return check_sizes(op, shape_from_args(args))


def _made(array, backend, requires_grad):
    return Tensor(array, requires_grad=requires_grad, device=backend.device)


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
    dtype = as_dtype(dtype) or Tensor(value).dtype
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
    if dtype.kind != "f":
        raise TypeError(f"{op}: samples need a floating-point dtype, not {dtype}")
    return _from_samples(draw(_shape(op, shape)), dtype, device, requires_grad)


def _from_samples(samples, dtype, device, requires_grad):
    # Drawn on the CPU so that a seed gives the same numbers on every device.
    backend = get_backend(device)
    array = backend.asarray(samples.astype(dtype, copy=False))
    return _made(array, backend, requires_grad)


def randn(*shape, dtype=None, device=None, requires_grad=False):
    """Standard normal samples (drawn on the CPU from the seeded generator)."""
    return _random("randn", _generator.standard_normal, shape, dtype, device, requires_grad)


def rand(*shape, dtype=None, device=None, requires_grad=False):
    """Uniform samples in [0, 1) (drawn on the CPU from the seeded generator)."""
    return _random("rand", _generator.random, shape, dtype, device, requires_grad)


def randn_like(t, dtype=None, requires_grad=False):
    return randn(t.shape, dtype=dtype or t.dtype, device=t.device, requires_grad=requires_grad)


def rand_like(t, dtype=None, requires_grad=False):
    return rand(t.shape, dtype=dtype or t.dtype, device=t.device, requires_grad=requires_grad)


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


def randint(low, high=None, size=None, dtype=None, device=None, requires_grad=False):
    """Integers drawn uniformly from [low, high) (`randint(high, size)` starts at 0), int64 by
    default, from the seeded generator."""
    if size is None:   # randint(high, size)
        low, high, size = 0, low, high
    if size is None or high is None or high <= low:
        raise ValueError(f"randint: expected randint(low, high, size) with low < high, got "
                         f"low={low}, high={high}, size={size}")
    samples = _generator.integers(low, high, shape_from_args((size,)))
    return _from_samples(samples, as_dtype(dtype) or "int64", device, requires_grad)


def randperm(n, dtype=None, device=None, requires_grad=False):
    """A random permutation of 0..n-1 (int64 by default), from the seeded generator."""
    return _from_samples(_generator.permutation(n), as_dtype(dtype) or "int64", device,
                         requires_grad)


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """True when |a - b| <= atol + rtol * |b| everywhere (tensors, arrays or numbers)."""
    def host(value):
        return value.numpy(force=True) if isinstance(value, Tensor) else numpy.asarray(value)

    return bool(numpy.allclose(host(a), host(b), rtol=rtol, atol=atol, equal_nan=equal_nan))
