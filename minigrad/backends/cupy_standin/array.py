"""The stand-in's `cupy.ndarray`: a NumPy array held as if on the device, with CuPy's rules.

- No implicit conversion to NumPy: `numpy.asarray(device_array)` raises CuPy's TypeError;
  `.get()` and `cupy.asnumpy` are the explicit ways. A NumPy function called on a device array
  runs only where CuPy has the same function (CuPy's __array_function__ / __array_ufunc__);
  NumPy arrays are refused as operands ("Unsupported type"), NumPy and Python scalars taken.
- Reductions and integer indexing give 0-d device arrays, never NumPy scalars, and a 0-d array
  is no index (CuPy's ndarray has no __index__): `range(x.sum())` fails as it does on a GPU.
- Reading values on the host (`get`, `item`, `tolist`, `bool`, `float`, `int`) is a device
  synchronization, refused inside `cupyx.allow_synchronize(False)`.
- Arrays of ml_dtypes' dtypes (bfloat16, float8) are refused, as CuPy has none.
- Methods and keywords are CuPy 14's (cupy14_api.json): NumPy's `ndarray.ptp` or
  `astype(..., subok=...)` are AttributeError / TypeError here.
"""
import numbers

import numpy

from ..cupy_api import load

IMPLICIT = ("Implicit conversion to a NumPy array is not allowed. Please use `.get()` to "
            "construct a NumPy array explicitly.")
_METHODS = load()["classes"]["cupy.ndarray"]
_SCALARS = (numbers.Number, numpy.generic)
# The stand-in's namespaces by name ("cupy", "cupy.linalg", "cupy.cuda"), filled in by the
# package once made: NumPy functions called on device arrays dispatch to them.
NAMESPACES = {}


class DeviceSynchronized(RuntimeError):
    """cupyx.DeviceSynchronized: a host read inside cupyx.allow_synchronize(False)."""

    def __init__(self, message=None):
        super().__init__(message or "Device synchronization was detected while disallowed.")


class _Sync:
    allowed = True   # cupyx.allow_synchronize sets it (per process: minigrad uses one thread)


def synchronize():
    """A device-to-host read is about to happen: refused where synchronizing is disallowed."""
    if not _Sync.allowed:
        raise DeviceSynchronized()


def wrap(value):
    """NumPy results as device values: arrays and NumPy scalars become ndarrays (0-d for a
    scalar, as CuPy's reductions give), inside tuples and lists too."""
    if isinstance(value, numpy.ndarray):
        return ndarray._of(value)
    if isinstance(value, numpy.generic):
        return ndarray._of(numpy.asarray(value))
    if isinstance(value, (tuple, list)):
        return type(value)(wrap(v) for v in value)
    return value


def unwrap(value, host=False):
    """Device arrays (also inside tuples, lists, dicts and slices) as their NumPy arrays, for
    NumPy to compute on. A NumPy array is CuPy's TypeError unless `host` (where CuPy copies
    it: creation from data, indices, values assigned into an array)."""
    if isinstance(value, ndarray):
        return value._a
    if isinstance(value, numpy.ndarray):
        if not host:
            raise TypeError(f"Unsupported type {type(value)}")
        return value
    if isinstance(value, (tuple, list)):
        return type(value)(unwrap(v, host) for v in value)
    if isinstance(value, dict):   # keywords
        return {k: unwrap(v, host) for k, v in value.items()}
    if isinstance(value, slice):
        return slice(*(unwrap(v, host) for v in (value.start, value.stop, value.step)))
    return value


def check_keywords(name, keywords, given):
    """TypeError for a keyword that CuPy 14's `name` does not take (keywords None: unknown)."""
    if keywords is None or "**" in keywords:
        return
    for key in given:
        if key not in keywords:
            raise TypeError(f"{name}() got an unexpected keyword argument '{key}' (CuPy 14's "
                            f"{name} takes {', '.join(keywords) or 'no keywords'})")


def _operand(value):
    """An operator's other operand for NumPy, or NotImplemented for a type CuPy does not mix
    with (a NumPy array is CuPy's TypeError)."""
    if isinstance(value, ndarray):
        return value._a
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, numpy.ndarray):
        raise TypeError(f"Unsupported type {type(value)}")
    return NotImplemented


def _binary(ufunc, reflected=False):
    def operator(self, other):
        other = _operand(other)
        if other is NotImplemented:
            return other
        return wrap(ufunc(other, self._a) if reflected else ufunc(self._a, other))
    return operator


def _inplace(ufunc):
    def operator(self, other):
        other = _operand(other)
        if other is NotImplemented:
            return other
        ufunc(self._a, other, out=self._a)
        return self
    return operator


def _unary(ufunc):
    return lambda self: wrap(ufunc(self._a))


def _arithmetic(ufunc):
    """The operator, its reflected twin and its in-place twin (a + b, b + a, a += b)."""
    return _binary(ufunc), _binary(ufunc, True), _inplace(ufunc)


def _read(convert):
    def method(self, *args):
        synchronize()
        return convert(self._a, *args)
    return method


def _rebuild(array):
    return ndarray._of(array)


