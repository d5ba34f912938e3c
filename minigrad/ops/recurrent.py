"""An LSTM's time step, `lstm_step`, two ways with the same numbers: composed from primitives
(a dozen small ops, so every derivative comes from theirs), and fused into one op (the hidden
matmul, the four gates and the new state in one pass over the gate array, and a backward of the
same shape). The recurrent layers (nn/rnn.py, nn/rnn_cells.py) call `lstm_step`, which runs the
fused op except where the composed one is needed: forward mode and vmap (the op has neither a
jvp nor a batching rule), autocast or mixed dtypes; and a gradient that must be differentiable
again (create_graph) differentiates the composed step.
"""
import functools

from .. import autograd, forward_ad, grad_mode, vmap_levels
from ..tensor import Tensor
from .base import Op
from .elementwise import sigmoid, tanh
from .linalg import linear
from .rearrange import chunk


def lstm_step(xi, h, c, weight, bias=None):
    """(h', c'): one LSTM step from the input's projection xi (B, 4H), the state h, c and the
    hidden weight (4H, H) and bias (see LSTMStep)."""
    dtypes = {t.dtype for t in (xi, h, c, weight, bias) if t is not None}
    if (len(dtypes) > 1 or forward_ad._state.levels or grad_mode._state.autocast is not None
            or vmap_levels.state.dispatch is not None):
        return composed_lstm_step(xi, h, c, weight, bias)
    return LSTMStep.apply(xi, h, c, weight, bias)


def composed_lstm_step(xi, h, c, weight, bias=None):
    i, f, g, o = chunk(xi + linear(h, weight, bias), 4, dim=-1)
    c = sigmoid(f) * c + sigmoid(i) * tanh(g)
    return sigmoid(o) * tanh(c), c


@functools.lru_cache(maxsize=64)
def _gate_scales(xp, hidden, dtype):
    """(scale, shift) over the 4H gate columns, blocks i, f, g, o: sigmoid(z) = tanh(z/2)/2 + 1/2
    on i, f, o (which never overflows) and tanh(z) on g, so all four are tanh(z s) s + shift.
    (Made once per size: every step of every sequence reads them.)"""
    scale = xp.full(4 * hidden, 0.5, dtype=dtype)
    scale[2 * hidden:3 * hidden] = 1
    return scale, 0.5 * (scale == 0.5).astype(dtype)


class LSTMStep(Op):
    """(h', c') = lstm_step(xi, h, c, W, b): z = xi + h W^T + b, i, f, g, o = sigmoid, sigmoid,
    tanh, sigmoid of z's four column blocks; c' = f c + i g, h' = o tanh(c').
    backward: e = dc' + dh' o (1 - tanh(c')^2); dz = [e g i(1-i), e c f(1-f), e i (1-g^2),
    dh' tanh(c') o(1-o)]; dxi = dz, dh = dz W, dc = e f, dW = dz^T h, db = dz summed over rows.
    (No jvp nor batching rule: forward mode and vmap run the composed step.)"""

    @classmethod
    def name(cls):
        return "lstm_step"

    @staticmethod
    def forward(ctx, xi, h, c, weight, bias):
        xp, hidden = ctx.xp, c.shape[-1]
        z = xp.matmul(h, weight.T)
        z += xi
        if bias is not None:
            z += bias
        scale, shift = _gate_scales(xp, hidden, z.dtype)
        z *= scale
        xp.tanh(z, out=z)
        z *= scale
        z += shift   # z now holds the gates i, f, g, o
        i, f, g, o = (z[..., k * hidden:(k + 1) * hidden] for k in range(4))
        c_new = f * c
        c_new += i * g
        tanh_c = xp.tanh(c_new)
        ctx.save(xi, h, c, weight, bias)
        ctx.gates, ctx.tanh_c = z, tanh_c
        return o * tanh_c, c_new

    @staticmethod
    def backward(ctx, dh_new, dc_new):
        if autograd.is_grad_enabled():   # create_graph: differentiate the composed step
            return LSTMStep._composed_backward(ctx, dh_new, dc_new)
        xp, z, tanh_c = ctx.xp, ctx.gates, ctx.tanh_c
        _, h, c, weight, _ = [None if t is None else t.array for t in ctx.saved]
        hidden = c.shape[-1]
        i, f, g, o = (z[..., k * hidden:(k + 1) * hidden] for k in range(4))
        dh_new = xp.zeros_like(tanh_c) if dh_new is None else dh_new.array
        e = dh_new * o * (1 - tanh_c * tanh_c)
        if dc_new is not None:
            e += dc_new.array
        dz = xp.concatenate([e * g * i * (1 - i), e * c * f * (1 - f), e * i * (1 - g * g),
                             dh_new * tanh_c * o * (1 - o)], axis=-1)
        need_xi, need_h, need_c, need_w, need_b = ctx.needs_input_grad
        grads = (dz if need_xi else None, dz @ weight if need_h else None,
                 e * f if need_c else None, dz.T @ h if need_w else None,
                 dz.sum(axis=0) if need_b else None)
        return tuple([None if a is None else Tensor.from_array(a, ctx.backend) for a in grads])

    @staticmethod
    def _composed_backward(ctx, dh_new, dc_new):
        """The composed step differentiated: gradients that are differentiable themselves."""
        inputs = ctx.saved
        wanted = [t for t, need in zip(inputs, ctx.needs_input_grad, strict=True) if need]
        with autograd.enable_grad():
            outputs = composed_lstm_step(*inputs)
        pairs = [(y, g) for y, g in zip(outputs, (dh_new, dc_new), strict=True) if g is not None]
        grads = iter(autograd.grad([y for y, _ in pairs], wanted, [g for _, g in pairs],
                                   create_graph=True, allow_unused=True))
        return tuple([next(grads) if need else None for need in ctx.needs_input_grad])
