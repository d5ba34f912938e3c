"""Batch norm two ways with the same numbers: composed from primitives, and fused into one op.

    composed_batch_norm = add(mul(normalize(x, axes)[0], gamma), beta)    three tape nodes
                          (the mul and add: `affine_channels`, shared with the other norms)
    fused_batch_norm    = the same function as one op                     one tape node

Both take (x, gamma=None, beta=None, axis=1, eps=1e-5, mean=None, var=None) and return
(y, batch_mean, batch_var). `axis` is the channel axis (1 for NCHW, -1 for channels-last);
gamma, beta, mean, var and the returned statistics are (C,) vectors. Without mean/var the batch's
biased statistics are used and returned (training); with them, they are used and returned as
given (inference). gamma and beta are optional separately: an absent one costs nothing, forward
or backward.

The fused op runs the backend's `kernel("batch_norm")`: the CUDA kernels on the GPU
(backends/cuda_batch_norm.py), blocked NumPy code on the CPU (backends/array_batch_norm.py, which
also has the passes written out). Its backward computes only the gradients that are needed.
When the gradient itself must be differentiable (create_graph=True), and in the inference form,
backward differentiates the composed formula instead, so higher derivatives come out right.
"""
from .. import autograd
from ..dtypes import is_floating
from ..tensor import Tensor, as_tensor
from .base import Op
from .batch_axes import stretched
from .errors import ShapeError
from .normalize import Normalize, normalized_tangent
from .tangents import total


def check_batch_norm(op, x, axis=1, count_values=True, dtype_rule=True, **vectors):
    """Every check of batch norm's arguments, made once where a call enters (the functions
    below, F.batch_norm, the BatchNorm layers' `_check_input`); the ops and
    `batch_norm_checked` trust them. x is a floating tensor with channel `axis` in range; each
    named vector (gamma, beta, mean, var; or the layers' weight, bias, running_mean,
    running_var) is None or a (C,) tensor of x's dtype (float32 also for float16 x, PyTorch's
    rule; fused_batch_norm_act, with `dtype_rule` False, computes in the accumulation dtype and
    takes any floating vectors). With `count_values`, x must hold values, and more than one per
    channel in the training form (mean None: the variance of one value is 0, so the output
    would be beta whatever the input); the layers count them themselves. Returns the channel
    axis as a non-negative int."""
    if not is_floating(x.dtype):
        raise TypeError(f"{op}: expected a floating input, got dtype {x.dtype} "
                        f"(shape {x.shape})")
    if x.ndim < 1 or not -x.ndim <= axis < x.ndim:
        raise ValueError(f"{op}: channel axis {axis} is out of range for an input of shape "
                         f"{x.shape}")
    axis %= x.ndim
    channels = x.shape[axis]
    for name, vector in vectors.items():
        if vector is None:
            continue
        if vector.shape != (channels,):
            raise ShapeError(
                f"{op}: {name} has shape {vector.shape}, but the input of shape {x.shape} has "
                f"{channels} channels on axis {axis}: expected ({channels},)")
        if dtype_rule and vector.dtype != x.dtype and not (
                x.dtype == "float16" and vector.dtype == "float32"):
            raise TypeError(f"{op}: {name} has dtype {vector.dtype} but the input (shape "
                            f"{x.shape}) is {x.dtype}; expected {x.dtype}"
                            + (" or float32" if x.dtype == "float16" else ""))
    if count_values and x.numel() == 0:
        raise ValueError(f"{op}: the input of shape {x.shape} is empty")
    if count_values and vectors.get("mean") is None and x.numel() == channels:
        raise ValueError(f"{op}: the training form needs more than one value per statistic, "
                         f"but the input of shape {x.shape} holds one per channel (axis "
                         f"{axis}); normalize over more values, or pass mean and var "
                         "(inference form)")
    return axis


def check_statistics_pair(op, mean, var):
    """mean and var are both given (inference form) or both None (training form)."""
    if (mean is None) != (var is None):
        raise ValueError(f"{op}: give both mean and var (inference form) or neither "
                         "(training form)")


