"""Stateless layer functions (`import minigrad.nn.functional as F`), with PyTorch's names and
arguments. Each is a thin composition of primitives from `minigrad.ops`, so its gradient comes
from theirs."""
import numpy

from .. import ops
from ..creation import generator
from ..tensor import Tensor


def linear(input, weight, bias=None):
    """y = input @ weight^T + bias, with weight laid out (out_features, in_features)."""
    out = ops.matmul(input, ops.transpose(weight))
    return out if bias is None else ops.add(out, bias)


def conv2d(input, weight, bias=None, stride=1, padding=0):
    """2-D cross-correlation over NCHW input with an (out, in, kh, kw) weight."""
    return ops.conv2d(input, weight, bias, stride=stride, padding=padding)


def max_pool2d(input, kernel_size, stride=None, padding=0):
    """Maximum over kernel_size windows of NCHW input (stride defaults to kernel_size)."""
    return ops.max_pool2d(input, kernel_size, stride=stride, padding=padding)


def avg_pool2d(input, kernel_size, stride=None, padding=0):
    """Mean over kernel_size windows of NCHW input (stride defaults to kernel_size)."""
    return ops.avg_pool2d(input, kernel_size, stride=stride, padding=padding)


def relu(input):
    return ops.relu(input)


def tanh(input):
    return ops.tanh(input)


def sigmoid(input):
    return ops.sigmoid(input)


def flatten(input, start_dim=0, end_dim=-1):
    """`input` with dimensions start_dim..end_dim merged into one."""
    shape = input.shape
    start, end = start_dim % max(input.ndim, 1), end_dim % max(input.ndim, 1)
    return ops.reshape(input, shape[:start] + (-1,) + shape[end + 1:])


def dropout(input, p=0.5, training=True):
    """Inverted dropout: in training, zero each element with probability p and scale the rest
    by 1 / (1 - p), so the expected value is unchanged and evaluation is the identity.

    The mask is drawn from minigrad's seeded generator (`minigrad.manual_seed`).
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: p must be between 0 and 1, not {p}")
    if not training or p == 0.0:
        return input
    keep = generator().random(input.shape, dtype=numpy.float32) >= p
    backend = input.backend
    mask = backend.asarray(keep, dtype=input.dtype)
    if p < 1.0:
        mask *= 1.0 / (1.0 - p)
    return ops.mul(input, Tensor._wrap(mask, backend))


def log_softmax(input, dim=-1):
    """log(softmax(input)) along `dim`, computed stably."""
    return ops.log_softmax(input, axis=dim)


def cross_entropy(input, target, reduction="mean"):
    """Cross-entropy between logits `input` (N, C) and integer class indices `target` (N,):
    -log_softmax(input)[n, target[n]], averaged ("mean"), summed ("sum") or kept ("none")."""
    return ops.cross_entropy(input, target, reduction=reduction)
