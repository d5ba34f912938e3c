"""Tensor methods with PyTorch's names that forward to ops: a mixin that `Tensor` inherits.

Each method is one call to the op that does the work (minigrad/ops/), with PyTorch's argument
names, so the op stays the one place that holds the math and the checks.

`.type()` without an argument answers as PyTorch's does, with minigrad's name in front:
'minigrad.FloatTensor', 'minigrad.cuda.LongTensor'. `.type(dtype)` takes a dtype in any
spelling, or such a name (minigrad's or torch's, e.g. 'torch.DoubleTensor').
"""
from . import hooks
from .dtypes import as_dtype

ops = None   # minigrad.ops, bound by tensor.py once Tensor exists (the ops build on Tensor)

_TYPE_NAMES = {"float32": "FloatTensor", "float64": "DoubleTensor", "float16": "HalfTensor",
               "int64": "LongTensor", "int32": "IntTensor", "int16": "ShortTensor",
               "int8": "CharTensor", "uint8": "ByteTensor", "bool": "BoolTensor",
               "complex64": "ComplexFloatTensor", "complex128": "ComplexDoubleTensor"}
_DTYPE_OF_TYPE_NAME = {name: dtype for dtype, name in _TYPE_NAMES.items()}


def _sizes(args):
    """f(2, 3) and f((2, 3)) both mean (2, 3), as in PyTorch's repeat, tile, flip, permute."""
    return tuple(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else args


class TensorMethods:
    """PyTorch's Tensor methods that are one call to an op (see the module docstring)."""

    __slots__ = ()   # Tensor's own __slots__ stay the only instance storage

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
    def bool(self): return self.astype("bool")
    def byte(self): return self.astype("uint8")
    def char(self): return self.astype("int8")
    def short(self): return self.astype("int16")
    is_cuda = property(lambda self: self.device == "cuda")

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