def vectors_like(x, *vectors):
    """The given (C,) parameters and statistics as tensors on x's device (None stays None)."""
    return [v if v is None or isinstance(v, Tensor) else as_tensor(v, device=x.device)
            for v in vectors]


def channel_view_shape(shape, axis):
    """(1, C, 1, 1)-style shape that puts a (C,) vector on `axis` of `shape`."""
    return tuple(n if i == axis else 1 for i, n in enumerate(shape))


def affine_channels(y, weight, bias, axis=1):
    """The scale and shift of the composed batch norm, per channel c on `axis`:

        out[..., c, ...] = y[..., c, ...] * weight[c] + bias[c]

    (C,) weight and bias are viewed onto `axis` (shape (1, C, 1, 1) for NCHW y); each step is
    skipped when its vector is None, so y comes back as it is when both are."""
    view = channel_view_shape(y.shape, axis)
    if weight is not None:
        y = y * weight.reshape(view)
    return y if bias is None else y + bias.reshape(view)


def batch_norm_checked(x, gamma, beta, mean, var, *, axis, eps, fused):
    """(y, batch_mean, batch_var): `fused_batch_norm` (fused=True) or `composed_batch_norm`
    (False) on arguments that `check_batch_norm` has passed, with `axis` non-negative: nothing
    is checked again."""
    if fused:
        return FusedBatchNorm.apply(x, gamma, beta, mean, var, axis=axis, eps=eps)
    axes = tuple(i for i in range(x.ndim) if i != axis)
    view = channel_view_shape(x.shape, axis)
    if mean is None:
        y, mean, var = Normalize.apply(x, axes=axes, eps=eps)
    else:
        y, mean, var = Normalize.apply(x, mean.reshape(view), var.reshape(view), axes=axes,
                                       eps=eps)
    y = affine_channels(y, gamma, beta, axis)
    channels = x.shape[axis]
    # float32 parameters of a float16 input: computed in float32, returned as float16
    y = y if y.dtype == x.dtype else y.astype(x.dtype)
    return y, mean.reshape(channels), var.reshape(channels)


def composed_batch_norm(x, gamma=None, beta=None, axis=1, eps=1e-5, mean=None, var=None):
    """Batch norm as normalize, then multiply by gamma, then add beta (each step skipped when its
    parameter is None). Returns (y, batch_mean, batch_var) with (C,) statistics."""
    x = as_tensor(x)
    check_statistics_pair("composed_batch_norm", mean, var)
    gamma, beta, mean, var = vectors_like(x, gamma, beta, mean, var)
    axis = check_batch_norm("composed_batch_norm", x, axis, gamma=gamma, beta=beta, mean=mean,
                            var=var)
    return batch_norm_checked(x, gamma, beta, mean, var, axis=axis, eps=eps, fused=False)


def channels_per_example(op, size, batched, inputs, attrs):
    """Batch norm (`op`: fused, or fused with an activation) of a batch of examples, in one
    call: the examples' channels side by side as B * C channels, so each example's statistics
    are its own. x (B, N, C, ...) is read as (N, B * C, ...), the (C,) vectors as (B * C,)."""
    x, *vectors = inputs
    x = x if batched[0] else stretched(x, size)
    axis = attrs["axis"]   # of one example
    order = tuple(range(1, axis + 1)) + (0,) + tuple(range(axis + 1, x.ndim))
    channels = x.shape[axis + 1]
    side_by_side = x.permute(order)
    side_by_side = side_by_side.reshape(side_by_side.shape[:axis] + (-1,)
                                        + side_by_side.shape[axis + 2:])
    vectors = [v if v is None else (v if b else stretched(v, size)).reshape((-1,))
               for v, b in zip(vectors, batched[1:], strict=True)]
    y, *statistics = op.apply(side_by_side, *vectors, **attrs)
    y = y.reshape(y.shape[:axis] + (size, channels) + y.shape[axis + 1:])
    inverse = tuple(sorted(range(x.ndim), key=order.__getitem__))
    return (y.permute(inverse),) + tuple([s.reshape((size, channels)) for s in statistics])


