"""Tensor: an array, its gradient, and the node that made it: data and bookkeeping, no ops.

This module knows backends, dtypes, version counters and grad mode, nothing above them. The
methods that compute (`x + y`, `x.exp()`, `x.backward()`) are in minigrad/tensor_methods.py,
those that write into the tensor (`x.add_(y)`, `x[i] = v`) in minigrad/inplace.py; both are
attached to Tensor once the ops exist (`tensor_methods.attach`, called by minigrad/__init__.py).

dtypes of new tensors (`mg.tensor(data)`, `mg.as_tensor(data)`):
    dtype=...                          converted to that dtype (any spelling: mg.float32,
                                       "float32", "float", numpy.float32; see minigrad/dtypes.py)
    an array, a NumPy scalar, a Tensor keeps its dtype (a float64 NumPy array stays float64)
    Python numbers and nested lists    floats -> the default float dtype (float32), ints ->
                                       int64, bools -> bool, complex -> complex64 (PyTorch's)
Operators follow PyTorch's promotion (ops/_promotion.py): a Python number never widens a
tensor within its category (float16 tensor * 2.5 is float16), an int tensor with a Python float
or divided by anything is float32, and two tensors promote as torch.result_type says.

`Tensor(...)` itself is PyTorch's legacy constructor (`legacy_tensor` below): `Tensor(2, 3)` is
an uninitialised (2, 3) tensor of the default float dtype, `Tensor([1, 2])` data in that dtype.
"""
import numbers
import reprlib

from . import grad_mode, tracing
from .backends import backend_of, get_backend, normalize_device
from .backends import device as device_type
from .dtypes import as_dtype, bfloat16, default_complex_dtype, get_default_dtype, is_floating
from .printing import tensor_repr
from .shapes import AxisError, check_sizes, normalize_axis
from .version import VersionCounter

_NUMERIC_KINDS = "biufc"


def _dtype_of_python_data(kind):
    """The dtype PyTorch gives Python numbers of NumPy `kind`, or None to keep NumPy's."""
    return {"f": get_default_dtype(), "i": "int64", "b": "bool",
            "c": default_complex_dtype()}.get(kind)


_MAX_DIMS = 64   # NumPy's (and PyTorch's) most dimensions


def _nesting(data):
    """How deep the first elements of nested lists go (counted up to _MAX_DIMS + 1)."""
    depth = 0
    while isinstance(data, (list, tuple)) and data and depth <= _MAX_DIMS:
        data, depth = data[0], depth + 1
    return depth


def _as_array(data, dtype, device, copy):
    """`data` as an array of the backend of `device` (default: where `data` is), with the dtype
    rules above; a copy when `copy` or when it must move, else the array itself if it fits."""
    dtype = as_dtype(dtype)
    if isinstance(data, Tensor):
        data = data.array
    source = backend_of(data)
    backend = source if device is None else get_backend(device)
    xp = backend.xp
    if backend is not source and hasattr(data, "dtype"):   # an array moves (lists stay data)
        data, copy = source.to_numpy(data), False   # moving makes a copy already
    if dtype is None and not hasattr(data, "dtype"):   # Python numbers and (nested) lists
        try:
            array = xp.asarray(data)
        except ValueError:
            if _nesting(data) > _MAX_DIMS:
                raise ValueError(f"tensor: the nested lists are more than {_MAX_DIMS} deep, but "
                                 f"a tensor has at most {_MAX_DIMS} dimensions") from None
            raise ValueError(f"tensor: the nested lists are not rectangular (every list at one "
                             f"depth must have the same length): {reprlib.repr(data)}") from None
        if _dtype_of_python_data(array.dtype.kind) is not None:
            array = array.astype(_dtype_of_python_data(array.dtype.kind), copy=False)
    else:
        array = xp.array(data, dtype=dtype) if copy else xp.asarray(data, dtype=dtype)
    if array.dtype.kind not in _NUMERIC_KINDS:
        if array.dtype != bfloat16:
            raise TypeError(f"tensor: cannot make a tensor from {type(data).__name__} data "
                            f"(dtype {array.dtype}); expected numbers, nested lists of numbers "
                            "or a numeric array")
        array = array.view(bfloat16)   # the one dtype object is_floating knows (not a copy
        # of it, as dtype.newbyteorder makes)
    return array, backend


