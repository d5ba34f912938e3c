"""Reductions over `axis` (None = all axes), with `keepdims`.

Every function takes PyTorch's `dim=`/`keepdim=` or NumPy's `axis=`/`keepdims=`. The backward
of a reduction spreads the output gradient back over the reduced axes: it is first viewed with
the reduced axes kept (length 1), then broadcast to the input's shape.
"""
import collections

from ..backends.select import keep_mask
from ..dtypes import is_floating
from ..shapes import dim_keywords, kept_shape, normalize_axes, normalize_axis
from ..tensor import Tensor
from . import either
from ._promotion import autocast_inputs, require_floating
from .base import Op
from .elementwise import Keep, exp, sqrt, where
from .errors import IndexRangeError, ShapeError
from .opmath import float32_call, in_float32
from .ordering import PickAlong
from .tangents import linear, reduced

# What max(dim) and min(dim) return, as torch.return_types.max / .min do.
MaxResult = collections.namedtuple("max", ["values", "indices"])
MinResult = collections.namedtuple("min", ["values", "indices"])


def _kept(g, ctx):
    """The output gradient viewed with the reduced axes kept (length 1), so it broadcasts
    against the input (no op run for a single number or a keepdims result)."""
    return _kept_as(g, kept_shape(ctx.in_shape, ctx.axes))


def _kept_as(g, kept):
    return g if g.ndim == 0 or g.shape == kept else g.reshape(kept)


def _spread(g, ctx):
    """The output gradient broadcast back to the input shape."""
    return either.broadcast_to(_kept(g, ctx), ctx.in_shape)


def _spreader(ctx):
    """`_spread` on arrays, the reshape to the kept shape decided once (mg.compile's replay)."""
    kept, in_shape, broadcast_to = kept_shape(ctx.in_shape, ctx.axes), ctx.in_shape, \
        ctx.xp.broadcast_to
    return lambda g: broadcast_to(_kept_as(g, kept), in_shape)


def _mean_of(ctx, axes, keepdims):
    """x.mean over `axes` as a function for one replayed step (mg.compile): the backend's
    kernel (x.mean's bits, less Python per call)."""
    return ctx.backend.kernel("mean")(ctx.in_shape, axes, keepdims)


def _reduce_setup(ctx, name, x, axis):
    ctx.in_shape = x.shape
    axes = normalize_axes(name, axis, x.shape)
    ctx.axes = axes if x.ndim else ()   # a 0-d tensor's dim 0 or -1: nothing to reduce
    count = 1
    for a in ctx.axes:
        count *= x.shape[a]
    return count


def _reduced_shape(shape, axes):
    return tuple(n for i, n in enumerate(shape) if i not in axes)


class Sum(Op):
    """sum(x, axis);  dx = g broadcast over the summed axes. Integers and bools sum in int64,
    as in PyTorch; the sum of nothing is 0.
    jvp: dy = sum(dx)."""

    array_backward = True
    batching = "axes"

    @staticmethod
    def forward(ctx, x, axis=None, keepdims=False):
        _reduce_setup(ctx, "sum", x, axis)
        dtype = "int64" if x.dtype.kind in "biu" else None
        return x.sum(axis=ctx.axes, keepdims=keepdims, dtype=dtype)

    @staticmethod
    def backward(ctx, g):
        return _spread(g, ctx)

    jvp = staticmethod(linear)


@in_float32
def sum(x, dim=None, keepdim=None, *, axis=None, keepdims=None):
    axis, keepdims = dim_keywords("sum", dim, keepdim, axis, keepdims)
    return Sum.apply(x, axis=axis, keepdims=keepdims)


class Mean(Op):
    """mean(x, axis) = sum / n;  dx = g / n broadcast. The mean of nothing is NaN.
    jvp: dy = mean(dx)."""

    array_backward = True
    batching = "axes"

    @staticmethod
    def forward(ctx, x, axis=None, keepdims=False):
        require_floating("mean", x, "fc")
        ctx.count = _reduce_setup(ctx, "mean", x, axis)
        if ctx.count == 0:
            return x.sum(axis=ctx.axes, keepdims=keepdims) * x.dtype.type("nan")
        return x.mean(axis=ctx.axes, keepdims=keepdims)

    @staticmethod
    def backward(ctx, g):
        return _spread(g / ctx.count, ctx) if ctx.count else _spread(g, ctx)

    jvp = staticmethod(linear)

    @staticmethod
    def replay(ctx, axis, keepdims):
        if not ctx.count:
            return None
        count, spread, mean = ctx.count, _spreader(ctx), _mean_of(ctx, ctx.axes, keepdims)
        return (lambda x: (mean(x), None)), lambda saved, g: spread(g / count)