class FusedBatchNorm(Op):
    """(y, batch_mean, batch_var) = fused_batch_norm(x, gamma, beta, mean, var), each of gamma,
    beta and the pair mean, var possibly None; xhat = (x - mean) * rstd, rstd = 1/sqrt(var+eps),
    sums and means over the M values of each channel:
        dbeta = sum(g),  dgamma = sum(g * xhat),
        dx = gamma * rstd * (g - mean(g) - xhat * mean(g * xhat))    (training: batch stats)
        dx = gamma * rstd * g,  dmean = -sum(dx),  dvar = -sum(dx * (x - mean)) * rstd^2 / 2
                                                                     (inference: given stats)
    The arguments are checked by the functions that apply it (`check_batch_norm`).
    jvp: dy = gamma * dxhat + xhat * dgamma + dbeta per channel, dxhat normalize's
    tangent (`batch_norm_tangent`)."""

    @classmethod
    def batching(cls, size, batched, *inputs, **attrs):
        return channels_per_example(cls, size, batched, inputs, attrs)

    @staticmethod
    def forward(ctx, x, gamma, beta, mean, var, *, axis, eps):
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
            y, _, _ = batch_norm_checked(*inputs, axis=ctx.axis, eps=ctx.eps, fused=False)
        grads = iter(autograd.grad(y, wanted, g, create_graph=autograd.is_grad_enabled(),
                                   allow_unused=True))
        return tuple([next(grads) if need else None for need in ctx.needs_input_grad])

    @staticmethod
    def jvp(ctx, *tangents):
        return batch_norm_tangent(ctx, *tangents), None, None



def batch_norm_tangent(ctx, dx, dgamma, dbeta, dmean, dvar):
    """The tangent of y = xhat * gamma + beta per channel (fused_batch_norm, and
    fused_batch_norm_act before its activation), by the product rule:
        dy = dxhat * gamma + xhat * dgamma + dbeta
    with dxhat the tangent of normalize (`normalized_tangent`: batch or given statistics).
    xhat is recomputed by normalize, so an outer level (or create_graph) sees it move."""
    x, gamma, _, mean, var = ctx.primals
    axes = tuple(i for i in range(x.ndim) if i != ctx.axis)
    view = channel_view_shape(x.shape, ctx.axis)

    def on_axis(vector):
        return None if vector is None else vector.reshape(view)
    stats = [on_axis(s) for s in (mean, var)]
    xhat, _, _ = Normalize.apply(x, *[s for s in stats if s is not None], axes=axes, eps=ctx.eps)
    dxhat = normalized_tangent(x, xhat, axes, ctx.eps, *stats, dx, on_axis(dmean), on_axis(dvar))
    dy = total(dxhat if dxhat is None or gamma is None else dxhat * on_axis(gamma),
               None if dgamma is None else xhat * on_axis(dgamma), on_axis(dbeta))
    return dy if dy.dtype == x.dtype else dy.astype(x.dtype)

def fused_batch_norm(x, gamma=None, beta=None, axis=1, eps=1e-5, mean=None, var=None):
    """Batch norm in one op: (y, batch_mean, batch_var), equal to `composed_batch_norm`.

    y = gamma * (x - mean) / sqrt(var + eps) + beta per channel on `axis`. See the module
    docstring for the forms and the backward.
    """
    x = as_tensor(x)
    check_statistics_pair("fused_batch_norm", mean, var)
    gamma, beta, mean, var = vectors_like(x, gamma, beta, mean, var)
    axis = check_batch_norm("fused_batch_norm", x, axis, gamma=gamma, beta=beta, mean=mean,
                            var=var)
    return FusedBatchNorm.apply(x, gamma, beta, mean, var, axis=axis, eps=eps)
