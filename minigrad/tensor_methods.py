"""Tensor's methods that compute: operators, math, shapes, reductions, casts, draws, backward.

The rule for which method lives where: minigrad/tensor.py holds what a tensor is (its data and
bookkeeping: properties, conversions, requires_grad_, detach; no ops); this file every method
that computes a new value from a tensor (through an op, a draw or the engine); minigrad/inplace.py
every method that writes into the tensor (a name ending in `_`, `x[i] = v`, `x += y`). Each method
is one call to the op that does the work (minigrad/ops/), with PyTorch's argument names, so the
op stays the one place that holds the math and the checks.

tensor.py cannot import the ops (they build on Tensor), so the methods are gathered in mixins
and `attach` copies them onto Tensor, once, when minigrad/__init__.py has loaded the ops.

`.type()` without an argument answers as PyTorch's does, with minigrad's name in front:
'minigrad.FloatTensor', 'minigrad.cuda.LongTensor'. `.type(dtype)` takes a dtype in any
spelling, or such a name (minigrad's or torch's, e.g. 'torch.DoubleTensor').
"""
from . import autograd, hooks, ops, random
from .backends import normalize_device
from .dtypes import as_dtype, is_floating
from .inplace import InPlaceMethods
from .tensor import Tensor, as_tensor, shape_from_args, to_arguments

_TYPE_NAMES = {"float32": "FloatTensor", "float64": "DoubleTensor", "float16": "HalfTensor",
               "bfloat16": "BFloat16Tensor",
               "int64": "LongTensor", "int32": "IntTensor", "int16": "ShortTensor",
               "int8": "CharTensor", "uint8": "ByteTensor", "bool": "BoolTensor",
               "complex64": "ComplexFloatTensor", "complex128": "ComplexDoubleTensor"}
_DTYPE_OF_TYPE_NAME = {name: dtype for dtype, name in _TYPE_NAMES.items()}