@in_float32
def mean(x, dim=None, keepdim=None, *, axis=None, keepdims=None):
    axis, keepdims = dim_keywords("mean", dim, keepdim, axis, keepdims)
    return Mean.apply(x, axis=axis, keepdims=keepdims)


def _extremum(ctx, x, axis, keepdims, name):
    """Forward of Max and Min: x.max or x.min over the axes, exact for every dtype, remembering
    which elements were extreme (NaN counts as the extreme when present, as in PyTorch)."""
    xp = ctx.xp
    _reduce_setup(ctx, name, x, axis)
    empty = [a for a in ctx.axes if x.shape[a] == 0]
    if empty:
        raise ShapeError(f"{name}: cannot reduce over axis {empty[0]}, which is empty, of a "
                         f"tensor of shape {x.shape}: the {name} of no values is undefined")
    out = getattr(x, name)(axis=ctx.axes, keepdims=True)
    if x.dtype.kind in "fc" or is_floating(x.dtype):
        hit = (x == out) | (xp.isnan(x) & xp.isnan(out))
        ctx.keep = keep_mask(xp, ~hit, x.dtype)
        ctx.count = hit.sum(axis=ctx.axes, keepdims=True, dtype=x.dtype)
    return out if keepdims else out.reshape(_reduced_shape(x.shape, ctx.axes))


def _extremum_backward(ctx, g):
    """The gradient goes to the extreme elements, split evenly on ties; a select, so elements
    that were not extreme get 0 whatever g holds."""
    share = _spread(g, ctx) / Tensor.from_array(ctx.count, ctx.backend)
    return Keep.apply(share, mask=ctx.keep)


class Max(Op):
    """max(x, axis) (torch.amax);  dx = g / (number of maxima) at the maxima, 0 elsewhere.
    jvp: dy = sum(dx / (number of maxima) at the maxima)."""
    batching = "axes"

    @staticmethod
    def forward(ctx, x, axis=None, keepdims=False):
        return _extremum(ctx, x, axis, keepdims, "max")

    backward = staticmethod(_extremum_backward)

    jvp = staticmethod(reduced)


class Min(Op):
    """min(x, axis) (torch.amin), its own reduction (exact for unsigned ints and bools);
    dx = g / (number of minima) at the minima, 0 elsewhere.
    jvp: dy = sum(dx / (number of minima) at the minima)."""
    batching = "axes"

    @staticmethod
    def forward(ctx, x, axis=None, keepdims=False):
        return _extremum(ctx, x, axis, keepdims, "min")

    backward = staticmethod(_extremum_backward)

    jvp = staticmethod(reduced)


def max(x, dim=None, keepdim=None, *, axis=None, keepdims=None):
    """The largest values over `dim` (all by default; an int or a tuple), as torch.amax."""
    axis, keepdims = dim_keywords("max", dim, keepdim, axis, keepdims)
    return Max.apply(x, axis=axis, keepdims=keepdims)


def min(x, dim=None, keepdim=None, *, axis=None, keepdims=None):
    """The smallest values over `dim` (all by default; an int or a tuple), as torch.amin."""
    axis, keepdims = dim_keywords("min", dim, keepdim, axis, keepdims)
    return Min.apply(x, axis=axis, keepdims=keepdims)


def _arg_extremum(name, x, dim, keepdim):
    """argmax / argmin: the index of the first extreme element along `dim`, or in the flattened
    tensor when dim is None (an int64 constant)."""
    if dim is None:
        if x.numel() == 0:
            raise IndexRangeError(f"{name}: a tensor of shape {x.shape} is empty; there is no "
                                  "index to return")
        index = _picked(name, x.detach().reshape((-1,)), 0)[1]
        return index.reshape((1,) * x.ndim) if keepdim else index.reshape(())
    if x.ndim == 0:
        normalize_axis(name, dim, x.shape)   # dim 0 or -1 only
        return _picked(name, x.detach().reshape((1,)), 0)[1].reshape(())
    axis = normalize_axis(name, dim, x.shape)
    index = _picked(name, x.detach(), axis)[1]
    return index if keepdim else index.reshape(_reduced_shape(x.shape, (axis,)))


def _picked(function, x, axis):
    return PickAlong.apply(x, function=function, axis=axis)


def argmax(x, dim=None, keepdim=None, *, axis=None, keepdims=None):
    return _arg_extremum("argmax", x, *dim_keywords("argmax", dim, keepdim, axis, keepdims))


