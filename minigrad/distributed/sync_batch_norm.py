"""sync_batch_norm: SyncBatchNorm's training step in one op, the fused twin of
`sync_normalize(x)[0] * gamma + beta` (the composed form, which it equals to rounding).

    y = gamma * (x - mean) * rstd + beta,   mean, var over axis 1's complement and every rank

Forward: the statistics exchange of `sync_normalize` (one all_gather of 2C + 1 numbers), then the
batch-norm kernel's one-pass affine step with those statistics. Backward (no create_graph): the
kernel's local sums, sum(g) and sum(g * xhat), are also this rank's dbeta and dgamma; one
all_reduce of them gives the global sums S, then

    dx = gamma * rstd * (g - S(g) / M - xhat * S(g * xhat) / M)

(M values per statistic over all ranks). With create_graph the composed form is differentiated.
"""
from .. import autograd
from ..ops._promotion import require_floating
from ..ops.base import Op
from ..ops.fused_batch_norm import affine_channels
from ..shapes import kept_shape
from ..tensor import Tensor
from . import group
from .sync_normalize import _global_moments, check_enough_values, sync_normalize


class SyncBatchNormStep(Op):
    """(y, mean, var, count) = sync_batch_norm(x, gamma, beta, eps); see the module docstring."""

    @classmethod
    def name(cls):
        return "sync_batch_norm"

    @staticmethod
    def forward(ctx, x, gamma, beta, *, eps, check=None):
        xp = ctx.xp
        require_floating("sync_batch_norm", x)
        ctx.axes, ctx.eps = (0,) + tuple(range(2, x.ndim)), eps
        kept = kept_shape(x.shape, ctx.axes)
        group.agree("sync_normalize", f"statistics of shape {kept}", key=check)   # the sizes
        kernel = ctx.backend.kernel("batch_norm")
        mean, var, counts = _global_moments(kernel, x, ctx.axes, kept)
        ctx.count = check_enough_values(counts, x.shape)
        acc = kernel.accumulation_dtype(x.dtype)
        ctx.mean, var = mean.reshape(-1).astype(acc), var.reshape(-1).astype(acc)
        ctx.rstd = 1.0 / xp.sqrt(var + acc.type(eps))
        y = kernel.forward_infer(x, gamma, beta, ctx.mean, var, 1, eps)
        ctx.save(x, gamma, beta)
        count = xp.asarray(ctx.count)
        mean, var = ctx.mean.reshape(kept), var.reshape(kept)
        ctx.mark_non_differentiable(mean, var, count)
        return y, mean, var, count

    @staticmethod
    def backward(ctx, g, *_):
        if g is None:
            return None, None, None
        if autograd.is_grad_enabled():
            return SyncBatchNormStep._composed_backward(ctx, g)
        x, gamma, _ = ctx.saved
        need_x, need_gamma, need_beta = ctx.needs_input_grad
        kernel = ctx.backend.kernel("batch_norm")
        gamma = None if gamma is None else gamma.array
        _, sum_gxhat, sum_g = kernel.backward(g.array, x.array, ctx.mean, ctx.rstd, gamma, 1,
                                              False, True, True)
        dx = None
        if need_x:   # the same kernel's dx, from the sums of every rank
            sums = ctx.xp.stack([sum_g, sum_gxhat]).astype(ctx.rstd.dtype)
            group.allreduce_array(sums, "sum")
            dx = Tensor.from_array(kernel.input_grad(g.array, x.array, ctx.mean, ctx.rstd, gamma,
                                                     1, sums[0], sums[1], ctx.count), ctx.backend)
        return (dx, Tensor.from_array(sum_gxhat, ctx.backend) if need_gamma else None,
                Tensor.from_array(sum_g, ctx.backend) if need_beta else None)

    @staticmethod
    def _composed_backward(ctx, g):
        """create_graph: differentiate sync_normalize(x) * gamma + beta (its statistics exchange
        runs again, on every rank alike), so the gradients are themselves differentiable."""
        inputs = ctx.saved
        wanted = [t for t, need in zip(inputs, ctx.needs_input_grad, strict=True) if need]
        with autograd.enable_grad():
            y = composed_sync_batch_norm(*inputs, ctx.eps)[0]
        grads = iter(autograd.grad(y, wanted, g, create_graph=True, allow_unused=True))
        return tuple([next(grads) if need else None for need in ctx.needs_input_grad])


def composed_sync_batch_norm(x, gamma, beta, eps=1e-5, check=None, count_tensor=False):
    """(y, mean, var, count) as `sync_batch_norm`, by recorded ops: sync_normalize, mul, add."""
    y, mean, var, count = sync_normalize(x, (0,) + tuple(range(2, x.ndim)), eps, check,
                                         count_tensor)
    return affine_channels(y, gamma, beta), mean, var, count


def sync_batch_norm(x, gamma=None, beta=None, eps=1e-5, check=None, count_tensor=False):
    """(y, mean, var, count): batch norm of (N, C, *) input over axis 1's complement with the
    statistics of every rank's x together, scaled by (C,) gamma and shifted by (C,) beta (either
    may be None), in one op. `check` and `count_tensor` as for `sync_normalize`."""
    y, mean, var, count = SyncBatchNormStep.apply(x, gamma, beta, eps=eps, check=check)
    return y, mean, var, count if count_tensor else int(count.item())