def shape_from_args(args):
    """The shape meant by a call's positional arguments: `f(2, 3)` and `f((2, 3))` both mean
    (2, 3). The sizes are not checked here (see minigrad/shapes.py)."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)) or (
            len(args) == 1 and type(args[0]).__name__ == "Size"):
        return tuple(args[0])
    return tuple(args)


def from_data(data, dtype=None, device=None, copy=False, requires_grad=False, what="tensor"):
    """A leaf tensor holding `data` (a number, a nested list, an array, a tensor) with the dtype
    rules above: the array itself when it fits (no copy), a copy when `copy` or when it must
    be converted or moved. `mg.tensor` is this with copy=True."""
    array, backend = _as_array(data, dtype, device, copy)
    if requires_grad:
        _check_can_require_grad(array.dtype, what)
    t = Tensor.from_array(array, backend)
    t.requires_grad = bool(requires_grad)
    return t


def as_tensor(data, dtype=None, device=None):
    """`data` as a tensor, sharing its memory where dtype and device allow (torch.as_tensor):
    an array is wrapped, a tensor comes back as it is, or through `.to()` (which autograd
    follows) when it needs another dtype or device."""
    if isinstance(data, Tensor):
        return data.to(device, dtype)
    return from_data(data, dtype, device)


def legacy_tensor(what, args, dtype, device):
    """What PyTorch's legacy constructors `Tensor(...)` and `FloatTensor(...)` (`dtype`; None is
    the default float dtype) make of their positional arguments:

        ()  or  (3, 4)     an uninitialised tensor of that shape (() is shape (0,)), as empty()
        (data,)            a list, tuple or array converted to the dtype (an array that has it
                           already is shared, not copied); a tuple is data, not a shape
        (tensor,)          the same memory, detached (for a typed constructor, of its dtype)
    """
    dtype = as_dtype(dtype)
    if len(args) == 1 and isinstance(args[0], Tensor):
        t = args[0]
        if dtype is not None and t.dtype != dtype or device is not None and (
                normalize_device(device) != t.device):
            raise TypeError(f"{what}: expected a {dtype or 'tensor'} on {device or t.device}, got "
                            f"a {t.dtype} tensor on {t.device}; convert it with .to()")
        return t.detach()
    dtype = dtype or as_dtype(get_default_dtype())
    if all(isinstance(n, numbers.Integral) and not isinstance(n, bool) for n in args):
        if any(n < 0 for n in args):
            raise RuntimeError(f"{what}: trying to create a tensor with negative dimension: "
                               f"{list(args)}")
        return Tensor.from_array(get_backend(device).xp.empty(args or (0,), dtype))
    if len(args) == 1 and not isinstance(args[0], (numbers.Number, str, bytes, type(None))):
        return from_data(args[0], dtype, device)
    raise TypeError(f"{what}(): expected sizes (ints: {what}(2, 3)) or one sequence or array of "
                    f"data ({what}([1, 2])), got ({', '.join(type(a).__name__ for a in args)})")

def to_arguments(op, args, device, dtype):
    """(device, dtype) from the positional forms of PyTorch's to(): (dtype), (device),
    (device, dtype), (tensor): that tensor's device and dtype; keywords fill the rest."""
    args = list(args)
    if args and isinstance(args[0], Tensor):
        other = args.pop(0)
        device, dtype = other.device, other.dtype
    elif len(args) == 2 or args and _names_device(args[0]):   # to(device[, dtype])
        device = args.pop(0)
    if args:
        dtype = args.pop(0)
    if args:
        raise TypeError(f"{op}: too many positional arguments; expected to(dtype), "
                        "to(device, dtype) or to(tensor)")
    return device, as_dtype(dtype)


def _names_device(value):
    """Whether a positional argument of to() is a device ('cpu', 'cuda:0', mg.device)."""
    return isinstance(value, device_type) or (
        isinstance(value, str) and value.partition(":")[0].lower() in ("cpu", "cuda"))


def _check_can_require_grad(dtype, what):
    if not is_floating(dtype):
        raise TypeError(f"{what}: only floating-point tensors can require grad, not {dtype}; "
                        "make it floating first (e.g. dtype='float32' or .float())")


def _check_grad_assignment(tensor, grad):
    """`tensor.grad = grad` takes a Tensor of the tensor's device, dtype and shape (PyTorch's
    rule): anything else would be broadcast or cast silently by the next optimizer step."""
    if not isinstance(grad, Tensor):
        raise TypeError(f"assigned grad expected to be a Tensor or None but got grad of type "
                        f"{type(grad).__name__}")
    if grad is tensor:
        raise RuntimeError("can't assign a tensor as its own grad (x.grad = x)")
    for what, mine, given in (("device", tensor.device, grad.device),
                              ("dtype", tensor.dtype, grad.dtype),
                              ("shape", tensor.shape, grad.shape)):
        if mine != given:
            raise RuntimeError(f"assigned grad has data of a different {what}: the tensor's "
                               f"{what} is {mine}, the gradient's is {given}")


