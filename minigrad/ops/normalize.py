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
import math

from .. import autograd
from ..shapes import kept_shape, normalize_axes, unbroadcast
from ..tensor import Tensor, as_tensor
from ._promotion import require_floating
from .base import Op
from .tangents import total


def _broadcasts_to(shape, target):
    """True when an array of `shape` broadcasts to `target` without changing it."""
    if len(shape) > len(target):
        return False
    return all(n in (1, m) for n, m in zip(shape[::-1], target[::-1], strict=False))


class Normalize(Op):
    """(y, mean, var) = normalize(x[, mean, var], axes, eps), rstd = 1 / sqrt(var + eps), means
    over `axes`:
        training (batch statistics):  dx = rstd * (g - mean(g) - y * mean(g * y))
        inference (mean, var given):  dx = g * rstd,  dmean = -sum(g * rstd),
                                      dvar = -sum(g * (x - mean)) * rstd^3 / 2
    (sums over the axes each statistic broadcasts along). Takes its arguments as `normalize`
    has checked them: `axes` a sorted tuple of non-negative axes.
    jvp: dy = rstd * (dx - mean(dx) - y * mean(y * dx))   (training; its
    Jacobian is symmetric, so this is backward's formula), dy = (dx - dmean) * rstd
    - y * rstd^2 * dvar / 2   (inference); `normalized_tangent` derives both."""
    batching = "axes"

    @staticmethod
    def forward(ctx, x, mean=None, var=None, *, axes, eps):
        xp = ctx.xp
        ctx.axes, ctx.eps = axes, eps
        ctx.inference = mean is not None
        if ctx.inference:
            return Normalize._infer(ctx, x, mean, var)
        # The backend's kernel computes the statistics, the same call the fused batch norm
        # makes, so the two agree bit for bit; the centring and y are done block by block.
        kernel = ctx.backend.kernel("batch_norm")
        mean, var = kernel.moments(x, ctx.axes)   # mean = sum(x)/n, var = sum((x - mean)^2)/n
        rstd = 1.0 / xp.sqrt(var + var.dtype.type(eps))
        y = kernel.standardize(x, mean, rstd, ctx.axes)   # centred = x - mean; y = centred*rstd
        ctx.rstd = rstd
        ctx.save(x, y)
        ctx.mark_non_differentiable(mean, var)
        return y, mean, var

    @staticmethod
    def _infer(ctx, x, mean, var):
        xp = ctx.xp
        rstd = 1.0 / xp.sqrt(var + var.dtype.type(ctx.eps))
        y = ((x - mean) * rstd).astype(x.dtype, copy=False)
        ctx.save(x, mean, var)
        ctx.mark_non_differentiable(mean, var)
        return y, mean, var

    @staticmethod
    def backward(ctx, g, *_):
        if g is None:
            return (None, None, None) if ctx.inference else None
        if ctx.inference:
            return Normalize._infer_backward(ctx, g)
        x, y = ctx.saved
        if autograd.is_grad_enabled():
            # create_graph: rstd as a function of x, so second derivatives see it move.
            xa = x if x.dtype == ctx.rstd.dtype else x.astype(ctx.rstd.dtype)
            rstd = (xa.var(axis=ctx.axes, keepdims=True, correction=0) + ctx.eps) ** -0.5
        else:
            rstd = Tensor.from_array(ctx.rstd, ctx.backend)
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

    @staticmethod
    def jvp(ctx, dx, dmean=None, dvar=None):
        x, mean, var = (*ctx.primals, None, None)[:3]   # training: x alone
        return normalized_tangent(x, ctx.results[0], ctx.axes, ctx.eps, mean, var, dx, dmean,
                                  dvar), None, None


def normalize(x, axes, eps=1e-5, mean=None, var=None):
    """(y, mean, var): x normalized over `axes` to zero mean and unit variance.

    Without `mean`/`var` the batch statistics are used and returned (kept dims, not requiring
    grad); with both given (broadcastable to x, e.g. shape (1, C, 1, 1)) they are used instead and
    returned as they are. See the module docstring for the gradients.
    """
    if (mean is None) != (var is None):
        raise ValueError("normalize: give both mean and var (inference form) or neither "
                         "(training form)")
    x = as_tensor(x)
    require_floating("normalize", x)
    axes = normalize_axes("normalize", axes, x.ndim)
    if mean is None:   # training: x is the only input (the tape shows normalize(x, axes=...))
        if math.prod(x.shape[a] for a in axes) == 1:
            raise ValueError(
                f"normalize: the training form needs more than one value per statistic, but "
                f"axes {axes} of an input of shape {tuple(x.shape)} hold one; normalize over "
                "more values, or pass mean and var (inference form)")
        return Normalize.apply(x, axes=axes, eps=eps)
    for name, stat in (("mean", mean), ("var", var)):
        if not _broadcasts_to(stat.shape, x.shape):
            raise ValueError(
                f"normalize: {name} of shape {stat.shape} must broadcast to the input's shape "
                f"{x.shape} (keep the reduced dims, e.g. {kept_shape(x.shape, axes)})")
    return Normalize.apply(x, mean, var, axes=axes, eps=eps)


def normalized_tangent(x, y, axes, eps, mean, var, dx, dmean=None, dvar=None):
    """The tangent of y = (x - mean) * rstd, rstd = (var + eps)^(-1/2), for x moving by dx (and
    given statistics by dmean, dvar); None when nothing moves. y and rstd are recomputed from
    the tensors, so an outer level (or create_graph) sees them move.

    Inference (mean, var given): the product rule on (x - mean) * rstd, with
    drstd = -rstd^3 dvar / 2, gives dy = (dx - dmean) * rstd - y * rstd^2 * dvar / 2.
    Training (batch statistics, means over `axes`): dmean = mean(dx), and as mean(x - mean) = 0,
    dvar = 2 mean((x - mean) dx) = 2 mean(y dx) / rstd, so drstd = -rstd^2 mean(y dx) and
        dy = (dx - mean(dx)) * rstd + (x - mean) * drstd = rstd * (dx - mean(dx) - y * mean(y dx))
    the backward's formula with dx for g: the Jacobian rstd (I - 1 1^T / n - y y^T / n) is
    symmetric."""
    if mean is not None:
        rstd = (var + eps) ** -0.5
        moved = total(dx, None if dmean is None else -dmean)
        return total(None if moved is None else moved * rstd,
                     None if dvar is None else y * (rstd * rstd * dvar * -0.5))
    if dx is None:
        return None
    rstd = (x.var(axis=axes, keepdims=True, correction=0) + eps) ** -0.5
    dy = rstd * (dx - dx.mean(axis=axes, keepdims=True)
                 - y * (y * dx).mean(axis=axes, keepdims=True))
    return dy if dy.dtype == x.dtype else dy.astype(x.dtype)