def argmin(x, dim=None, keepdim=None, *, axis=None, keepdims=None):
    return _arg_extremum("argmin", x, *dim_keywords("argmin", dim, keepdim, axis, keepdims))


def extremum_along(name, x, dim, keepdim=False):
    """max(dim) / min(dim) as PyTorch's: the named tuple (values, indices) along one dim. The
    values are gathered at the indices (PickAlong), so the gradient goes to that one element,
    as in PyTorch (not split among ties, as amax's is)."""
    axis = normalize_axis(name, dim, x.shape)
    if x.ndim == 0:
        values, indices = x, _arg_extremum("arg" + name, x, dim, False)
    else:
        values, indices = _picked("arg" + name, x, axis)
    if not keepdim and x.ndim:
        shape = _reduced_shape(x.shape, (axis,))
        values, indices = values.reshape(shape), indices.reshape(shape)
    return (MaxResult if name == "max" else MinResult)(values, indices)


class Var(Op):
    """var(x, axis, correction) = sum((x - mean)^2) / (n - correction), computed in two passes
    so a large mean does not swallow a small spread;  dx = g * 2 (x - mean) / (n - correction).
    With n <= correction the result is inf (or NaN for 0 / 0), and the gradient follows
    PyTorch: over all axes NaN where x equals the mean and inf elsewhere, over given axes the
    formula with 2 / (n - correction) (inf for n = correction).
    jvp: dy = sum(2 (x - mean) dx) / (n - correction)."""

    array_backward = True
    batching = "axes"

    @staticmethod
    def forward(ctx, x, axis=None, keepdims=False, correction=1):
        require_floating("var", x, "fc")
        count = _reduce_setup(ctx, "var", x, axis)
        ctx.over_all = axis is None or x.ndim == 0
        ctx.dof = count - correction
        nan = x.dtype.type("nan")
        ctx.empty = count == 0
        if ctx.empty:
            return x.sum(axis=ctx.axes, keepdims=keepdims) * nan
        ctx.save(x)
        _, squares = _squares(x, ctx.axes, keepdims)
        if ctx.dof > 0:
            return squares / ctx.dof
        return ctx.xp.where(squares == 0, nan, x.dtype.type("inf"))

    @staticmethod
    def backward(ctx, g):
        if ctx.empty:   # an empty input: an empty gradient
            return _spread(g, ctx)
        (x,) = ctx.saved
        centered = x - x.mean(axis=ctx.axes, keepdims=True)
        if ctx.over_all and ctx.dof <= 0:
            xp = ctx.xp
            scale = xp.where(either.array(centered) == 0, xp.nan, xp.inf).astype(x.dtype)
            return _kept(g, ctx) * scale
        scale = 2.0 / ctx.dof if ctx.dof else float("inf")
        return centered * (_kept(g, ctx) * scale)   # as PyTorch: g * scale first, not per element

    jvp = staticmethod(reduced)

    @staticmethod
    def replay(ctx, axis, keepdims, correction):
        """The same sums; `centered` is kept for the backward (the values its recomputation
        gives) in place of x."""
        if ctx.empty or ctx.dof <= 0:
            return None
        axes, dof, scale = ctx.axes, ctx.dof, 2.0 / ctx.dof
        kept, mean = kept_shape(ctx.in_shape, axes), _mean_of(ctx, axes, True)

        def forward(x):
            centered, squares = _squares(x, axes, keepdims, mean)
            return squares / dof, centered
        return forward, lambda centered, g: centered * (_kept_as(g, kept) * scale)


def _squares(x, axes, keepdims, mean=None):
    """(x minus its mean over `axes` (by `mean`, a function of x, where given), the sum of its
    squares): var's two passes."""
    centered = x - (x.mean(axis=axes, keepdims=True) if mean is None else mean(x))
    return centered, (centered * centered).sum(axis=axes, keepdims=keepdims)


def _correction(op, unbiased, correction):
    """PyTorch's two spellings of the divisor: unbiased=True/False or correction=k."""
    if unbiased is not None and correction is not None:
        raise TypeError(f"{op}: give unbiased= or correction=, not both")
    if unbiased is not None:
        return 1 if unbiased else 0
    return 1 if correction is None else correction


@in_float32
def var(x, dim=None, keepdim=None, *, unbiased=None, correction=None, axis=None,
        keepdims=None):
    """Variance over `dim` with divisor n - correction (correction=1, unbiased=True, by
    default), as torch.var. Only dim and keepdim may be positional: torch's x.var(1, True)
    means unbiased=True, so minigrad refuses a positional unbiased rather than misread it."""
    return _variance("var", x, dim, keepdim, unbiased, correction, axis, keepdims)


