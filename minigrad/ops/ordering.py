"""Sorting and picking along an axis: sort, argsort, topk, and max(dim) / min(dim) and argmax /
argmin (minigrad/ops/reduction.py), through a gather along an axis and its adjoint scatter.

The sorted values are x gathered at the sorting indices (TakeAlongAxis); the gradient goes back
to the places they were taken from (PutAlongAxis, a scatter-add). The indices are constants.
`Sort` and `PickAlong` find the indices in their forward and return them with the values, so
everything that reads x's values runs inside an op (vmap batches it, a captured step replays
it). sort and topk return named (values, indices) pairs, as PyTorch's do.
"""
import collections

from ..shapes import normalize_axes
from ..tensor import Tensor
from .base import Op
from .errors import IndexRangeError
from .tangents import linear

SortResult = collections.namedtuple("sort", ["values", "indices"])
TopkResult = collections.namedtuple("topk", ["values", "indices"])


class TakeAlongAxis(Op):
    """out = x gathered at integer `indices` along `axis` (numpy.take_along_axis);
    dx = g scattered back, summed where an index repeats (PutAlongAxis).
    jvp: dy = dx gathered at `indices`."""
    batching = "axes"

    @staticmethod
    def forward(ctx, x, indices, axis):
        ctx.in_shape, ctx.indices, ctx.axis = x.shape, indices, axis
        return ctx.xp.take_along_axis(x, indices, axis=axis)

    @staticmethod
    def backward(ctx, g):
        return PutAlongAxis.apply(g, shape=ctx.in_shape, indices=ctx.indices, axis=ctx.axis)

    jvp = staticmethod(linear)


class PutAlongAxis(Op):
    """zeros(shape) with g added at integer `indices` along `axis`;  dg = gg gathered there.
    jvp: dy = zeros with dg added at `indices`."""
    batching = "axes"

    @staticmethod
    def forward(ctx, g, shape, indices, axis):
        xp = ctx.xp
        ctx.indices, ctx.axis = indices, axis
        out = xp.zeros(shape, dtype=g.dtype)
        xp.add.at(out, along_axis(xp, indices, axis), g)   # repeated indices accumulate
        return out

    @staticmethod
    def backward(ctx, gg):
        return TakeAlongAxis.apply(gg, indices=ctx.indices, axis=ctx.axis)

    jvp = staticmethod(linear)


class Sort(Op):
    """(values, indices) of x sorted along `axis` (stably; `descending` keeps equal elements in
    order), the first `k` only when given (topk); dx = g scattered back to where each value
    came from (PutAlongAxis).
    jvp: dvalues = dx gathered at the indices."""
    batching = "axes"

    @staticmethod
    def forward(ctx, x, axis, descending=False, k=None):
        indices = _sorting_indices(ctx.xp, x, axis, descending)
        if k is not None:
            indices = indices[(slice(None),) * axis + (slice(0, k),)]
        return _gathered(ctx, x, indices, axis)

    backward = staticmethod(lambda ctx, g, _: TakeAlongAxis.backward(ctx, g))
    jvp = staticmethod(lambda ctx, dx: (TakeAlongAxis.apply(dx, indices=ctx.indices,
                                                            axis=ctx.axis), None))


class PickAlong(Op):
    """(values, indices) of the first largest (`function` "argmax") or smallest ("argmin")
    element along `axis`, with the axis kept (length 1): max(dim) and min(dim), argmax and
    argmin. dx = g at the picked element (one, even among ties, as in PyTorch).
    jvp: dvalues = dx at the picked element."""
    batching = "axes"

    @staticmethod
    def forward(ctx, x, function, axis):
        if x.shape[axis] == 0:
            raise IndexRangeError(f"{function}: cannot reduce over the empty axis {axis} of a "
                                  f"tensor of shape {x.shape}")
        indices = getattr(x, function)(axis=axis, keepdims=True).astype("int64", copy=False)
        return _gathered(ctx, x, indices, axis)

    backward = Sort.backward
    jvp = Sort.jvp


def _gathered(ctx, x, indices, axis):
    """(x gathered at `indices` along `axis`, the indices), kept on ctx for backward."""
    ctx.in_shape, ctx.indices, ctx.axis = x.shape, indices, axis
    return ctx.xp.take_along_axis(x, indices, axis=axis), indices


def along_axis(xp, indices, axis):
    """The full advanced index that `indices` along `axis` stands for: every other axis indexed
    by its own position, so out[along_axis(...)] is one element per entry of `indices`."""
    shape = indices.shape   # xp.indices(shape, sparse=True), which CuPy lacks
    grid = [xp.arange(n).reshape([n if j == i else 1 for j in range(len(shape))])
            for i, n in enumerate(shape)]
    grid[axis] = indices
    return tuple(grid)


def _sorting_indices(xp, x, axis, descending):
    """Stable argsort along `axis`; descending keeps equal elements in their original order
    (sort the reversed axis ascending, reverse the result, and map the positions back)."""
    if not descending:
        return xp.argsort(x, axis=axis, kind="stable")
    length = x.shape[axis]
    reverse = xp.flip(xp.argsort(xp.flip(x, axis=axis), axis=axis, kind="stable"), axis=axis)
    return length - 1 - reverse


def _zero_index(x):
    """The index of a 0-d tensor's only value."""
    return Tensor.from_array(x.backend.xp.zeros((), "int64"), x.backend)


def _axis(op, dim, x):
    return normalize_axes(op, dim, x.ndim)[0] if x.ndim else 0


def sort(x, dim=-1, descending=False, stable=False):
    """(values, indices) of x sorted along `dim` (stably, whatever `stable` says; NaN sorts
    last ascending, first descending, as in PyTorch)."""
    if x.ndim == 0:
        return SortResult(x, _zero_index(x))
    return SortResult(*Sort.apply(x, axis=_axis("sort", dim, x), descending=descending))


def argsort(x, dim=-1, descending=False, stable=False):
    """The indices that sort x along `dim` (a constant int64 tensor)."""
    return sort(x, dim, descending, stable)[1]


def topk(x, k, dim=-1, largest=True, sorted=True):
    """(values, indices) of the k largest (or smallest) entries along `dim`, largest first."""
    axis = _axis("topk", dim, x)
    length = x.shape[axis] if x.ndim else 1
    if not isinstance(k, int) or not 0 <= k <= length:
        raise ValueError(f"topk: k={k!r} must be an int in [0, {length}] for dim {dim} of a "
                         f"tensor of shape {x.shape}")
    if x.ndim == 0:
        return TopkResult(x, _zero_index(x))
    return TopkResult(*Sort.apply(x, axis=axis, descending=largest, k=k))
