"""normalize: the core of batch norm, layer norm, instance norm and group norm.

    y = (x - mean) / sqrt(var + eps)

Training form (no statistics given): `mean` and `var` are the biased statistics of x over `axes`,
kept as length-1 dims so they broadcast (shape (1, C, 1, 1) for axes (0, 2, 3)). With
rstd = 1 / sqrt(var + eps) and n values per statistic, the gradient flows to x only, by the
closed formula

    dx = rstd * (g - mean(g) - y * mean(g * y))        (means over `axes`)

(the derivative of y through both mean and var, summed analytically). Inference form (mean and
var given, e.g. running averages viewed as (1, C, 1, 1)): dx = g * rstd, and mean/var get their
gradients too if they require them.

The variance is computed in two passes, sum((x - mean)^2) / n, so inputs whose mean is large next
to their spread keep their digits, and is accumulated in at least float32 (float16 input
accumulates in float32; the statistics come back in that dtype).
"""
from .. import autograd
from ._shapes import kept_shape, normalize_axes, unbroadcast
from .base import Op
from .batch_norm_kernel import array_kernel, from_channel_view, memory_order


def _check_input(x, what):
    if x.dtype.kind != "f":
        raise TypeError(f"{what}: expected a floating tensor, got dtype {x.dtype} "
                        f"(shape {x.shape})")


def _product(numbers):
    result = 1
    for n in numbers:
        result *= n
    return result


def _broadcasts_to(shape, target):
    """True when an array of `shape` broadcasts to `target` without changing it."""
    if len(shape) > len(target):
        return False
    return all(n in (1, m) for n, m in zip(shape[::-1], target[::-1]))


def _grouped(xp, x, axes):
    """x as a (P, K, Q) array whose middle axis runs over the kept (not reduced) axes, and the
    function that takes a (P, K, Q) result back to x's shape and layout. The axes are taken in
    the order they lie in memory (as the fused batch norm's `channel_view` does, so both give the
    same statistics bit for bit): when the kept axes are adjacent there (batch, layer, instance,
    group and region norm; conv2d's NCHW output, laid out (C, H, W, N)) this is a view of x;
    otherwise the kept axes are moved behind the reduced ones first (a copy)."""
    kept = [i for i in range(x.ndim) if i not in axes]
    order = memory_order(x)
    if order is None:
        x, order = xp.ascontiguousarray(x), list(range(x.ndim))
    at = [order.index(i) for i in kept]
    if at and at != list(range(at[0], at[0] + len(at))):
        order, at = list(axes) + kept, list(range(len(axes), x.ndim))
    moved = xp.ascontiguousarray(x.transpose(order))
    first, stop = (at[0], at[-1] + 1) if at else (0, 0)
    x3 = moved.reshape(_product(moved.shape[:first]), _product(moved.shape[first:stop]),
                       _product(moved.shape[stop:]))
    return x3, lambda y3: from_channel_view(y3, x.shape, order)


class Normalize(Op):
    """(y, mean, var) = normalize(x[, mean, var], axes, eps); see the module docstring."""

    @staticmethod
    def forward(ctx, x, *stats, axes, eps):
        xp = ctx.xp
        _check_input(x, "normalize")
        ctx.axes, ctx.eps = normalize_axes("normalize", axes, x.ndim), eps
        if stats:
            return Normalize._infer(ctx, x, *stats)
        x3, restore = _grouped(ctx.xp, x, ctx.axes)
        if x3.shape[0] * x3.shape[2] == 0:
            raise ValueError(f"normalize: no values to take statistics over: axes {ctx.axes} "
                             f"of a tensor of shape {x.shape}")
        kernel = array_kernel(ctx.backend)
        mean, var = kernel.moments(x3)
        rstd = 1.0 / xp.sqrt(var + var.dtype.type(eps))
        y = restore(kernel.standardize(x3, mean, rstd))
        kept = kept_shape(x.shape, ctx.axes)
        mean, var, ctx.rstd = mean.reshape(kept), var.reshape(kept), rstd.reshape(kept)
        ctx.save(x, y)
        ctx.mark_non_differentiable(mean, var)
        return y, mean, var

    @staticmethod
    def _infer(ctx, x, mean, var):
        xp = ctx.xp
        for name, stat in (("mean", mean), ("var", var)):
            if not _broadcasts_to(stat.shape, x.shape):
                raise ValueError(
                    f"normalize: {name} of shape {stat.shape} must broadcast to the input's "
                    f"shape {x.shape} (keep the reduced dims, e.g. "
                    f"{kept_shape(x.shape, ctx.axes)})")
        rstd = 1.0 / xp.sqrt(var + var.dtype.type(ctx.eps))
        y = ((x - mean) * rstd).astype(x.dtype, copy=False)
        ctx.save(x, mean, var)
        ctx.mark_non_differentiable(mean, var)
        return y, mean, var

    @staticmethod
    def backward(ctx, g, *_):
        if g is None:
            return (None,) * len(ctx.needs_input_grad)
        if len(ctx.needs_input_grad) == 3:
            return Normalize._infer_backward(ctx, g)
        x, y = ctx.saved
        if autograd.is_grad_enabled():
            # create_graph: rstd as a function of x, so second derivatives see it move.
            xa = x if x.dtype == ctx.rstd.dtype else x.astype(ctx.rstd.dtype)
            rstd = (xa.var(axis=ctx.axes, keepdims=True, correction=0) + ctx.eps) ** -0.5
        else:
            rstd = _constant(ctx.rstd, x)
        mean_g = g.mean(axis=ctx.axes, keepdims=True)
        mean_gy = (g * y).mean(axis=ctx.axes, keepdims=True)
        dx = rstd * (g - mean_g - y * mean_gy)
        return dx if dx.dtype == x.dtype else dx.astype(x.dtype)

    @staticmethod
    def _infer_backward(ctx, g):
        x, mean, var = ctx.saved
        need_x, need_mean, need_var = ctx.needs_input_grad
        rstd = (var + ctx.eps) ** -0.5
        g_rstd = g * rstd
        dx = unbroadcast(g_rstd, x.shape) if need_x else None
        dmean = unbroadcast(-g_rstd, mean.shape) if need_mean else None
        # d/dvar (x - mean) (var + eps)^(-1/2) = -(x - mean) rstd^3 / 2
        dvar = (unbroadcast(g_rstd * (x - mean) * (rstd * rstd * -0.5), var.shape)
                if need_var else None)
        return dx, dmean, dvar


def _constant(array, like):
    from ..tensor import Tensor

    return Tensor.from_array(array, like.backend)


def normalize(x, axes, eps=1e-5, mean=None, var=None):
    """(y, mean, var): x normalized over `axes` to zero mean and unit variance.

    Without `mean`/`var` the batch statistics are used and returned (kept dims, not requiring
    grad); with both given (broadcastable to x, e.g. shape (1, C, 1, 1)) they are used instead and
    returned as they are. See the module docstring for the gradients.
    """
    if (mean is None) != (var is None):
        raise ValueError("normalize: give both mean and var (inference form) or neither "
                         "(training form)")
    if mean is None:
        return Normalize.apply(x, axes=axes, eps=eps)
    return Normalize.apply(x, mean, var, axes=axes, eps=eps)
