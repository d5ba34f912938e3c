"""log_softmax and cross_entropy.

log_softmax(x)_i = x_i - log sum_j exp(x_j), computed as (x - m) - log sum_j exp(x_j - m) with
m = max_j x_j, so no exp overflows.
"""
from .. import autograd
from ._shapes import normalize_axes
from .base import Op


def _log_softmax(xp, x, axis):
    shifted = x - x.max(axis=axis, keepdims=True)
    shifted -= xp.log(xp.exp(shifted).sum(axis=axis, keepdims=True))
    return shifted


class LogSoftmax(Op):
    """y = log_softmax(x) along `axis`;  dx = g - softmax(x) * sum(g), softmax(x) = exp(y)."""

    @staticmethod
    def forward(ctx, x, axis=-1):
        ctx.axis = normalize_axes("log_softmax", axis, x.ndim)[0]
        out = _log_softmax(ctx.xp, x, ctx.axis)
        ctx.save(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved
        return g - out.exp() * g.sum(axis=ctx.axis, keepdims=True)


_REDUCTIONS = ("mean", "sum", "none")


def _check_targets(logits, target):
    """A clear error unless `target` holds one valid class index per row of `logits`."""
    if logits.ndim != 2:
        raise ValueError(f"cross_entropy: logits must be 2-D (N, C), got shape {logits.shape}")
    if target.dtype.kind not in "iu":
        raise TypeError(f"cross_entropy: target must hold integer class indices, got dtype "
                        f"{target.dtype} (logits of shape {logits.shape})")
    if target.shape != logits.shape[:1]:
        raise ValueError(f"cross_entropy: target of shape {target.shape} does not fit logits of "
                         f"shape {logits.shape}: expected ({logits.shape[0]},)")
    if target.size and (int(target.min()) < 0 or int(target.max()) >= logits.shape[1]):
        bad = target[(target < 0) | (target >= logits.shape[1])]
        raise ValueError(f"cross_entropy: target holds class index {int(bad[0])}, outside "
                         f"[0, {logits.shape[1]}) for logits of shape {logits.shape}")


class CrossEntropy(Op):
    """loss_n = -log_softmax(logits)[n, target_n], averaged ("mean"), summed ("sum") or kept
    ("none");  dlogits = (softmax(logits) - onehot(target)) * g, divided by N for "mean"."""

    @staticmethod
    def forward(ctx, logits, target, reduction="mean"):
        if reduction not in _REDUCTIONS:
            raise ValueError(f"cross_entropy: reduction must be one of {_REDUCTIONS}, "
                             f"got {reduction!r}")
        xp = ctx.xp
        _check_targets(logits, target)
        log_probs = _log_softmax(xp, logits, 1)
        losses = -xp.take_along_axis(log_probs, target[:, None], axis=1)[:, 0]
        ctx.reduction = reduction
        ctx.save(logits, target, log_probs)
        if reduction == "none":
            return losses
        # a 0-d array, not a NumPy scalar
        return xp.asarray(losses.mean() if reduction == "mean" else losses.sum())

    @staticmethod
    def backward(ctx, g):
        logits, target, log_probs = ctx.saved
        if autograd.is_grad_enabled() and logits.requires_grad:
            # create_graph: the softmax must depend on the logits through the graph.
            log_probs = LogSoftmax.apply(logits, axis=1)
        xp, (n, classes) = ctx.xp, logits.shape
        onehot = (xp.arange(classes) == target.data[:, None]).astype(logits.dtype)
        if ctx.reduction == "none":
            scale = g.reshape((n, 1))
        elif ctx.reduction == "mean":
            scale = g * (1.0 / n)
        else:
            scale = g
        return (log_probs.exp() - onehot) * scale, None


def log_softmax(x, axis=-1):
    """log(softmax(x)) along `axis`, computed stably."""
    return LogSoftmax.apply(x, axis=axis)


def cross_entropy(logits, target, reduction="mean"):
    """Cross-entropy of `logits` (N, C) against integer class indices `target` (N,) (a tensor,
    an array or a list), as torch.nn.functional.cross_entropy."""
    return CrossEntropy.apply(logits, target, reduction=reduction)
