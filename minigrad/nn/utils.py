"""Utilities for models: population statistics for batch norm, conv + batch norm folding."""
from .. import autograd
from ..tensor import Tensor
from .batchnorm import _BatchNorm
from .fusion import fuse_conv_bn, fuse_conv_bn_eval  # noqa: F401  (mg.nn.utils.*)


def _device_of(model):
    for tensor in model.parameters():
        return tensor.device
    for tensor in model.buffers():
        return tensor.device
    return None


def recompute_batchnorm_stats(model, batches):
    """Replace the running statistics of every batch-norm layer in `model` (that tracks them) by
    exact population statistics over `batches` ("precise BN"), and return the model.

    `batches` is an iterable of inputs, or of (input, target) pairs (the target is ignored);
    inputs that are not tensors are put on the model's device. For each layer and each batch b
    with n_b values per statistic (batch size times spatial size), the result is

        running_mean = sum_b n_b * mean_b / sum_b n_b
        running_var  = sum_b n_b * unbiased_var_b / sum_b n_b

    so a smaller last batch counts for what it holds. While the batches run, the batch-norm
    layers are in training mode and every other module in evaluation mode (dropout off, as at
    test time); no gradients are recorded. Afterwards every module is back in the mode it had,
    and parameters are untouched; `num_batches_tracked` counts the batches seen.
    """
    layers = [m for m in model.modules() if isinstance(m, _BatchNorm) and m.track_running_stats]
    modes = [(module, module.training) for module in model.modules()]
    device = _device_of(model)
    try:
        model.eval()
        for layer in layers:
            layer.reset_running_stats()
            layer.train()
            layer._population_count = 0
        with autograd.no_grad():
            for batch in batches:
                inputs = batch[0] if isinstance(batch, (tuple, list)) else batch
                if not isinstance(inputs, Tensor):
                    inputs = Tensor(inputs, device=device)
                model(inputs)
    finally:
        for layer in layers:
            del layer._population_count
        for module, training in modes:
            module.training = training
    return model