@in_float32
def std(x, dim=None, keepdim=None, *, unbiased=None, correction=None, axis=None,
        keepdims=None):
    """sqrt(var(x)), as torch.std;  dx = g / (2 std) * dvar/dx."""
    return sqrt(_variance("std", x, dim, keepdim, unbiased, correction, axis, keepdims))


def _variance(op, x, dim, keepdim, unbiased, correction, axis, keepdims):
    """var's arguments read in PyTorch's spellings, errors naming `op`."""
    require_floating(op, x, "fc")
    axis, keepdims = dim_keywords(op, dim, keepdim, axis, keepdims)
    normalize_axes(op, axis, x.shape)   # errors name std, not var
    return Var.apply(x, axis=axis, keepdims=keepdims,
                     correction=_correction(op, unbiased, correction))


class Prod(Op):
    """prod(x, axis);  dx_i = g * prod_{j != i} x_j: g * prod / x_i when no x is 0, else the
    product of the others multiplied out (exact, and differentiable again, at zeros).
    jvp: dy = sum(dx * prod of the others)."""
    batching = "axes"

    @staticmethod
    def forward(ctx, x, axis=None, keepdims=False):
        _reduce_setup(ctx, "prod", x, axis)
        ctx.keepdims = keepdims
        out = ctx.xp.asarray(x.prod(axis=ctx.axes, keepdims=keepdims,   # an array, not a scalar
                                    dtype="int64" if x.dtype.kind in "biu" else None))
        ctx.save(x, out)
        return out

    @staticmethod
    def backward(ctx, g):
        x, out = ctx.saved
        if not (x.array == 0).any():
            return _kept(g, ctx) * _kept(out, ctx) / x
        return _kept(g, ctx) * _product_of_others(x, ctx.axes)

    jvp = staticmethod(reduced)


def _product_of_others(x, axes):
    """For each element of x, the product of the other elements of its group (the elements
    that share its position outside `axes`): the group of n laid out as an n x n matrix with
    ones on the diagonal, multiplied along its rows."""
    kept = [a for a in range(x.ndim) if a not in axes]
    order = kept + list(axes)
    moved = x.permute(order)
    n = 1
    for a in axes:
        n *= x.shape[a]
    rows = moved.reshape(moved.shape[:len(kept)] + (1, n))
    eye = x.backend.xp.eye(n, dtype=bool)
    others = where(eye, 1, rows.broadcast_to(rows.shape[:-2] + (n, n))).prod(axis=-1)
    inverse = sorted(range(x.ndim), key=order.__getitem__)
    return others.reshape(moved.shape).permute(inverse)


def prod(x, dim=None, keepdim=None, *, axis=None, keepdims=None):
    axis, keepdims = dim_keywords("prod", dim, keepdim, axis, keepdims)
    x, = autocast_inputs("prod", x)
    return float32_call(Prod.apply, x, axis=axis, keepdims=keepdims)


class LogSumExp(Op):
    """y = log sum exp(x) over axis, computed as m + log sum exp(x - m) with m the max, so no
    exp overflows;  dx = g * exp(x - y) (softmax).
    jvp: dy = sum(dx * exp(x - y)) (softmax-weighted)."""
    batching = "axes"

    @classmethod
    def name(cls):
        return "logsumexp"   # the function's spelling (torch.logsumexp)

    @staticmethod
    def forward(ctx, x, axis=None, keepdims=False):
        require_floating("logsumexp", x, "fc")
        xp = ctx.xp
        _reduce_setup(ctx, "logsumexp", x, axis)
        if x.size == 0:   # log of an empty sum: log 0
            out = xp.full(kept_shape(x.shape, ctx.axes), -xp.inf, dtype=x.dtype)
        else:
            top = x.max(axis=ctx.axes, keepdims=True)
            top = xp.where(xp.isfinite(top), top, 0)   # all -inf (or an inf): shift by 0
            out = xp.log(xp.exp(x - top).sum(axis=ctx.axes, keepdims=True)) + top
        out = out if keepdims else out.reshape(_reduced_shape(x.shape, ctx.axes))
        ctx.save(x, out)   # the output itself, so a second derivative sees it depend on x
        return out

    @staticmethod
    def backward(ctx, g):
        x, out = ctx.saved
        return _kept(g, ctx) * exp(x - _kept(out, ctx))

    jvp = staticmethod(reduced)


@in_float32
def logsumexp(x, dim=None, keepdim=None, *, axis=None, keepdims=None):
    axis, keepdims = dim_keywords("logsumexp", dim, keepdim, axis, keepdims)
    return LogSumExp.apply(x, axis=axis, keepdims=keepdims)