def _sizes(args):
    """f(2, 3) and f((2, 3)) both mean (2, 3), as in PyTorch's repeat, tile, flip, permute."""
    return tuple(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else args


class TensorMethods:
    """PyTorch's Tensor methods that compute a new value (see the module docstring)."""

    T = property(lambda self: self.transpose())

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

    def is_floating_point(self):
        """Whether the dtype is floating: float16, bfloat16, float32 or float64."""
        return is_floating(self.dtype)


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
    def add(self, other, *, alpha=1): return ops.add(self, other, alpha=alpha)
    def sub(self, other, *, alpha=1): return ops.sub(self, other, alpha=alpha)
    subtract = sub
    def mul(self, other): return ops.mul(self, other)
    multiply = mul
    def div(self, other): return ops.div(self, other)
    divide = true_divide = div
    def matmul(self, other): return ops.matmul(self, other)
    def __getitem__(self, index): return ops.getitem(self, index)

    # Comparisons are not differentiable: they give boolean tensors.
    def _compare(self, other, name):
        if other is None or isinstance(other, (str, bytes)):   # as torch: == is False, < a
            return NotImplemented                              # TypeError naming both types
        return ops.compare(self, other, name)

    def __eq__(self, other): return self._compare(other, "equal")
    def __ne__(self, other): return self._compare(other, "not_equal")
    def __lt__(self, other): return self._compare(other, "less")
    def __le__(self, other): return self._compare(other, "less_equal")
    def __gt__(self, other): return self._compare(other, "greater")
    def __ge__(self, other): return self._compare(other, "greater_equal")
    __hash__ = object.__hash__

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
        if self.ndim == 0 or self.ndim == 2 and dim0 != dim1:   # 0-d: nothing to swap;
            return ops.transpose(self)   # a matrix: reversing its axes swaps them
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

    # ------------------------------------------------------------------ shape
    def dim(self): return self.ndim
    def flip(self, *dims): return ops.flip(self, _sizes(dims))
    def roll(self, shifts, dims=None): return ops.roll(self, shifts, dims)
    def repeat(self, *sizes): return ops.repeat(self, _sizes(sizes))
    def tile(self, *dims): return ops.tile(self, _sizes(dims))
    def split(self, split_size, dim=0): return ops.split(self, split_size, dim)
    def chunk(self, chunks, dim=0): return ops.chunk(self, chunks, dim)
    def diagonal(self, offset=0, dim1=0, dim2=1): return ops.diagonal(self, offset, dim1, dim2)
    def tril(self, diagonal=0): return ops.tril(self, diagonal)
    def triu(self, diagonal=0): return ops.triu(self, diagonal)
    def clone(self): return ops.clone(self)
    def expand_as(self, other): return self.expand(other.shape)
    def view_as(self, other): return self.reshape(other.shape)
    def reshape_as(self, other): return self.reshape(other.shape)

    def t(self):
        """The transpose of a matrix; a 0-d or 1-d tensor as it is (PyTorch's t())."""
        if self.ndim > 2:
            raise ValueError(f"t: expects a tensor with at most 2 dims, got shape {self.shape}; "
                             "use transpose(dim0, dim1) or permute")
        return self.transpose() if self.ndim == 2 else self

    def narrow(self, dim, start, length): return ops.narrow(self, dim, start, length)
    def select(self, dim, index): return ops.select(self, dim, index)
    def unbind(self, dim=0): return ops.unbind(self, dim)
    def nelement(self): return self.numel()

    @property
    def mT(self):  # noqa: N802  (PyTorch's name)
        """The transpose of the last two dims (a batch of matrices)."""
        if self.ndim < 2:
            raise RuntimeError(f"mT: only supported on matrices or batches of matrices, got a "
                               f"{self.ndim}-D tensor")
        return self.swapaxes(-2, -1)

    def contiguous(self):
        """Itself when its memory is C-contiguous, else a copy (clone) that is."""
        return self if self.array.flags.c_contiguous else ops.clone(self)

    # ------------------------------------------------------------------ math
    def sin(self): return ops.sin(self)
    def cos(self): return ops.cos(self)
    def erf(self): return ops.erf(self)
    def sign(self): return ops.sign(self)
    def floor(self): return ops.floor(self)
    def ceil(self): return ops.ceil(self)
    def round(self, decimals=0): return ops.round(self, decimals)
    def cumsum(self, dim): return ops.cumsum(self, dim)
    def cumprod(self, dim): return ops.cumprod(self, dim)
    def norm(self, p="fro", dim=None, keepdim=False): return ops.norm(self, p, dim, keepdim)
    def mm(self, other): return ops.mm(self, other)
    def bmm(self, other): return ops.bmm(self, other)
    def masked_fill(self, mask, value): return ops.masked_fill(self, mask, value)
    def pow(self, exponent): return ops.pow(self, exponent)
    def __abs__(self): return ops.abs(self)
    def neg(self): return ops.neg(self)
    def log2(self): return ops.log2(self)
    def log10(self): return ops.log10(self)
    def log1p(self): return ops.log1p(self)
    def expm1(self): return ops.expm1(self)
    def rsqrt(self): return ops.rsqrt(self)
    def reciprocal(self): return ops.reciprocal(self)
    def square(self): return ops.square(self)
    def gather(self, dim, index): return ops.gather(self, dim, index)
    def scatter_add(self, dim, index, src): return ops.scatter_add(self, dim, index, src)
    def index_select(self, dim, index): return ops.index_select(self, dim, index)
    def masked_select(self, mask): return ops.masked_select(self, mask)
    def nonzero(self, *, as_tuple=False): return ops.nonzero(self, as_tuple=as_tuple)
    def histc(self, bins=100, min=0, max=0): return ops.histc(self, bins, min, max)

    def scatter(self, dim, index, src=None, value=None, *, reduce=None):
        return ops.scatter(self, dim, index, src, value, reduce=reduce)

    def index_add(self, dim, index, source, *, alpha=1):
        return ops.index_add(self, dim, index, source, alpha=alpha)

    def isclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False):
        return ops.isclose(self, other, rtol, atol, equal_nan)

    def equal(self, other):
        """True when `other` has this shape and these values (the dtypes may differ; NaN
        equals nothing), as torch.equal."""
        if not isinstance(other, Tensor):
            raise TypeError(f"equal(): argument 'other' must be Tensor, not "
                            f"{type(other).__name__}")
        return self.shape == other.shape and bool((self == other).all())

    def sort(self, dim=-1, descending=False, stable=False):
        return ops.sort(self, dim, descending, stable)

    def argsort(self, dim=-1, descending=False, stable=False):
        return ops.argsort(self, dim, descending, stable)

    def topk(self, k, dim=-1, largest=True, sorted=True):
        return ops.topk(self, k, dim, largest, sorted)

    # ------------------------------------------------------------------ bool results
    def isnan(self): return ops.isnan(self)
    def isinf(self): return ops.isinf(self)
    def isfinite(self): return ops.isfinite(self)
    def eq(self, other): return self == other
    def ne(self, other): return self != other
    def lt(self, other): return self < other
    def le(self, other): return self <= other
    def gt(self, other): return self > other
    def ge(self, other): return self >= other

    def any(self, dim=None, keepdim=None, *, axis=None, keepdims=None):
        """A bool tensor, as in PyTorch (`if t.any():` works through __bool__)."""
        return ops.any(self, dim, keepdim, axis=axis, keepdims=keepdims)

    def all(self, dim=None, keepdim=None, *, axis=None, keepdims=None):
        return ops.all(self, dim, keepdim, axis=axis, keepdims=keepdims)

    # ------------------------------------------------------------------ operators
    # & | ^ ~ on bool and integer tensors (no gradient); // has no derivative, % has one.
    def __and__(self, other): return ops.bitwise_and(self, other)
    def __rand__(self, other): return ops.bitwise_and(other, self)
    def __or__(self, other): return ops.bitwise_or(self, other)
    def __ror__(self, other): return ops.bitwise_or(other, self)
    def __xor__(self, other): return ops.bitwise_xor(self, other)
    def __rxor__(self, other): return ops.bitwise_xor(other, self)
    def __invert__(self): return ops.bitwise_not(self)
    def __floordiv__(self, other): return ops.floor_divide(self, other)
    def __rfloordiv__(self, other): return ops.floor_divide(other, self)
    def __mod__(self, other): return ops.remainder(self, other)
    def __rmod__(self, other): return ops.remainder(other, self)

    # ------------------------------------------------------------------ casts and device
    def long(self): return self.astype("int64")
    def int(self): return self.astype("int32")
    def half(self): return self.astype("float16")
    def bfloat16(self): return self.astype("bfloat16")
    def bool(self): return self.astype("bool")
    def byte(self): return self.astype("uint8")
    def char(self): return self.astype("int8")
    def short(self): return self.astype("int16")
    is_cuda = property(lambda self: self.device == "cuda")
    is_xpu = is_mps = property(lambda self: False)   # minigrad's devices: the CPU and CUDA

    def type(self, dtype=None):
        """The type name (no argument), or this tensor cast to `dtype` (see module docstring)."""
        if dtype is None:
            where = "minigrad.cuda." if self.is_cuda else "minigrad."
            return where + _TYPE_NAMES.get(self.dtype.name, f"Tensor[{self.dtype}]")
        if isinstance(dtype, str) and dtype.endswith("Tensor"):
            prefix, _, name = dtype.rpartition(".")
            if name not in _DTYPE_OF_TYPE_NAME or prefix not in (
                    "torch", "minigrad", "torch.cuda", "minigrad.cuda"):
                raise TypeError(f"type: unknown tensor type {dtype!r}; expected a dtype or a "
                                f"name such as 'minigrad.FloatTensor'")
            return self.to("cuda" if prefix.endswith("cuda") else "cpu",
                           _DTYPE_OF_TYPE_NAME[name])
        return self.to(dtype=as_dtype(dtype))


    def register_hook(self, hook): return hooks.register_hook(self, hook)
    def retain_grad(self): return hooks.retain_grad(self)
    retains_grad = property(lambda self: hooks.retains_grad(self))


def attach(cls=Tensor, mixins=(TensorMethods, InPlaceMethods)):
    """Copy the methods of `mixins` onto `cls`: the one place Tensor gets its operators and the
    methods that call ops (minigrad/__init__.py calls it once, after importing the ops)."""
    for mixin in mixins:
        for name, value in vars(mixin).items():
            if name not in ("__module__", "__qualname__", "__doc__", "__dict__", "__weakref__"):
                setattr(cls, name, value)
