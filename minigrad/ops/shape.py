"""Shape primitives: the data is moved, never computed on, so each backward moves the gradient
back the way it came."""
from ..shapes import check_sizes, normalize_axis, unbroadcast
from .base import Op
from .errors import ShapeError
from .tangents import linear


class Reshape(Op):
    """x viewed with a new shape (-1 allowed once);  dx = g reshaped back.
    jvp: dy = dx reshaped."""

    array_backward = True
    batching = "shape"

    @staticmethod
    def forward(ctx, x, shape):
        ctx.in_shape = x.shape
        try:
            return x.reshape(shape)
        except ValueError:
            raise ShapeError(f"reshape: cannot reshape a tensor of shape {x.shape} "
                             f"({x.size} elements) to {tuple(shape)}") from None

    @staticmethod
    def backward(ctx, g):
        return g.reshape(ctx.in_shape)

    jvp = staticmethod(linear)

    @staticmethod
    def replay(ctx, shape):
        in_shape = ctx.in_shape
        return (lambda x: (x.reshape(shape), None)), (lambda saved, g: g.reshape(in_shape))


def reshape(x, shape):
    return Reshape.apply(x, shape=check_sizes("reshape", shape, allow_infer=True))


class Transpose(Op):
    """x with its axes permuted (reversed when `axes` is None);  dx = g with the inverse
    permutation.
    jvp: dy = dx transposed."""

    @classmethod
    def batching(cls, size, batched, x, axes=None):
        rank = x.ndim - 1
        axes = tuple(reversed(range(rank))) if axes is None else axes
        return cls.apply(x, axes=(0,) + tuple([a % rank + 1 for a in axes]))

    @staticmethod
    def forward(ctx, x, axes=None):
        ctx.inverse = None   # reversing all axes (x.T) is its own inverse
        if axes is None:
            return x.transpose()
        axes = tuple([normalize_axis("permute", a, x.shape) for a in axes])
        if sorted(axes) != list(range(x.ndim)):
            raise ShapeError(f"permute: {axes} is not a permutation of the {x.ndim} axes of a "
                             f"tensor of shape {x.shape} (each axis once)")
        ctx.inverse = tuple(sorted(range(x.ndim), key=axes.__getitem__))
        return x.transpose(axes)

    @staticmethod
    def backward(ctx, g):
        return transpose(g, ctx.inverse)

    jvp = staticmethod(linear)


def transpose(x, axes=None):
    return Transpose.apply(x, axes=None if axes is None else tuple(axes))


permute = transpose


class BroadcastTo(Op):
    """x stretched to `shape` by NumPy's rules;  dx = g summed over the stretched axes.
    jvp: dy = dx stretched."""
    batching = "shape"

    @staticmethod
    def forward(ctx, x, shape):
        ctx.in_shape = x.shape
        try:
            return ctx.xp.broadcast_to(x, shape)
        except ValueError:
            raise ShapeError(f"broadcast_to: cannot broadcast shape {x.shape} to "
                             f"{tuple(shape)}") from None

    @staticmethod
    def backward(ctx, g):
        return unbroadcast(g, ctx.in_shape)

    jvp = staticmethod(linear)


def broadcast_to(x, shape):
    return BroadcastTo.apply(x, shape=check_sizes("broadcast_to", shape))
