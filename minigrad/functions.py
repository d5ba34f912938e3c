"""PyTorch's top-level functions: `mg.cat`, `mg.exp`, `mg.sum(x, dim=1)`, `mg.sort`, ...

Most are the ops themselves, whose signatures already are PyTorch's (`dim=`, `keepdim=`);
the few whose PyTorch form differs from the op's (max/min, which also take a second tensor or
give (values, indices) along a dim, and the shape functions) call the Tensor method of the same
name, so each behaviour is written once.
"""
from .dtypes import as_dtype
from .grad_mode import inference_mode  # noqa: F401
from .ops import (  # noqa: F401
    abs,
    add,
    all,
    any,
    argmax,
    argmin,
    argsort,
    bitwise_and,
    bitwise_not,
    bitwise_or,
    bitwise_xor,
    bmm,
    broadcast_to,
    bucketize,
    cdist,
    ceil,
    chunk,
    clamp,
    clone,
    concatenate,
    cos,
    cumprod,
    cumsum,
    diagonal,
    div,
    einsum,
    erf,
    exp,
    expm1,
    flip,
    floor,
    floor_divide,
    gather,
    histc,
    histogram,
    index_add,
    index_select,
    isclose,
    isfinite,
    isinf,
    isnan,
    log,
    log1p,
    log2,
    log10,
    log_softmax,
    logsumexp,
    masked_fill,
    masked_select,
    matmul,
    maximum,
    mean,
    minimum,
    mm,
    mul,
    narrow,
    neg,
    nonzero,
    norm,
    pow,
    prod,
    reciprocal,
    relu,
    remainder,
    roll,
    round,
    rsqrt,
    scatter,
    scatter_add,
    searchsorted,
    select,
    sigmoid,
    sign,
    sin,
    softmax,
    sort,
    split,
    sqrt,
    square,
    squeeze,
    stack,
    std,
    sub,
    sum,
    tanh,
    tile,
    topk,
    tril,
    triu,
    unbind,
    unsqueeze,
    var,
)
from .ops import max as amax  # noqa: F401  (the op reduces like PyTorch's amax)
from .ops import min as amin  # noqa: F401
from .ops import where as _where
from .ops._promotion import promote_types as _promote_types
from .ops._promotion import result_type as _result_type
from .tensor import Tensor, from_data

cat = concat = concatenate
clip = clamp
multiply, subtract, divide, negative = mul, sub, div, neg


def max(input, dim=None, keepdim=None, *, axis=None, keepdims=None):
    """The largest value; (values, indices) along an int dim; maximum(input, other) for a
    tensor `dim` (PyTorch's three forms of torch.max)."""
    return input.max(dim, keepdim, axis=axis, keepdims=keepdims)


def min(input, dim=None, keepdim=None, *, axis=None, keepdims=None):
    """As max, for the smallest."""
    return input.min(dim, keepdim, axis=axis, keepdims=keepdims)


def reshape(input, shape): return input.reshape(shape)
def flatten(input, start_dim=0, end_dim=-1): return input.flatten(start_dim, end_dim)
def permute(input, dims): return input.permute(dims)
def transpose(input, dim0, dim1): return input.transpose(dim0, dim1)
def swapaxes(input, axis0, axis1): return input.swapaxes(axis0, axis1)
def t(input): return input.t()
def numel(input): return input.numel()


def where(condition, input=None, other=None):
    """input where condition holds, else other (tensors or numbers; two numbers give the
    default float or int64); with the condition alone, its non-zero indices as a tuple of 1-D
    tensors (nonzero(condition, as_tuple=True)), as torch.where."""
    if input is None and other is None:
        return nonzero(condition, as_tuple=True)
    if not isinstance(input, Tensor) and not isinstance(other, Tensor):   # two numbers
        input = from_data(input, device=getattr(condition, "device", None))
    return _where(condition, input, other)


def var_mean(input, dim=None, *, correction=None, keepdim=False, unbiased=None):
    """(var, mean) over `dim`, as torch.var_mean."""
    return (var(input, dim, keepdim, correction=correction, unbiased=unbiased),
            mean(input, dim, keepdim))


def std_mean(input, dim=None, *, correction=None, keepdim=False, unbiased=None):
    """(std, mean) over `dim`, as torch.std_mean."""
    return (std(input, dim, keepdim, correction=correction, unbiased=unbiased),
            mean(input, dim, keepdim))


def result_type(tensor1, tensor2):
    """The dtype an op on the two (tensors or numbers) computes in, as torch.result_type."""
    return _result_type(tensor1, tensor2)


def promote_types(type1, type2):
    """The smallest dtype both convert to, as torch.promote_types."""
    return _promote_types(as_dtype(type1), as_dtype(type2))


def eq(input, other): return input == other
def ne(input, other): return input != other
def lt(input, other): return input < other
def le(input, other): return input <= other
def gt(input, other): return input > other
def ge(input, other): return input >= other


def equal(input, other):
    """True when two tensors have the same shape and values (torch.equal)."""
    if not isinstance(input, Tensor):
        raise TypeError(f"equal(): argument 'input' must be Tensor, not {type(input).__name__}")
    return input.equal(other)


# The names minigrad/__init__.py re-exports as mg.<name> (written once: the imports and defs above).
__all__ = sorted(name for name in dir() if not name.startswith("_")
                 and name not in ("Tensor", "as_dtype", "from_data"))   # (helpers, not functions)
