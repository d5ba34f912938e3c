"""Batch norm and an activation in one op that keeps only its output (InPlace-ABN's idea).

    z = act(y),  y = gamma * xhat + beta,  xhat = (x - mean) / sqrt(var + eps)

with act "identity", "leaky_relu" (z = y > 0 ? y : negative_slope * y) or "elu"
(z = y > 0 ? y : alpha * (exp(y) - 1)). Batch norm followed by an activation normally keeps two
activation-sized arrays for backward: x (for batch norm) and y (for the activation). This op
keeps z alone, and x is freed as soon as forward is done (the node holds a data-free stand-in
for it, `ctx.drop_input_data`). Backward inverts the activation to get y back, then y to get
xhat = (y - beta) / gamma, and from xhat computes the batch-norm gradients:

    dy = g * act'(y),   dbeta = sum(dy),   dgamma = sum(dy * xhat),
    dx = gamma * rstd * (dy - (dbeta + xhat * dgamma) / M)      (inference: gamma * rstd * dy)

Dividing by gamma: where |gamma| < eps it divides by eps with gamma's sign instead (InPlace-ABN
uses |gamma| + eps, and also scales its forward by |gamma| + eps so that the two agree; minigrad
keeps BatchNorm's forward, signed gamma and state_dict, and only bounds the divisor, which
leaves every gradient exact for |gamma| >= eps). A gamma of exactly 0 that needs a gradient is
an error: z then holds no trace of xhat, so dgamma cannot be recovered (docs/bn-act.md).

The backend's `kernel("batch_norm_act")` runs it: batch norm's forward with the activation
applied to its output, and `backward_from_output` (backends/array_batch_norm_act.py has the
passes on the CPU; on the GPU the batch-norm CUDA kernels read z in place of x). Under
create_graph, or when the given mean/var need gradients, backward instead rebuilds
x = xhat / rstd + mean from z and differentiates the composed formula there, joined to the graph
at x's place, so higher derivatives come out right.
"""
from .. import autograd
from ..backends.array_batch_norm import accumulation_dtype
from ..backends.array_batch_norm_act import ACTIVATIONS, Activation
from ..tensor import Tensor, as_tensor
from .activation import elu, leaky_relu
from .base import Op
from .elementwise import where
from .fused_batch_norm import (
    batch_norm_checked,
    batch_norm_tangent,
    channel_view_shape,
    channels_per_example,
    check_batch_norm,
    check_statistics_pair,
    vectors_like,
)


def composed_activation(y, activation="identity", negative_slope=0.01, alpha=1.0):
    """act(y) by the activation ops (leaky_relu, elu): what the fused op equals, and what its
    create_graph backward differentiates."""
    if activation == "leaky_relu":
        return leaky_relu(y, negative_slope)
    if activation == "elu":
        return elu(y, alpha)
    return y


