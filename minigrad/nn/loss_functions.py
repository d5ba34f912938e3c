"""Regression and divergence losses, composed from primitives (their gradients are those of the
primitives), with PyTorch's names, arguments and reductions. Re-exported by nn.functional.

Options after `target` (after `weight` where there is one) are keyword-only, as PyTorch's are in
effect: its deprecated size_average/reduce stand in those positions, so a positional reduction
would bind to the wrong parameter there. (huber_loss has no such legacy and keeps PyTorch's
positional order.)

Unlike PyTorch, which broadcasts an input and a target of different shapes with a warning,
minigrad raises: a (N,) target against a (N, 1) input silently averages N*N differences.

Under mg.autocast these losses run in float32, as on PyTorch's list (`float32_inputs`,
minigrad/amp/autocast_mode.py).
"""
import math

from .. import ops
from ..amp import float32_inputs
from ..ops.errors import ShapeError
from ..ops.loss import binary_cross_entropy, cross_entropy, nll_loss  # noqa: F401  (F's)
from ..tensor import Tensor, as_tensor

_REDUCTIONS = ("mean", "sum", "none")


def _pair(op, input, target, reduction):
    """target as a tensor beside input, both of one shape, and the reduction checked."""
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{op}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    if not isinstance(target, Tensor):
        target = as_tensor(target, input.dtype, input.device)
    if target.shape != input.shape:
        raise ShapeError(f"{op}: target of shape {target.shape} does not match input of shape "
                         f"{input.shape} (minigrad does not broadcast losses; reshape one)")
    return target


def _reduce(losses, reduction):
    if reduction == "none":
        return losses
    return losses.mean() if reduction == "mean" else losses.sum()


@float32_inputs
def mse_loss(input, target, *, reduction="mean"):
    """(input - target)^2."""
    diff = input - _pair("mse_loss", input, target, reduction)
    return _reduce(diff * diff, reduction)


@float32_inputs
def l1_loss(input, target, *, reduction="mean"):
    """|input - target| (gradient 0 where they are equal)."""
    return _reduce((input - _pair("l1_loss", input, target, reduction)).abs(), reduction)


@float32_inputs
def smooth_l1_loss(input, target, *, reduction="mean", beta=1.0):
    """0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (d = input - target); beta = 0 is
    the L1 loss."""
    if beta < 0:
        raise ValueError(f"smooth_l1_loss: beta must be >= 0, got {beta}")
    d = (input - _pair("smooth_l1_loss", input, target, reduction)).abs()
    if beta == 0:
        return _reduce(d, reduction)
    return _reduce(ops.where(d < beta, d * d * (0.5 / beta), d - 0.5 * beta), reduction)


@float32_inputs
def huber_loss(input, target, reduction="mean", delta=1.0):
    """0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta) (d = input - target)."""
    if delta <= 0:
        raise ValueError(f"huber_loss: delta must be > 0, got {delta}")
    d = (input - _pair("huber_loss", input, target, reduction)).abs()
    return _reduce(ops.where(d < delta, d * d * 0.5, (d - 0.5 * delta) * delta), reduction)


@float32_inputs
def binary_cross_entropy_with_logits(input, target, weight=None, *, reduction="mean",
                                     pos_weight=None):
    """-w [pw t log sigmoid(x) + (1 - t) log(1 - sigmoid(x))], computed stably as
    (1 - t) x + (1 + (pw - 1) t) softplus(-x)."""
    target = _pair("binary_cross_entropy_with_logits", input, target, reduction)
    log_weight = 1.0 if pos_weight is None else (pos_weight - 1.0) * target + 1.0
    # softplus without its linear cut-off: exact for every x, as PyTorch's formula
    losses = (1.0 - target) * input + log_weight * ops.softplus(-input, threshold=float("inf"))
    return _reduce(losses if weight is None else losses * weight, reduction)


@float32_inputs
def kl_div(input, target, *, reduction="mean", log_target=False):
    """Pointwise target * (log target - input) for log-probabilities `input` (0 where
    target = 0), or exp(target) * (target - input) with log_target; "batchmean" divides the sum
    by the batch size (the true KL divergence), "mean" by the number of elements."""
    batchmean = reduction == "batchmean"
    target = _pair("kl_div", input, target, "sum" if batchmean else reduction)
    if log_target:
        losses = target.exp() * (target - input)
    else:
        positive = (target > 0).array
        safe = ops.where(positive, target, 1.0)   # log(1) = 0 where target = 0: 0 log 0 = 0
        losses = target * (safe.log() - input)
    if batchmean:
        return losses.sum() / (input.shape[0] if input.ndim else 1)
    return _reduce(losses, reduction)


@float32_inputs
def poisson_nll_loss(input, target, log_input=True, full=False, *, eps=1e-8,
                     reduction="mean"):
    """The negative log-likelihood of `target` counts under a Poisson distribution of rate
    exp(input) (log_input=True): exp(input) - target * input; of rate input otherwise:
    input - target * log(input + eps). full adds Stirling's approximation of log(target!),
    target * log(target) - target + log(2 pi target) / 2, where target > 1."""
    target = _pair("poisson_nll_loss", input, target, reduction)
    if log_input:
        losses = ops.exp(input) - target * input
    else:
        losses = input - target * ops.log(input + eps)
    if full:
        counts = ops.where(target > 1, target, 1.0)   # the term is 0 at target <= 1
        stirling = counts * ops.log(counts) - counts + 0.5 * ops.log(2 * math.pi * counts)
        losses = losses + ops.where(target > 1, stirling, 0.0)
    return _reduce(losses, reduction)
