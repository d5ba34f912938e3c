"""PyTorch's top-level functions: `mg.cat`, `mg.exp`, `mg.sum(x, dim=1)`, `mg.sort`, ...

Most are the ops themselves, whose signatures already are PyTorch's (`dim=`, `keepdim=`);
the few whose PyTorch form differs from the op's (max/min, which also take a second tensor or
give (values, indices) along a dim, and the shape functions) call the Tensor method of the same
name, so each behaviour is written once.
"""
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
    erf,
    exp,
    flip,
    floor,
    floor_divide,
    isfinite,
    isinf,
    isnan,
    log,
    log_softmax,
    logsumexp,
    masked_fill,
    matmul,
    maximum,
    mean,
    minimum,
    mm,
    mul,
    neg,
    norm,
    pow,
    prod,
    relu,
    remainder,
    roll,
    round,
    sigmoid,
    sign,
    sin,
    softmax,
    sort,
    split,
    sqrt,
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
    unsqueeze,
    var,
    where,
)
from .ops import max as amax  # noqa: F401  (the op reduces like PyTorch's amax)
from .ops import min as amin  # noqa: F401

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
