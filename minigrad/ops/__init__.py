"""Every primitive, as an `Op` class and as a function.

`mg.ops.mul(a, b)` is `Mul.apply(a, b)`. To add an op: subclass `Op` with `forward` (array code
on `ctx.xp`) and `backward` (tensor code), and call it with `.apply`.
"""
from ._shapes import unbroadcast
from .base import Op
from .device import ToDevice
from .batch_norm_kernel import ArrayBatchNorm
from .elementwise import (Add, Cast, Div, Exp, Log, Maximum, Mul, Neg, Pow, Relu, Sigmoid, Sqrt,
                          Sub, Tanh, Where, where)
from .fused_batch_norm import FusedBatchNorm, composed_batch_norm, fused_batch_norm
from .conv import Conv2d, conv2d
from .indexing import GetItem, IndexAdd, getitem
from .join import Concatenate, Pad, Stack, concatenate, pad, stack
from .linalg import MatMul
from .loss import CrossEntropy, LogSoftmax, cross_entropy, log_softmax
from .normalize import Normalize, normalize
from .reduction import Max, Mean, Sum, Var
from .pool import AvgPool2d, MaxPool2d, avg_pool2d, max_pool2d
from .shape import BroadcastTo, Reshape, Transpose
from .window import Fold, Unfold


def add(a, b):
    return Add.apply(a, b)


def sub(a, b):
    return Sub.apply(a, b)


def mul(a, b):
    return Mul.apply(a, b)


def div(a, b):
    return Div.apply(a, b)


def neg(a):
    return Neg.apply(a)


def pow(a, exponent):
    """a ** exponent: a number exponent is a constant; a tensor exponent is exp(exponent log a)."""
    if isinstance(exponent, (int, float)):
        return Pow.apply(a, exponent=exponent)
    return exp(mul(exponent, log(a)))


def exp(a):
    return Exp.apply(a)


def log(a):
    return Log.apply(a)


def sqrt(a):
    return Sqrt.apply(a)


def maximum(a, b):
    return Maximum.apply(a, b)


def relu(a):
    return Relu.apply(a)


def tanh(a):
    return Tanh.apply(a)


def sigmoid(a):
    return Sigmoid.apply(a)


def cast(a, dtype):
    return Cast.apply(a, dtype=dtype)


def sum(x, axis=None, keepdims=False):
    return Sum.apply(x, axis=axis, keepdims=keepdims)


def mean(x, axis=None, keepdims=False):
    return Mean.apply(x, axis=axis, keepdims=keepdims)


def max(x, axis=None, keepdims=False):
    return Max.apply(x, axis=axis, keepdims=keepdims)


def var(x, axis=None, keepdims=False, correction=1):
    return Var.apply(x, axis=axis, keepdims=keepdims, correction=correction)


def reshape(x, shape):
    return Reshape.apply(x, shape=tuple(shape))


def transpose(x, axes=None):
    return Transpose.apply(x, axes=None if axes is None else tuple(axes))


permute = transpose


def broadcast_to(x, shape):
    return BroadcastTo.apply(x, shape=tuple(shape))


def matmul(a, b):
    return MatMul.apply(a, b)


def to_device(x, device):
    """x copied to `device`; differentiable (the gradient is copied back)."""
    return ToDevice.apply(x, device=device)
