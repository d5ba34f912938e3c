"""Utilities for models: population statistics for batch norm, conv + batch norm folding,
gradient clipping, parameters as one flat vector; `rnn`: padded and packed sequences."""
import contextlib

import numpy

from ... import autograd, ops, tracing
from ...tensor import Tensor, as_tensor
from ...version import bump_version
from ..batchnorm import _BatchNorm
from ..fusion import fuse_conv_bn, fuse_conv_bn_eval  # noqa: F401  (mg.nn.utils.*)
from . import rnn  # noqa: F401  (mg.nn.utils.rnn)


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
        with contextlib.ExitStack() as population, autograd.no_grad():
            for layer in layers:
                layer.train()
                population.enter_context(layer.population_statistics())
            for batch in batches:
                inputs = batch[0] if isinstance(batch, (tuple, list)) else batch
                if not isinstance(inputs, Tensor):
                    inputs = as_tensor(inputs, device=device)
                model(inputs)
    finally:
        for module, training in modes:
            module.training = training
    return model


# ---------------------------------------------------------------------- gradient clipping
def _grads(parameters):
    """The gradient tensors of `parameters` (a tensor or an iterable of them) that have one."""
    parameters = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    return [p.grad for p in parameters if p.grad is not None]


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False,
                    foreach=None):
    """Scale all gradients, in place, by one factor so that their joint norm is at most
    `max_norm`, and return that norm (before scaling) as a 0-d tensor:

        total = || (||g_1||_p, ..., ||g_k||_p) ||_p        (p = norm_type; inf: the max |g|)
        g_i = g_i * min(1, max_norm / (total + 1e-6))

    A non-finite total is an error when `error_if_nonfinite`, else it scales anyway (as in
    PyTorch). `foreach` is accepted for PyTorch compatibility and ignored.
    """
    grads = _grads(parameters)
    if not grads:
        return as_tensor(0.0)
    total = tracing.run(_clip_norm, grads[0].backend.xp, [g.array for g in grads], max_norm,
                        norm_type, error_if_nonfinite)   # a step of a program mg.compile captures
    for g in grads:
        bump_version(g)                 # changed in place (as torch's mul_ counts)
    return Tensor.from_array(total, grads[0].backend)


def _clip_norm(xp, grads, max_norm, norm_type, error_if_nonfinite):
    """clip_grad_norm_ on the gradients' arrays, in place; returns the total norm."""
    dtype = grads[0].dtype
    order = float(norm_type)
    total = _norm(xp, [_norm(xp, g.reshape(-1), order) for g in grads], order)
    if error_if_nonfinite and not bool(xp.isfinite(total)):
        raise RuntimeError(f"clip_grad_norm_: the total norm of order {norm_type} of the "
                           f"gradients is {float(total)}, so they cannot be clipped; pass "
                           "error_if_nonfinite=False to scale them by it anyway")
    scale = xp.minimum(dtype.type(max_norm) / (total + dtype.type(1e-6)), dtype.type(1.0))
    for g in grads:
        g *= scale.astype(g.dtype, copy=False)
    return total


def _norm(xp, values, order):
    """The p-norm of a 1-D array (or of a list of 0-d ones), in its dtype but accumulated in at
    least float32, as torch's vector_norm: float16 gradients whose sum of squares passes 65504
    still have a finite norm."""
    values = xp.stack(values) if isinstance(values, list) else values
    wide = values.astype(xp.float32) if values.dtype.itemsize < 4 else values
    with numpy.errstate(over="ignore"):    # a norm past float16's range is inf, as in torch
        return xp.linalg.norm(wide, ord=order).astype(values.dtype)


def clip_grad_value_(parameters, clip_value, foreach=None):
    """Clamp every gradient, in place, to [-clip_value, clip_value]. `foreach` is ignored."""
    for g in _grads(parameters):
        tracing.run(g.backend.xp.clip, g.array, -clip_value, clip_value, out=g.array)
        bump_version(g)


# ---------------------------------------------------------------------- flat parameters
def parameters_to_vector(parameters):
    """All parameters flattened and joined into one 1-D tensor (differentiable: a gradient on
    the vector flows back to the parameters)."""
    parameters = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    if not parameters:
        raise ValueError("parameters_to_vector: got no parameters")
    return ops.concatenate([p.reshape(-1) for p in parameters])


def vector_to_parameters(vec, parameters):
    """Copy consecutive slices of the 1-D tensor `vec` into `parameters`, in place (the
    inverse of `parameters_to_vector`). PyTorch rebinds each `param.array` instead; writing
    into the parameters' own arrays keeps their views and optimizers valid, and counts as an
    in-place change of each (its version goes up by one)."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"vector_to_parameters: expected a Tensor, got {type(vec).__name__}")
    parameters = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    wanted = sum(p.numel() for p in parameters)
    if vec.ndim != 1 or vec.shape[0] != wanted:
        raise ValueError(f"vector_to_parameters: the parameters hold {wanted} values, so vec "
                         f"must have shape ({wanted},), got {vec.shape}")
    start = 0
    for p in parameters:
        n = p.numel()
        p.array[...] = p.backend.asarray(vec.array[start:start + n].reshape(p.shape))
        bump_version(p)
        start += n
