"""Reductions over `axis` (None = all axes), with `keepdims`.

The backward of a reduction spreads the output gradient back over the reduced axes: it is first
viewed with the reduced axes kept (length 1), then broadcast to the input's shape.
"""
from ._shapes import kept_shape, normalize_axes
from .base import Op


def _spread(g, ctx):
    """The output gradient broadcast back to the input shape."""
    return g.reshape(kept_shape(ctx.in_shape, ctx.axes)).broadcast_to(ctx.in_shape)


def _reduce_setup(ctx, name, x, axis):
    ctx.in_shape = x.shape
    ctx.axes = normalize_axes(name, axis, x.ndim)
    count = 1
    for a in ctx.axes:
        count *= x.shape[a]
    return count


class Sum(Op):
    """sum(x, axis);  dx = g broadcast over the summed axes."""

    @staticmethod
    def forward(ctx, x, axis=None, keepdims=False):
        _reduce_setup(ctx, "sum", x, axis)
        return x.sum(axis=ctx.axes, keepdims=keepdims)

    @staticmethod
    def backward(ctx, g):
        return _spread(g, ctx)


def sum(x, axis=None, keepdims=False):
    return Sum.apply(x, axis=axis, keepdims=keepdims)


class Mean(Op):
    """mean(x, axis) = sum / n;  dx = g / n broadcast."""

    @staticmethod
    def forward(ctx, x, axis=None, keepdims=False):
        ctx.count = _reduce_setup(ctx, "mean", x, axis)
        return x.mean(axis=ctx.axes, keepdims=keepdims)

    @staticmethod
    def backward(ctx, g):
        return _spread(g / ctx.count, ctx)


def mean(x, axis=None, keepdims=False):
    return Mean.apply(x, axis=axis, keepdims=keepdims)


class Max(Op):
    """max(x, axis);  the gradient goes to the maximal elements, split evenly on ties."""

    @staticmethod
    def forward(ctx, x, axis=None, keepdims=False):
        _reduce_setup(ctx, "max", x, axis)
        if x.size == 0:
            raise ValueError(f"max: cannot reduce an empty tensor of shape {x.shape}")
        out = x.max(axis=ctx.axes, keepdims=True)
        is_max = x == out
        ctx.share = is_max / is_max.sum(axis=ctx.axes, keepdims=True, dtype=x.dtype)
        return out if keepdims else out.reshape([n for i, n in enumerate(x.shape)
                                                 if i not in ctx.axes])

    @staticmethod
    def backward(ctx, g):
        return _spread(g, ctx) * ctx.share


def max(x, axis=None, keepdims=False):
    return Max.apply(x, axis=axis, keepdims=keepdims)


class Var(Op):
    """var(x, axis, correction) = sum((x - mean)^2) / (n - correction), computed in two passes
    so a large mean does not swallow a small spread;  dx = g * 2 (x - mean) / (n - correction)."""

    @staticmethod
    def forward(ctx, x, axis=None, keepdims=False, correction=1):
        count = _reduce_setup(ctx, "var", x, axis)
        ctx.divisor = count - correction if count > correction else 0
        ctx.save(x)
        centered = x - x.mean(axis=ctx.axes, keepdims=True)
        return (centered * centered).sum(axis=ctx.axes, keepdims=keepdims) / ctx.divisor

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved
        centered = x - x.mean(axis=ctx.axes, keepdims=True)
        return _spread(g, ctx) * centered * (2.0 / ctx.divisor)


def var(x, axis=None, keepdims=False, correction=1):
    return Var.apply(x, axis=axis, keepdims=keepdims, correction=correction)
