"""Batch norm two ways with the same numbers: composed from primitives, and fused into one op.

    composed_batch_norm = add(mul(normalize(x, axes)[0], gamma), beta)    three tape nodes
    fused_batch_norm    = the same function as one op                     one tape node

Both take (x, gamma=None, beta=None, axis=1, eps=1e-5, mean=None, var=None) and return
(y, batch_mean, batch_var). `axis` is the channel axis (1 for NCHW, -1 for channels-last);
gamma, beta, mean, var and the returned statistics are (C,) vectors. Without mean/var the batch's
biased statistics are used and returned (training); with them, they are used and returned as
given (inference). gamma and beta are optional separately: an absent one costs nothing, forward
or backward.

The fused op runs the backend's `kernel("batch_norm")`: the CUDA kernels on the GPU
(backends/cuda_batch_norm.py), blocked NumPy code on the CPU (backends/numpy_batch_norm.py, which
also has the passes written out). Its backward computes only the gradients that are needed.
When the gradient itself must be differentiable (create_graph=True), and in the inference form,
backward differentiates the composed formula instead, so higher derivatives come out right.
"""
from .. import autograd
from ..tensor import Tensor, as_tensor
from .base import Op
from .errors import ShapeError
from .normalize import check_values_per_statistic, normalize


def _channel_axis(op, shape, axis):
    if len(shape) < 1 or not -len(shape) <= axis < len(shape):
        raise ValueError(f"{op}: channel axis {axis} is out of range for an input of shape "
                         f"{shape}")
    return axis % len(shape)


def _channel_view_shape(shape, axis):
    """(1, C, 1, 1)-style shape that puts a (C,) vector on `axis` of `shape`."""
    return tuple(n if i == axis else 1 for i, n in enumerate(shape))


def composed_batch_norm(x, gamma=None, beta=None, axis=1, eps=1e-5, mean=None, var=None):
    """Batch norm as normalize, then multiply by gamma, then add beta (each step skipped when its
    parameter is None). Returns (y, batch_mean, batch_var) with (C,) statistics."""
    x = as_tensor(x)
    axis = _channel_axis("composed_batch_norm", x.shape, axis)
    axes = tuple(i for i in range(x.ndim) if i != axis)
    view = _channel_view_shape(x.shape, axis)
    check_parameter_dtypes("composed_batch_norm", x, gamma=gamma, beta=beta, mean=mean, var=var)
    if mean is None:
        y, mean, var = normalize(x, axes, eps)
    else:
        y, mean, var = normalize(x, axes, eps, _viewed("mean", mean, view, x),
                                 _viewed("var", var, view, x))
    if gamma is not None:
        y = y * _viewed("gamma", gamma, view, x)
    if beta is not None:
        y = y + _viewed("beta", beta, view, x)
    channels = x.shape[axis]
    # float32 parameters of a float16 input: computed in float32, returned as float16
    y = y if y.dtype == x.dtype else y.astype(x.dtype)
    return y, mean.reshape(channels), var.reshape(channels)


def check_parameter_dtypes(op, x, **vectors):
    """PyTorch's rule for batch norm's parameters and statistics: the input's dtype, or float32
    with a float16 input. The output has the input's dtype either way."""
    for name, vector in vectors.items():
        dtype = getattr(vector, "dtype", x.dtype)
        if vector is not None and dtype != x.dtype and not (
                x.dtype == "float16" and dtype == "float32"):
            raise TypeError(f"{op}: {name} has dtype {dtype} but the input (shape {x.shape}) "
                            f"is {x.dtype}; expected {x.dtype}"
                            + (" or float32" if x.dtype == "float16" else ""))


def _viewed(name, vector, view, like):
    """A (C,) parameter or statistic as a tensor shaped `view`, e.g. (1, C, 1, 1)."""
    if not isinstance(vector, Tensor):
        vector = as_tensor(vector, device=like.device)
    channels = max(view)   # the view is all ones but the channel axis
    if vector.shape != (channels,):
        raise ShapeError(f"composed_batch_norm: {name} has shape {vector.shape}, but the input "
                         f"of shape {like.shape} has {channels} channels: expected ({channels},)")
    return vector.reshape(view)