def checked_activation(activation, negative_slope, alpha):
    """The checked Activation: only invertible ones are allowed."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"fused_batch_norm_act: activation must be one of "
                         f"{', '.join(ACTIVATIONS)}, not {activation!r}")
    if activation == "leaky_relu" and not negative_slope > 0:
        raise ValueError(f"fused_batch_norm_act: leaky_relu needs negative_slope > 0 to be "
                         f"inverted in backward, got {negative_slope}")
    if activation == "elu" and not alpha > 0:
        raise ValueError(f"fused_batch_norm_act: elu needs alpha > 0 to be inverted in backward, "
                         f"got {alpha}")
    return Activation(activation, float(negative_slope), float(alpha))


class FusedBatchNormAct(Op):
    """(z, batch_mean, batch_var) = act(fused_batch_norm(x, gamma, beta, mean, var)), keeping z
    only;  dy = g * act'(z),  xhat = (act^-1(z) - beta) / gamma,  dbeta = sum(dy),
    dgamma = sum(dy * xhat),  dx = gamma * rstd * (dy - mean(dy) - xhat * mean(dy * xhat))
    (inference: dx = gamma * rstd * dy); see the module docstring. The arguments are checked by
    `fused_batch_norm_act` (`check_batch_norm`, `checked_activation`).
    jvp: dz = act'(z) * dy, dy batch norm's tangent (`batch_norm_tangent`),
    act'(z) = 1 where z > 0, else negative_slope (leaky_relu) or z + alpha (elu)."""

    @classmethod
    def batching(cls, size, batched, *inputs, **attrs):
        return channels_per_example(cls, size, batched, inputs, attrs)

    @staticmethod
    def forward(ctx, x, gamma, beta, mean, var, *, activation, axis, eps):
        if gamma is not None and ctx.needs_input_grad[1] and not gamma.all():
            zeros = ctx.xp.flatnonzero(gamma == 0).tolist()
            raise ValueError(
                f"fused_batch_norm_act: gamma is 0 in channel(s) {zeros} and needs a gradient; "
                "the output then holds no trace of the normalized input, so backward could not "
                "recover dgamma. Use fused_batch_norm and the activation separately for such "
                "channels (e.g. a zero-initialised gamma), or start gamma away from 0")
        kernel = ctx.backend.kernel("batch_norm_act")
        ctx.axis, ctx.eps, ctx.activation = axis, eps, activation
        ctx.inference = mean is not None
        if ctx.inference:
            z = kernel.forward_infer(x, gamma, beta, mean, var, axis, eps, activation)
            acc = accumulation_dtype(ctx.xp, x.dtype)
            ctx.rstd, ctx.mean = 1.0 / ctx.xp.sqrt(var.astype(acc) + acc.type(eps)), mean
        else:
            z, mean, var, ctx.rstd = kernel.forward_train(x, gamma, beta, axis, eps, activation)
            ctx.mean = mean
        ctx.save(x, gamma, beta, mean if ctx.inference else None,
                 var if ctx.inference else None, z)
        ctx.drop_input_data(0)   # x's array is not needed again: z is
        ctx.mark_non_differentiable(mean, var)
        return z, mean, var

    @staticmethod
    def backward(ctx, g, *_):
        if g is None:
            return (None,) * 5
        need_x, need_gamma, need_beta, need_mean, need_var = ctx.needs_input_grad
        if autograd.is_grad_enabled() or need_mean or need_var:
            return FusedBatchNormAct._composed_backward(ctx, g)
        _, gamma, beta, _, _, z = ctx.saved
        dx, dgamma, dbeta = ctx.backend.kernel("batch_norm_act").backward_from_output(
            g.array, z.array, ctx.rstd, _data(gamma), _data(beta), ctx.axis, ctx.activation,
            not ctx.inference, ctx.eps, need_x, need_gamma, need_beta)
        return tuple([None if grad is None else Tensor.from_array(grad, ctx.backend)
                      for grad in (dx, dgamma, dbeta)]) + (None, None)

    @staticmethod
    def _composed_backward(ctx, g):
        """Differentiate the composed formula at x rebuilt from z: x = xhat / rstd + mean, with
        xhat from the kernel's inversion. The rebuilt x enters the graph as x + (rebuilt - x)
        with the difference a constant: its value is the rebuilt x (x's stand-in holds zeros)
        and its derivative flows to x, so the gradients are differentiable in x."""
        x, gamma, beta, mean, var, z = ctx.saved
        xp, act = ctx.xp, ctx.activation
        kernel = ctx.backend.kernel("batch_norm_act")
        xhat = kernel.normalized_from_output(z.array, _data(gamma), _data(beta), ctx.axis, act,
                                             ctx.eps)
        view = channel_view_shape(z.shape, ctx.axis)
        rebuilt = (xhat / ctx.rstd.reshape(view) + ctx.mean.reshape(view)).astype(x.dtype)
        inputs = (x, gamma, beta, mean, var)
        wanted = [t for t, need in zip(inputs, ctx.needs_input_grad, strict=True) if need]
        with autograd.enable_grad():
            x_at = x + Tensor.from_array(xp.subtract(rebuilt, x.array, dtype=x.dtype),
                                         ctx.backend)
            y, _, _ = batch_norm_checked(x_at, gamma, beta, mean, var, axis=ctx.axis,
                                         eps=ctx.eps, fused=False)
            out = composed_activation(y, *act)
        grads = iter(autograd.grad(out, wanted, g, create_graph=autograd.is_grad_enabled(),
                                   allow_unused=True))
        return tuple([next(grads) if need else None for need in ctx.needs_input_grad])

    @staticmethod
    def jvp(ctx, *tangents):
        dy, (z, _, _) = batch_norm_tangent(ctx, *tangents), ctx.results
        name, negative_slope, alpha = ctx.activation
        if name == "identity":
            return dy, None, None
        slope = negative_slope if name == "leaky_relu" else z + alpha
        return where((z > 0).array, dy, dy * slope), None, None


def _data(tensor):
    return None if tensor is None else tensor.array


def fused_batch_norm_act(x, gamma, beta, activation="identity", negative_slope=0.01, alpha=1.0,
                         axis=1, eps=1e-5, mean=None, var=None):
    """Batch norm, then `activation`, as one op keeping only its output: (z, batch_mean,
    batch_var). Equal to `composed_activation(composed_batch_norm(...)[0], ...)`; x is freed
    after forward. gamma and beta may be None. See the module docstring."""
    x = as_tensor(x)
    check_statistics_pair("fused_batch_norm_act", mean, var)
    gamma, beta, mean, var = vectors_like(x, gamma, beta, mean, var)
    axis = check_batch_norm("fused_batch_norm_act", x, axis, dtype_rule=False, gamma=gamma,
                            beta=beta, mean=mean, var=var)
    act = checked_activation(activation, negative_slope, alpha)
    return FusedBatchNormAct.apply(x, gamma, beta, mean, var, activation=act, axis=axis, eps=eps)