class ndarray:  # noqa: N801  (CuPy's name)
    """cupy.ndarray, computed by NumPy on the host (see the module docstring)."""

    __slots__ = ("_a",)
    __module__ = "cupy"   # where backends.backend_of looks for a device array's library
    __hash__ = None

    def __init__(self, shape, dtype=float, memptr=None, strides=None, order="C"):
        if memptr is not None or strides is not None:
            raise NotImplementedError("the CuPy stand-in makes ndarrays without memptr/strides")
        self._a = numpy.empty(shape, dtype, order=order)

    @classmethod
    def _of(cls, array):
        if array.dtype.kind == "V":   # ml_dtypes' bfloat16 and float8: CuPy has no such arrays
            raise TypeError(f"Unsupported dtype {array.dtype}")
        made = object.__new__(cls)
        made._a = array
        return made

    # ---------------------------------------------------------------- attributes
    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    strides = property(lambda self: self._a.strides)
    itemsize = property(lambda self: self._a.itemsize)
    nbytes = property(lambda self: self._a.nbytes)
    flags = property(lambda self: self._a.flags)
    T = property(lambda self: wrap(self._a.T))
    mT = property(lambda self: wrap(self._a.mT))
    real = property(lambda self: wrap(self._a.real))
    imag = property(lambda self: wrap(self._a.imag))
    base = property(lambda self: None if self._a.base is None else wrap(self._a.base))

    @property
    def data(self):
        """The memory pointer (`.ptr`): here the host address the stand-in's kernels read."""
        return _Pointer(self._a.ctypes.data)

    @property
    def device(self):
        return NAMESPACES["cupy.cuda"].Device(0)

    def __getattr__(self, name):   # CuPy 14's methods, run by NumPy's
        if name.startswith("_") or name not in _METHODS:
            raise AttributeError(f"'cupy.ndarray' object has no attribute '{name}' (CuPy 14's "
                                 "ndarray has none)")
        method, keywords = getattr(self._a, name), _METHODS[name]

        def call(*args, **kwargs):
            check_keywords(f"ndarray.{name}", keywords, kwargs)
            return wrap(method(*unwrap(args), **unwrap(kwargs)))
        return call

    # ---------------------------------------------------------------- the host, explicitly
    def get(self, stream=None, order="C", out=None, blocking=True):
        """A NumPy copy on the host (a synchronization)."""
        synchronize()
        if out is not None:
            out[...] = self._a
            return out
        return numpy.array(self._a, order=order)

    def set(self, arr, stream=None):
        self._a[...] = arr

    item = _read(numpy.ndarray.item)
    tolist = _read(numpy.ndarray.tolist)
    __bool__ = _read(numpy.ndarray.__bool__)
    __float__ = _read(numpy.ndarray.__float__)
    __int__ = _read(numpy.ndarray.__int__)
    __complex__ = _read(numpy.ndarray.__complex__)

    def __array__(self, *args, **kwargs):
        raise TypeError(IMPLICIT)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):   # numpy.exp(device array)
        mine = getattr(NAMESPACES["cupy"], ufunc.__name__, None)   # None: CuPy has none
        mine = mine if method == "__call__" else getattr(mine, method, None)
        return NotImplemented if mine is None else mine(*inputs, **kwargs)

    def __array_function__(self, func, types, args, kwargs):   # numpy.where(device array)
        namespace = NAMESPACES.get(func.__module__.replace("numpy", "cupy", 1))
        mine = getattr(namespace, func.__name__, None)   # None: CuPy has none
        return NotImplemented if mine is None else mine(*args, **kwargs)

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return (2, 0)   # kDLCUDA, device 0

    # ---------------------------------------------------------------- Python protocols
    def __len__(self):
        return len(self._a)

    def __iter__(self):
        if self._a.ndim == 0:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(len(self._a)))

    def __getitem__(self, key):
        return wrap(self._a[unwrap(key, host=True)])

    def __setitem__(self, key, value):
        self._a[unwrap(key, host=True)] = unwrap(value, host=True)

    def __repr__(self):
        return repr(self._a)

    def __str__(self):
        return str(self._a)

    def __copy__(self):
        return wrap(self._a.copy())

    def __deepcopy__(self, memo):
        return wrap(self._a.copy())

    def __reduce__(self):
        return _rebuild, (self._a,)

    # ---------------------------------------------------------------- operators
    __add__, __radd__, __iadd__ = _arithmetic(numpy.add)
    __sub__, __rsub__, __isub__ = _arithmetic(numpy.subtract)
    __mul__, __rmul__, __imul__ = _arithmetic(numpy.multiply)
    __truediv__, __rtruediv__, __itruediv__ = _arithmetic(numpy.true_divide)
    __floordiv__, __rfloordiv__, __ifloordiv__ = _arithmetic(numpy.floor_divide)
    __mod__, __rmod__, __imod__ = _arithmetic(numpy.remainder)
    __pow__, __rpow__, __ipow__ = _arithmetic(numpy.power)
    __matmul__, __rmatmul__ = _binary(numpy.matmul), _binary(numpy.matmul, True)
    __and__, __rand__, __iand__ = _arithmetic(numpy.bitwise_and)
    __or__, __ror__, __ior__ = _arithmetic(numpy.bitwise_or)
    __xor__, __rxor__, __ixor__ = _arithmetic(numpy.bitwise_xor)
    __lshift__, __rlshift__ = _binary(numpy.left_shift), _binary(numpy.left_shift, True)
    __rshift__, __rrshift__ = _binary(numpy.right_shift), _binary(numpy.right_shift, True)
    __eq__, __ne__ = _binary(numpy.equal), _binary(numpy.not_equal)
    __lt__, __le__ = _binary(numpy.less), _binary(numpy.less_equal)
    __gt__, __ge__ = _binary(numpy.greater), _binary(numpy.greater_equal)
    __neg__, __pos__ = _unary(numpy.negative), _unary(numpy.positive)
    __abs__, __invert__ = _unary(numpy.absolute), _unary(numpy.invert)


class _Pointer:
    """cupy.cuda.MemoryPointer, as far as minigrad reads it: the address `ptr`."""

    def __init__(self, ptr):
        self.ptr = ptr
