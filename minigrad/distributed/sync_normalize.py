"""sync_normalize: `normalize` with its statistics taken over the whole process group.

    y = (x - mean) / sqrt(var + eps),   mean, var over `axes` of every rank's x together

Forward: each rank takes its value count n_r, mean_r and centred sum of squares M2_r = n_r var_r
with the same statistics code as `normalize` (the kernel's `moments`), sends these 2C + 1 numbers
in one all_gather, and every rank merges them in rank order with the exact parallel formula
(the kernel's `merge_moments`; never E[x^2] - E[x]^2), so all ranks hold the same statistics
bit for bit.
Local batches may differ in size, down to none at all.

Backward (M values per statistic over all ranks, g the gradient of the sum of all ranks'
losses): one all_reduce of the 2C per-channel sums sum(g) and sum(g * y), then

    dx = rstd * (g - sum(g) / M - y * sum(g * y) / M)

which is normalize's formula with global means.
"""
import math

import numpy

from .. import autograd
from ..ops import stack
from ..ops._promotion import require_floating
from ..ops.base import Op
from ..shapes import kept_shape, normalize_axes
from ..tensor import Tensor
from . import group
from .nn import AllReduce


def _global_moments(kernel, x, axes, kept):
    """(mean, var, counts) of x over `axes` and every rank (kept dims `kept`, float64): this
    rank's count, mean and M2 go out in one all_gather of 2C + 1 numbers (with the description
    of the call, which every rank's must equal) and come back merged exactly; `counts` holds
    each rank's count."""
    channels = math.prod(kept)
    local = x.size // channels
    parts = kernel.xp.zeros(2 * channels + 1, numpy.float64)   # [n, mean (C), M2 (C)]
    if local:
        mean, var = kernel.moments(x, axes)
        parts[0], parts[1:channels + 1], parts[channels + 1:] = local, mean.ravel(), \
            var.ravel() * local
    call = (f"statistics of shape {kept} for {x.dtype} input at step "
            f"{group.where['step']}")
    gathered = group.allgather_array(parts, check=("sync_normalize", call))
    counts = gathered[:, :1]
    mean, var = kernel.merge_moments(counts, gathered[:, 1:channels + 1],
                                     gathered[:, channels + 1:], counts.sum())
    return mean.reshape(kept), var.reshape(kept), counts[:, 0]


def check_enough_values(counts, shape):
    """The number of values per statistic over all ranks (each rank's in `counts`); an error
    unless it is more than one (the variance of one value is 0)."""
    total = float(counts.sum())
    if total <= 1:
        raise ValueError(
            f"sync_normalize: training needs more than one value per statistic over all "
            f"ranks, but the ranks hold {[int(n) for n in counts]} values each (this rank's "
            f"input has shape {shape})")
    return total


class SyncNormalize(Op):
    """(y, mean, var, count) = sync_normalize(x, axes, eps); dx as in the module docstring."""

    @staticmethod
    def forward(ctx, x, *, axes, eps, check=None):
        xp = ctx.xp
        require_floating("sync_normalize", x)
        ctx.axes, ctx.eps = normalize_axes("sync_normalize", axes, x.ndim), eps
        kept = kept_shape(x.shape, ctx.axes)
        group.agree("sync_normalize", f"statistics of shape {kept}", key=check)   # the sizes
        kernel = ctx.backend.kernel("batch_norm")   # the statistics code of normalize
        mean, var, counts = _global_moments(kernel, x, ctx.axes, kept)
        ctx.count = check_enough_values(counts, x.shape)
        acc = kernel.accumulation_dtype(x.dtype)
        mean, var = mean.astype(acc), var.astype(acc)
        ctx.rstd = 1.0 / xp.sqrt(var + acc.type(eps))
        y = kernel.standardize(x, mean, ctx.rstd, ctx.axes)
        count = xp.asarray(ctx.count)
        ctx.save(x, y)
        ctx.mark_non_differentiable(mean, var, count)
        return y, mean, var, count

    @staticmethod
    def backward(ctx, g, *_):
        if g is None:
            return None
        x, y = ctx.saved
        axes, count = ctx.axes, ctx.count
        if not autograd.is_grad_enabled():
            return SyncNormalize._array_backward(ctx, g, x, y)
        # create_graph: rstd as a function of every rank's x, so second derivatives see it
        xa = x if x.dtype == ctx.rstd.dtype else x.astype(ctx.rstd.dtype)
        mean = AllReduce.apply(xa.sum(axis=axes, keepdims=True)) / count
        centred = xa - mean
        m2 = AllReduce.apply((centred * centred).sum(axis=axes, keepdims=True))
        rstd = (m2 / count + ctx.eps) ** -0.5
        sums = AllReduce.apply(stack([g.sum(axis=axes, keepdims=True),
                                      (g * y).sum(axis=axes, keepdims=True)]))
        dx = rstd * (g - sums[0] / count - y * (sums[1] / count))
        return dx if dx.dtype == x.dtype else dx.astype(x.dtype)

    @staticmethod
    def _array_backward(ctx, g, x, y):
        """The same formula on the arrays, without recording (no create_graph): a dozen fewer
        ops per layer and step, the 2C sums in one all_reduce."""
        xp, axes, count = ctx.xp, ctx.axes, ctx.count
        g, y = g.array, y.array
        sums = xp.stack([g.sum(axis=axes, keepdims=True), (g * y).sum(axis=axes, keepdims=True)])
        group.allreduce_array(sums, "sum")
        dx = ctx.rstd * (g - sums[0] / count - y * (sums[1] / count))
        return Tensor.from_array(dx.astype(x.dtype, copy=False), ctx.backend)


def sync_normalize(x, axes, eps=1e-5, check=None, count_tensor=False):
    """(y, mean, var, count): x normalized over `axes` with the statistics of every rank's x
    together (biased var, kept dims, not requiring grad) and the number of values behind each.
    `check`: an object (the calling layer) for which the ranks' statistics shapes are compared
    in a message of their own only once (the dtype and step travel with every call's numbers).
    `count_tensor`: the count as a 0-d tensor, not read into Python (SyncBatchNorm's, so that
    a step mg.compile replays takes each call's count of every rank)."""
    y, mean, var, count = SyncNormalize.apply(x, axes=axes, eps=eps, check=check)
    return y, mean, var, count if count_tensor else int(count.item())