def check_fused_inputs(op, x, gamma, beta, mean, var, axis):
    """The fused ops' argument checks (arrays; None where absent); returns the channel axis."""
    if x.dtype.kind != "f":
        raise TypeError(f"{op}: expected a floating input, got dtype {x.dtype} "
                        f"(shape {x.shape})")
    axis = _channel_axis(op, x.shape, axis)
    channels = x.shape[axis]
    for name, array in (("gamma", gamma), ("beta", beta), ("mean", mean), ("var", var)):
        if array is not None and array.shape != (channels,):
            raise ShapeError(
                f"{op}: {name} has shape {array.shape}, but the input of shape "
                f"{x.shape} has {channels} channels on axis {axis}: expected ({channels},)")
    if x.size == 0:
        raise ValueError(f"{op}: the input of shape {x.shape} is empty")
    return axis


class FusedBatchNorm(Op):
    """(y, batch_mean, batch_var) = fused_batch_norm(x, gamma, beta, mean, var), each of gamma,
    beta and the pair mean, var possibly None; see the module docstring."""

    @classmethod
    def name(cls):
        return "fused_batch_norm"

    @staticmethod
    def forward(ctx, x, gamma, beta, mean, var, *, axis, eps):
        axis = check_fused_inputs("fused_batch_norm", x, gamma, beta, mean, var, axis)
        kernel = ctx.backend.kernel("batch_norm")
        ctx.axis, ctx.eps, ctx.inference = axis, eps, mean is not None
        ctx.save(x, gamma, beta, mean, var)
        if ctx.inference:
            y = kernel.forward_infer(x, gamma, beta, mean, var, axis, eps)
        else:
            y, mean, var, ctx.rstd = kernel.forward_train(x, gamma, beta, axis, eps)
            ctx.mean = mean
        ctx.mark_non_differentiable(mean, var)
        return y, mean, var

    @staticmethod
    def backward(ctx, g, *_):
        if g is None:
            return (None,) * 5
        if ctx.inference or autograd.is_grad_enabled():
            return FusedBatchNorm._composed_backward(ctx, g)
        x, gamma, _, _, _ = ctx.saved
        need_x, need_gamma, need_beta, _, _ = ctx.needs_input_grad
        dx, dgamma, dbeta = ctx.backend.kernel("batch_norm").backward(
            g.array, x.array, ctx.mean, ctx.rstd, None if gamma is None else gamma.array,
            ctx.axis, need_x, need_gamma, need_beta)
        return tuple([None if grad is None else Tensor.from_array(grad, ctx.backend)
                      for grad in (dx, dgamma, dbeta)]) + (None, None)

    @staticmethod
    def _composed_backward(ctx, g):
        """Differentiate the composed formula: gradients that are themselves differentiable."""
        inputs = ctx.saved   # x, gamma, beta, mean, var; None where absent
        wanted = [t for t, need in zip(inputs, ctx.needs_input_grad, strict=True) if need]
        with autograd.enable_grad():
            y, _, _ = composed_batch_norm(*inputs[:3], ctx.axis, ctx.eps, *inputs[3:])
        grads = iter(autograd.grad(y, wanted, g, create_graph=autograd.is_grad_enabled(),
                                   allow_unused=True))
        return tuple([next(grads) if need else None for need in ctx.needs_input_grad])


def fused_batch_norm(x, gamma=None, beta=None, axis=1, eps=1e-5, mean=None, var=None):
    """Batch norm in one op: (y, batch_mean, batch_var), equal to `composed_batch_norm`.

    y = gamma * (x - mean) / sqrt(var + eps) + beta per channel on `axis`. See the module
    docstring for the forms and the backward.
    """
    if (mean is None) != (var is None):
        raise ValueError("fused_batch_norm: give both mean and var (inference form) or neither "
                         "(training form)")
    if isinstance(x, Tensor):
        check_parameter_dtypes("fused_batch_norm", x, gamma=gamma, beta=beta, mean=mean, var=var)
        if mean is None and x.ndim:
            channel = _channel_axis("fused_batch_norm", x.shape, axis)
            check_values_per_statistic("fused_batch_norm", x.shape,
                                       [i for i in range(x.ndim) if i != channel])
    return FusedBatchNorm.apply(x, gamma, beta, mean, var, axis=axis, eps=eps)
