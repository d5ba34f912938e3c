"""The functional core that F.batch_norm, the BatchNorm layers (nn/batchnorm.py) and the other
normalizations share, on arguments their doors have checked:

    batch_norm(...)            y = (x - mean) / sqrt(var + eps) * weight + bias, per channel
                               (axis 1), and in training the running statistics' update
    update_running_stats(...)  running = (1 - factor) * running + factor * batch (unbiased var)
    values_per_statistic(...)  the values behind each statistic, refused when only one

The math lives in the ops (`ops.fused_batch_norm`, with `affine_channels`, the per-channel
y * weight + bias of the composed form; `ops.normalize`); this module only picks the op and
moves the buffers.
"""
from .. import ops, tracing
from ..batched import BatchedTensor
from ..ops.fused_batch_norm import affine_channels, batch_norm_checked
from ..ops.fused_batch_norm_act import Activation, FusedBatchNormAct, composed_activation
from ..version import bump_version, in_place

_NO_ACTIVATION = Activation("identity")


def values_per_statistic(op, input, statistics, unit="channel"):
    """How many values each statistic is computed from, checked to be more than one: a variance
    of one value is 0 and the output would be beta whatever the input (PyTorch raises too)."""
    count = input.numel() // max(statistics, 1)
    if count <= 1:
        raise ValueError(
            f"{op}: training needs more than one value per {unit} to compute a variance, but "
            f"the input of shape {input.shape} has {count} value(s) per {unit} (the channel "
            "axis is 1; the values counted are those of the batch and spatial axes). Fixes: "
            "train with a batch of more than one sample (or an input with spatial extent); "
            "switch the layer to eval() so it normalizes with its running statistics (that "
            "needs track_running_stats=True, the default, and statistics from earlier batches); "
            "or, where batches of one are inherent, use LayerNorm, GroupNorm or InstanceNorm.")
    return count


@in_place
def update_running_stats(running_mean, running_var, mean, var, count, factor):
    """running = (1 - factor) * running + factor * batch, in place on the buffers' arrays (so
    unrecorded), with the batch variance made unbiased (var * count / (count - 1)), PyTorch's
    convention. `count` (values per statistic) is above 1. Both buffers' versions move on, so a
    graph that read them (an evaluation-mode forward) refuses a backward afterwards. (One step
    of a program mg.compile captures.)"""
    if isinstance(mean, BatchedTensor) or isinstance(var, BatchedTensor):
        raise RuntimeError(
            "batch_norm: inside vmap (and so jacfwd, hessian, per-sample gradients) a batch "
            "norm in training mode cannot move its running_mean and running_var in place: its "
            f"batch statistics (shape {tuple(mean.shape)}) are batched values. As with "
            "torch.func: call mg.func.replace_all_batch_norm_modules_(model) (batch statistics, "
            "no buffers), build the layer with track_running_stats=False, or use eval()")
    tracing.run(_move_running_stats, running_mean, running_var, mean, var, count, factor)


def _move_running_stats(running_mean, running_var, mean, var, count, factor):
    count = int(count)   # a 0-d array from SyncBatchNorm: all ranks' values, read at each call
    unbiased = var.array * (count / (count - 1))
    for running, batch in ((running_mean, mean.array), (running_var, unbiased)):
        running.array *= 1.0 - factor
        running.array += factor * batch
        bump_version(running)


def batch_norm(input, weight, bias, running_mean, running_var, *, training, factor, eps, count,
               fused=True, memory="input", activation=None):
    """Batch norm of checked (N, C, *) input, then `activation` (an ops Activation; None: none).

    training: the batch's statistics, from `count` values each, and the running buffers, when
    given, move towards them with weight `factor` (`update_running_stats`). Otherwise the
    running buffers are the statistics. `fused` picks ops.fused_batch_norm over the composition
    normalize, mul, add; memory="output" runs ops.fused_batch_norm_act, which keeps only its
    output for backward. An empty input (count 0) gives an empty output and leaves the buffers
    as they are, as in PyTorch: it is scaled and shifted only, so weight and bias get zero
    gradients.
    """
    stats = (None, None) if training else (running_mean, running_var)
    if input.numel() == 0:
        y = affine_channels(input, weight, bias)
        y = ops.mul(y, 1.0) if y is input else y.astype(input.dtype)
        return y if activation is None else composed_activation(y, *activation)
    if memory == "output":
        y, mean, var = FusedBatchNormAct.apply(input, weight, bias, *stats, axis=1, eps=eps,
                                               activation=activation or _NO_ACTIVATION)
    else:
        y, mean, var = batch_norm_checked(input, weight, bias, *stats, axis=1, eps=eps,
                                          fused=fused)
        if activation is not None:
            y = composed_activation(y, *activation)
    if training and running_mean is not None:
        update_running_stats(running_mean, running_var, mean, var, count, factor)
    return y
