"""Tensor: an array, its gradient, and the node that made it. Every operator calls an op.

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

from . import autograd, grad_mode
from .backends import backend_of, get_backend, normalize_device
from .backends import device as device_type
from .dtypes import as_dtype, default_complex_dtype, get_default_dtype
from .printing import tensor_repr
from .tensor_methods import TensorMethods
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
    if backend is not source:
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
        raise TypeError(f"tensor: cannot make a tensor from {type(data).__name__} data "
                        f"(dtype {array.dtype}); expected numbers, nested lists of numbers or a "
                        "numeric array")
    return array, backend


def shape_from_args(args):
    """The shape meant by a call's positional arguments: `f(2, 3)` and `f((2, 3))` both mean
    (2, 3). The sizes are not checked here (see ops._shapes.check_sizes)."""
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
    if dtype.kind != "f":
        raise TypeError(f"{what}: only floating-point tensors can require grad, not {dtype}; "
                        "make it floating first (e.g. dtype='float32' or .float())")


class Tensor(TensorMethods):
    """A backend array (`array`: NumPy or CuPy) with autograd bookkeeping.

    `requires_grad` marks tensors whose gradient is wanted; `grad` receives it after
    `backward()`. A tensor made by an op that was recorded remembers its `Node` (`grad_fn`) and
    which of the node's outputs it is (`_index`). `mg.as_tensor(data)` uses an array of the
    right dtype and device as it is (no copy); `mg.tensor(data)` always copies. `_version`
    counts the in-place changes of its memory (minigrad/version.py); in-place methods end in
    `_` (minigrad/inplace.py).
    """

    __slots__ = ("array", "requires_grad", "_grad", "_node", "_index", "_backend",
                 "_version_counter", "__weakref__")
    __array_ufunc__ = None  # `ndarray + tensor` defers to Tensor.__radd__

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
        """A stand-in with this tensor's shape, dtype and graph position but no memory of its
        own: a broadcast view of a single zero (shared: Backend.placeholder)."""
        t = Tensor.from_array(self._backend.placeholder(self.shape, self.dtype), self._backend)
        t.requires_grad, t._node, t._index = self.requires_grad, self._node, self._index
        return t

    # ------------------------------------------------------------------ properties
    shape = property(lambda self: self.array.shape)   # a tuple, on NumPy and CuPy alike
    ndim = property(lambda self: self.array.ndim)
    dtype = property(lambda self: self.array.dtype)
    device = property(lambda self: self._backend.device)
    backend = property(lambda self: self._backend)
    is_leaf = property(lambda self: self._node is None)
    grad_fn = property(lambda self: self._node)
    T = property(lambda self: self.transpose())
    _version = property(lambda self: self._version_counter.value)   # as torch's Tensor._version

    @property
    def grad(self):
        return self._grad

    @grad.setter
    def grad(self, value):
        """As in PyTorch, an assigned gradient has this tensor's shape, dtype and device."""
        if value is not None:
            inplace.check_grad_assignment(self, value)
        self._grad = value

    @grad.deleter
    def grad(self):
        self._grad = None

    def size(self, dim=None):
        if dim is None:
            return self.shape
        if self.ndim == 0:
            raise ops.AxisError(f"size: dim {dim} given but a 0-d tensor has no dims")
        return self.shape[ops.normalize_axis("size", dim, self.shape)]

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
        return self._backend.to_numpy(self.array)

    def item(self):
        if self.array.size != 1:
            raise ValueError(f"item(): only one-element tensors convert to a Python number, "
                             f"this one has shape {self.shape}")
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

    def to(self, *args, device=None, dtype=None, non_blocking=False, copy=False):
        """This tensor on `device` and/or with `dtype` (PyTorch's forms: to(dtype),
        to(device, dtype), to(other_tensor), keywords): itself when nothing changes (unless
        copy=True), otherwise a copy made by an op, so gradients flow back to this tensor."""
        device, dtype = to_arguments("to", args, device, dtype)
        out = self.clone() if copy else self
        if dtype is not None and as_dtype(dtype) != self.dtype:
            out = out.astype(dtype)
        if device is not None and normalize_device(device) != self.device:
            out = ops.to_device(out, device)
        return out

    def cpu(self):
        return self.to("cpu")

    def cuda(self):
        return self.to("cuda")

    def astype(self, dtype):
        return ops.cast(self, dtype)

    def float(self):
        return self.astype("float32")

    def double(self):
        return self.astype("float64")

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

    def is_inference(self):
        """Whether this tensor was made in inference mode (minigrad/grad_mode.py)."""
        return self._version_counter.inference

    # ------------------------------------------------------------------ new tensors like this
    # PyTorch's new_*: a new leaf with this tensor's dtype and device unless given.
    def new_tensor(self, data, *, dtype=None, device=None, requires_grad=False):
        return from_data(data, dtype or self.dtype, device or self.device, copy=True,
                         requires_grad=requires_grad, what="new_tensor")

    def new_full(self, size, fill_value, *, dtype=None, device=None, requires_grad=False):
        shape = ops._shapes.check_sizes("new_full", shape_from_args((size,)))
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

    # ------------------------------------------------------------------ in place (inplace.py)
    def add_(self, other, alpha=1): return inplace.arithmetic(self, "add_", other, alpha)
    def sub_(self, other, alpha=1): return inplace.arithmetic(self, "sub_", other, alpha)
    def mul_(self, other): return inplace.arithmetic(self, "mul_", other)
    def div_(self, other): return inplace.arithmetic(self, "div_", other)
    def copy_(self, src): return inplace.assign(self, "copy_", Ellipsis, src)
    def fill_(self, value): return inplace.assign(self, "fill_", Ellipsis, value)
    def zero_(self): return inplace.assign(self, "zero_", Ellipsis, 0)
    def clamp_(self, min=None, max=None): return inplace.clamp(self, min, max)
    def __setitem__(self, index, value): inplace.assign(self, "setitem", index, value)

    # ------------------------------------------------------------------ random (random.py)
    def normal_(self, mean=0.0, std=1.0, *, generator=None):
        """Fill with samples of N(mean, std^2), drawn on the CPU from `generator`."""
        draws = random.numpy_generator(generator, "normal_").normal(mean, std, self.shape)
        return inplace.assign(self, "normal_", Ellipsis, draws)

    def uniform_(self, a=0.0, b=1.0, *, generator=None):   # PyTorch names them from, to
        """Fill with samples of U(a, b), drawn on the CPU from `generator`."""
        draws = random.numpy_generator(generator, "uniform_").uniform(a, b, self.shape)
        return inplace.assign(self, "uniform_", Ellipsis, draws)

    def bernoulli_(self, p=0.5, *, generator=None):
        """Fill with 1 with probability p (a number or a tensor broadcast to this one), else 0."""
        p = p.numpy(force=True) if isinstance(p, Tensor) else p
        draws = random.bernoulli_draws("bernoulli_", p, self.shape, generator)
        return inplace.assign(self, "bernoulli_", Ellipsis, draws)

    def bernoulli(self, p=None, *, generator=None):
        """A new tensor: 1 with probability given by this tensor (or by the number p), else 0."""
        p = self.numpy(force=True) if p is None else p
        draws = random.bernoulli_draws("bernoulli", p, self.shape, generator)
        return as_tensor(draws, self.dtype, self.device)

    def multinomial(self, num_samples, replacement=False, *, generator=None):
        """int64 indices drawn by the non-negative weights in each row of this 1-d or 2-d
        tensor, with or without replacement (see random.multinomial_indices)."""
        picks = random.multinomial_indices("multinomial", self.numpy(force=True), num_samples,
                                           replacement, generator)
        return as_tensor(picks, device=self.device)
    def __iadd__(self, other): return self.add_(other)
    def __isub__(self, other): return self.sub_(other)
    def __imul__(self, other): return self.mul_(other)
    def __itruediv__(self, other): return self.div_(other)

    # the in-place twins of ops: the op out of place, written back (inplace.apply)
    def pow_(self, exponent): return inplace.apply(self, "pow_", ops.pow, exponent)
    def exp_(self): return inplace.apply(self, "exp_", ops.exp)
    def log_(self): return inplace.apply(self, "log_", ops.log)
    def log2_(self): return inplace.apply(self, "log2_", ops.log2)
    def log10_(self): return inplace.apply(self, "log10_", ops.log10)
    def log1p_(self): return inplace.apply(self, "log1p_", ops.log1p)
    def expm1_(self): return inplace.apply(self, "expm1_", ops.expm1)
    def sqrt_(self): return inplace.apply(self, "sqrt_", ops.sqrt)
    def rsqrt_(self): return inplace.apply(self, "rsqrt_", ops.rsqrt)
    def square_(self): return inplace.apply(self, "square_", ops.square)
    def reciprocal_(self): return inplace.apply(self, "reciprocal_", ops.reciprocal)
    def abs_(self): return inplace.apply(self, "abs_", ops.abs)
    def neg_(self): return inplace.apply(self, "neg_", ops.neg)
    def sign_(self): return inplace.apply(self, "sign_", ops.sign)
    def sin_(self): return inplace.apply(self, "sin_", ops.sin)
    def cos_(self): return inplace.apply(self, "cos_", ops.cos)
    def tanh_(self): return inplace.apply(self, "tanh_", ops.tanh)
    def sigmoid_(self): return inplace.apply(self, "sigmoid_", ops.sigmoid)
    def relu_(self): return inplace.apply(self, "relu_", ops.relu)
    def floor_(self): return inplace.apply(self, "floor_", ops.floor)
    def ceil_(self): return inplace.apply(self, "ceil_", ops.ceil)
    def round_(self, decimals=0): return inplace.apply(self, "round_", ops.round, decimals)
    def masked_fill_(self, mask, value):
        return inplace.apply(self, "masked_fill_", ops.masked_fill, mask, value)
    def scatter_(self, dim, index, src=None, value=None, *, reduce=None):
        return inplace.apply(self, "scatter_", ops.scatter, dim, index, src, value,
                             reduce=reduce)
    def scatter_add_(self, dim, index, src):
        return inplace.apply(self, "scatter_add_", ops.scatter_add, dim, index, src)
    def index_add_(self, dim, index, source, *, alpha=1):
        return inplace.apply(self, "index_add_", ops.index_add, dim, index, source, alpha=alpha)
    def detach_(self): return inplace.detach(self)

    def __dlpack__(self, *args, **kwargs):
        return self.array.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()

    # ------------------------------------------------------------------ autograd
    def backward(self, gradient=None, retain_graph=None, create_graph=False, *, grad=None):
        """Accumulate the gradient of this tensor into `.grad` of the leaves behind it;
        `gradient` (PyTorch's name) or `grad` is the gradient flowing into this tensor."""
        if grad is not None:
            if gradient is not None:
                raise TypeError("backward: got gradient= and grad=; they are the same argument, "
                                "give one")
            gradient = grad
        autograd.backward([self], [gradient], retain_graph=retain_graph, create_graph=create_graph)

    # ------------------------------------------------------------------ arithmetic
    def __add__(self, other): return ops.add(self, other)
    def __radd__(self, other): return ops.add(other, self)
    def __sub__(self, other): return ops.sub(self, other)
    def __rsub__(self, other): return ops.sub(other, self)
    def __mul__(self, other): return ops.mul(self, other)
    def __rmul__(self, other): return ops.mul(other, self)
    def __truediv__(self, other): return ops.div(self, other)
    def __rtruediv__(self, other): return ops.div(other, self)
    def __matmul__(self, other): return ops.matmul(self, other)
    def __rmatmul__(self, other): return ops.matmul(other, self)
    def __pow__(self, exponent): return ops.pow(self, exponent)
    def __rpow__(self, base): return ops.pow(base, self)
    def __neg__(self): return ops.neg(self)
    def __pos__(self): return self
    def __getitem__(self, index): return ops.getitem(self, index)

    # Comparisons are not differentiable: they give boolean tensors.
    def _compare(self, other, name):
        if isinstance(other, Tensor):
            if other._backend is not self._backend:
                raise ops.base.device_mismatch(name, (self, other))
            other = other.array
        return Tensor.from_array(getattr(self._backend.xp, name)(self.array, other), self._backend)

    def __eq__(self, other): return self._compare(other, "equal")
    def __ne__(self, other): return self._compare(other, "not_equal")
    def __lt__(self, other): return self._compare(other, "less")
    def __le__(self, other): return self._compare(other, "less_equal")
    def __gt__(self, other): return self._compare(other, "greater")
    def __ge__(self, other): return self._compare(other, "greater_equal")
    __hash__ = object.__hash__

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

    # ------------------------------------------------------------------ methods that call ops
    def exp(self): return ops.exp(self)
    def log(self): return ops.log(self)
    def sqrt(self): return ops.sqrt(self)
    def relu(self): return ops.relu(self)
    def tanh(self): return ops.tanh(self)
    def sigmoid(self): return ops.sigmoid(self)
    def abs(self): return ops.abs(self)
    def maximum(self, other): return ops.maximum(self, other)
    def minimum(self, other): return ops.minimum(self, other)
    def clamp(self, min=None, max=None): return ops.clamp(self, min, max)
    clip = clamp

    # Reductions take PyTorch's dim=/keepdim= or NumPy's axis=/keepdims=.
    def sum(self, dim=None, keepdim=None, *, axis=None, keepdims=None):
        return ops.sum(self, dim, keepdim, axis=axis, keepdims=keepdims)

    def mean(self, dim=None, keepdim=None, *, axis=None, keepdims=None):
        return ops.mean(self, dim, keepdim, axis=axis, keepdims=keepdims)

    def prod(self, dim=None, keepdim=None, *, axis=None, keepdims=None):
        return ops.prod(self, dim, keepdim, axis=axis, keepdims=keepdims)

    def logsumexp(self, dim=None, keepdim=None, *, axis=None, keepdims=None):
        return ops.logsumexp(self, dim, keepdim, axis=axis, keepdims=keepdims)

    def amax(self, dim=None, keepdim=None, *, axis=None, keepdims=None):
        return ops.max(self, dim, keepdim, axis=axis, keepdims=keepdims)

    def amin(self, dim=None, keepdim=None, *, axis=None, keepdims=None):
        return ops.min(self, dim, keepdim, axis=axis, keepdims=keepdims)

    def max(self, dim=None, keepdim=None, *, axis=None, keepdims=None):
        """As in PyTorch: the largest value (no dim); the named tuple (values, indices) along
        an int dim; maximum(self, other) for a tensor. A tuple of dims reduces like amax."""
        return self._extremum("max", ops.maximum, ops.max, dim, keepdim, axis, keepdims)

    def min(self, dim=None, keepdim=None, *, axis=None, keepdims=None):
        """As max, for the smallest."""
        return self._extremum("min", ops.minimum, ops.min, dim, keepdim, axis, keepdims)

    def _extremum(self, name, elementwise, reduction, dim, keepdim, axis, keepdims):
        if isinstance(dim, Tensor):
            return elementwise(self, dim)
        dim, keepdim = ops.dim_keywords(name, dim, keepdim, axis, keepdims)
        if dim is None or isinstance(dim, (tuple, list)):
            return reduction(self, dim, keepdim)
        return ops.extremum_along(name, self, dim, keepdim)

    def var(self, dim=None, *, unbiased=None, keepdim=None, correction=None, axis=None,
            keepdims=None):
        return ops.var(self, dim, keepdim, unbiased=unbiased, correction=correction, axis=axis,
                       keepdims=keepdims)

    def std(self, dim=None, *, unbiased=None, keepdim=None, correction=None, axis=None,
            keepdims=None):
        return ops.std(self, dim, keepdim, unbiased=unbiased, correction=correction, axis=axis,
                       keepdims=keepdims)

    def argmax(self, dim=None, keepdim=None, *, axis=None, keepdims=None):
        return ops.argmax(self, dim, keepdim, axis=axis, keepdims=keepdims)

    def argmin(self, dim=None, keepdim=None, *, axis=None, keepdims=None):
        return ops.argmin(self, dim, keepdim, axis=axis, keepdims=keepdims)

    def softmax(self, dim=None, *, axis=None): return ops.softmax(self, dim, axis=axis)

    def log_softmax(self, dim=None, *, axis=None): return ops.log_softmax(self, dim, axis=axis)

    def reshape(self, *shape):
        return ops.reshape(self, shape_from_args(shape))

    view = reshape

    def flatten(self, start_dim=0, end_dim=-1):
        """Merge the axes start_dim..end_dim (all by default) into one; a 0-d tensor becomes
        1-d, as in PyTorch."""
        shape = self.shape
        start = ops.normalize_axis("flatten", start_dim, shape)
        end = ops.normalize_axis("flatten", end_dim, shape)
        if start > end:
            raise ValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim} "
                             f"(tensor of shape {shape})")
        merged = 1
        for n in shape[start:end + 1]:   # the size itself, not -1: it may be 0 (an empty batch)
            merged *= n
        return self.reshape(shape[:start] + (merged,) + shape[end + 1:])

    def unsqueeze(self, dim): return ops.unsqueeze(self, dim)
    def squeeze(self, dim=None): return ops.squeeze(self, dim)

    def permute(self, *axes):
        return ops.transpose(self, shape_from_args(axes))

    def transpose(self, dim0=None, dim1=None):
        """Reverse all axes (no arguments) or swap two, as in PyTorch."""
        if dim0 is None and dim1 is None:
            return ops.transpose(self)
        if dim0 is None or dim1 is None:
            raise TypeError(f"transpose: give no axes (reverse them all) or two axes to swap, "
                            f"got dim0={dim0}, dim1={dim1} (tensor of shape {self.shape})")
        return self.swapaxes(dim0, dim1)

    def swapaxes(self, dim0, dim1):
        dim0, dim1 = (ops.normalize_axis("transpose", d, self.shape) for d in (dim0, dim1))
        if self.ndim == 0:   # dims 0 and -1 of a 0-d tensor: nothing to swap
            return ops.transpose(self)
        axes = list(range(self.ndim))
        axes[dim0], axes[dim1] = axes[dim1], axes[dim0]
        return ops.transpose(self, axes)

    def broadcast_to(self, shape): return ops.broadcast_to(self, shape)

    def expand(self, *shape):
        """broadcast_to, where -1 keeps a length (PyTorch's expand)."""
        shape = shape_from_args(shape)
        lead = len(shape) - self.ndim
        return self.broadcast_to(tuple(self.shape[i - lead] if n == -1 and i >= lead else n
                                       for i, n in enumerate(shape)))

    # ------------------------------------------------------------------ display
    def __repr__(self):
        return tensor_repr(self)


from . import inplace, ops, random, tensor_methods  # noqa: E402  (they build on Tensor; import last: a cycle)

tensor_methods.ops = ops   # the mixin's methods call them too