class Tensor:
    """A backend array (`array`: NumPy or CuPy) with autograd bookkeeping.

    `requires_grad` marks tensors whose gradient is wanted; `grad` receives it after
    `backward()`. A tensor made by an op that was recorded remembers its `Node` (`grad_fn`) and
    which of the node's outputs it is (`_index`). `mg.as_tensor(data)` uses an array of the
    right dtype and device as it is (no copy); `mg.tensor(data)` always copies. `_version`
    counts the in-place changes of its memory (minigrad/version.py); in-place methods end in
    `_` (minigrad/inplace.py).
    """

    # _stand_in is set only on the data-free stand-ins of _without_data, _view only on views
    # (minigrad/views.py); both are unset elsewhere
    __slots__ = ("array", "requires_grad", "_grad", "_node", "_index", "_backend",
                 "_version_counter", "_stand_in", "_view", "__weakref__")
    __array_ufunc__ = None  # `ndarray + tensor` defers to Tensor.__radd__
    _base = None   # as in PyTorch: the tensor whose memory a view views (a View's property)

    def __init__(self, *args, device=None):
        """PyTorch's legacy constructor (see `legacy_tensor`): `Tensor(2, 3)`, `Tensor()`,
        `Tensor([1, 2])`. New code makes tensors with `mg.tensor`, `mg.empty` and friends."""
        made = legacy_tensor("Tensor", args, None, device)
        self.array, self.requires_grad, self._grad, self._node, self._index = (
            made.array, False, None, None, 0)
        self._backend, self._version_counter = made._backend, made._version_counter

    @classmethod
    def from_array(cls, array, backend=None):
        """A constant tensor around `array`, an array of `backend` (by default the backend that
        owns it): no copy, no dtype rule, no checks. This is how ops, kernels and backward
        formulas hand arrays back as tensors; from other data, `from_data` and `as_tensor`."""
        if backend is None:
            backend = backend_of(array)
        t = object.__new__(cls)
        t.array, t.requires_grad, t._grad, t._node, t._index, t._backend, t._version_counter = (
            array, False, None, None, 0, backend, VersionCounter(grad_mode._state.inference))
        return t

    @classmethod
    def _from_node(cls, array, node, index):
        """Output `index` of a recorded node."""
        t = object.__new__(cls)
        t.array, t.requires_grad, t._grad, t._node, t._index, t._backend, t._version_counter = (
            array, True, None, node, index, node.ctx.backend, node.output_counters[index])
        return t

    def _alias(self):
        """Another Tensor object for this value (same data, graph position and counter): what
        a node keeps of a non-leaf input, so an in-place op that later moves this tensor to a
        new node leaves the recorded graph as it was."""
        t = object.__new__(Tensor)
        t.array, t.requires_grad, t._grad, t._node, t._index, t._backend, t._version_counter = (
            self.array, self.requires_grad, None, self._node, self._index, self._backend,
            self._version_counter)
        return t

    def _without_data(self):
        """A stand-in with this tensor's shape, dtype, graph position and counter but no memory
        of its own: a broadcast view of a single zero (shared: Backend.placeholder)."""
        t = self._alias()
        t.array = self._backend.placeholder(self.array.shape, self.array.dtype)
        t._stand_in = True   # for readers of the graph (mg.viz): its data is not the value's
        return t

    # ------------------------------------------------------------------ properties
    shape = property(lambda self: self.array.shape)   # a tuple, on NumPy and CuPy alike
    ndim = property(lambda self: self.array.ndim)
    dtype = property(lambda self: self.array.dtype)
    device = property(lambda self: self._backend.device)
    backend = property(lambda self: self._backend)
    is_leaf = property(lambda self: self._node is None)
    grad_fn = property(lambda self: self._node)
    _version = property(lambda self: self._version_counter.value)   # as torch's Tensor._version

    @property
    def grad(self):
        return self._grad

    @grad.setter
    def grad(self, value):
        """As in PyTorch, an assigned gradient has this tensor's shape, dtype and device."""
        if value is not None:
            _check_grad_assignment(self, value)
        if tracing.capturing:   # a step of a program mg.compile captures
            tracing.run(setattr, self, "_grad", value)
        else:
            self._grad = value

    @grad.deleter
    def grad(self):
        self._grad = None

    def size(self, dim=None):
        if dim is None:
            return self.shape
        if self.ndim == 0:
            raise AxisError(f"size: dim {dim} given but a 0-d tensor has no dims")
        return self.shape[normalize_axis("size", dim, self.shape)]

    def numel(self):
        return int(self.array.size)

    def __len__(self):
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    # ------------------------------------------------------------------ conversion
    @property
    def data(self):
        """As in PyTorch: the values as a new tensor that shares this one's memory, cut from the
        graph and from version tracking (`p.data.mul_(2)` changes `p` without autograd seeing
        it). The backend array itself is `.array`; `.numpy()` hands it to NumPy."""
        return Tensor.from_array(self.array, self._backend)

    @data.setter
    def data(self, value):
        """`x.data = t`: x takes t's memory (shape and dtype too), as in PyTorch."""
        if not isinstance(value, Tensor):
            raise TypeError(f"data: expected a Tensor to assign, got {type(value).__name__}")
        if value._backend is not self._backend:
            raise RuntimeError(f"data: the new value is on {value.device} but the tensor is on "
                               f"{self.device}")
        if self.requires_grad:
            _check_can_require_grad(value.dtype, "data")
        self.array = value.array

    def numpy(self, *, force=False):
        """The data as a NumPy array (shared memory on the CPU, a copy from the GPU). As in
        PyTorch, a tensor that requires grad must be detached first, or pass force=True."""
        if self.requires_grad and not force:
            raise RuntimeError("numpy(): can't call numpy() on a tensor that requires grad; use "
                               "tensor.detach().numpy() instead")
        tracing.value_read("numpy()")
        return self._backend.to_numpy(self.array)

    def item(self):
        if self.array.size != 1:
            raise ValueError(f"item(): only one-element tensors convert to a Python number, "
                             f"this one has shape {self.shape}")
        tracing.value_read("item()")
        return self._backend.to_numpy(self.array.reshape(())).item()

    def tolist(self):
        return self.numpy(force=True).tolist()

    def detach(self):
        """The same data (and version counter), cut from the graph."""
        t = Tensor.from_array(self.array, self._backend)
        t._version_counter = self._version_counter
        return t

    def __array__(self, dtype=None, copy=None):
        """`numpy.asarray(tensor)`: the data as a NumPy array (detached from the graph)."""
        array = self.numpy()
        if dtype is not None and array.dtype != dtype:
            return array.astype(dtype)
        return array.copy() if copy else array

    def requires_grad_(self, requires_grad=True):
        """Mark this leaf as wanting a gradient (or not); returns the tensor itself."""
        if not self.is_leaf:
            if requires_grad:
                return self   # made by a recorded op: it requires grad already
            raise RuntimeError("requires_grad_(False): this tensor was made by an op on the tape; "
                               "use .detach() to get a tensor cut from the graph")
        if requires_grad:
            _check_can_require_grad(self.dtype, "requires_grad_")
            if self.is_inference() and not grad_mode.is_inference_mode_enabled():
                raise RuntimeError("requires_grad_: setting requires_grad=True on an inference "
                                   "tensor outside inference_mode is not allowed; clone it")
        self.requires_grad = bool(requires_grad)
        return self

    def _is_view(self):
        return self._base is not None

    def is_inference(self):
        """Whether this tensor was made in inference mode (minigrad/grad_mode.py)."""
        return self._version_counter.inference

    # ------------------------------------------------------------------ new tensors like this
    # PyTorch's new_*: a new leaf with this tensor's dtype and device unless given.
    def new_tensor(self, data, *, dtype=None, device=None, requires_grad=False):
        return from_data(data, dtype or self.dtype, device or self.device, copy=True,
                         requires_grad=requires_grad, what="new_tensor")

    def new_full(self, size, fill_value, *, dtype=None, device=None, requires_grad=False):
        shape = check_sizes("new_full", shape_from_args((size,)))
        array = self._backend.xp.full(shape, fill_value, dtype=as_dtype(dtype) or self.dtype)
        return from_data(array, device=device or self.device, requires_grad=requires_grad,
                         what="new_full")

    def new_zeros(self, *size, dtype=None, device=None, requires_grad=False):
        return self.new_full(shape_from_args(size), 0, dtype=dtype, device=device,
                             requires_grad=requires_grad)

    def new_ones(self, *size, dtype=None, device=None, requires_grad=False):
        return self.new_full(shape_from_args(size), 1, dtype=dtype, device=device,
                             requires_grad=requires_grad)

    new_empty = new_zeros   # (its values are unspecified in PyTorch; here they are zeros)

    def __dlpack__(self, *args, **kwargs):
        return self.array.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()

    def __bool__(self):
        if self.array.size != 1:
            raise ValueError(f"the truth value of a tensor of shape {self.shape} is ambiguous; "
                             "use .any() or .all()")
        return bool(self.item())

    def __format__(self, spec):
        """f"{loss:.4f}": a one-element tensor formats as its number; other tensors take only
        the empty format (their repr)."""
        if self.array.size == 1 and spec:
            return format(self.item(), spec)
        if spec:
            raise TypeError(f"format: spec {spec!r} needs a one-element tensor, this one has "
                            f"shape {self.shape}")
        return repr(self)

    def __float__(self): return float(self.item())
    def __int__(self): return int(self.item())

    def __index__(self):
        """A one-element integer tensor as a Python index (`names[i]`, `range(n)`), as PyTorch."""
        if self.dtype.kind not in "iub" or self.numel() != 1:
            raise TypeError("only integer tensors of a single element can be converted to an "
                            "index")
        return int(self.item())

    # ------------------------------------------------------------------ display
    def __repr__(self):
        return tensor_repr(self)
