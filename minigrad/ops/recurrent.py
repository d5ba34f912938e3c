"""The time steps of an LSTM and a GRU, `lstm_step` and `gru_step`, two ways with the same
numbers: composed from primitives (a dozen small ops, so every derivative comes from theirs),
and fused into one op each (the hidden matmul, the gates and the new state in one pass over the
gate array, and a backward of the same shape). The recurrent layers (nn/rnn.py,
nn/rnn_cells.py) call `lstm_step` and `gru_step`, which run the fused op except where the
composed one is needed: forward mode and vmap (the ops have neither a jvp nor a batching rule),
autocast or mixed dtypes, and a tape being recorded (`autograd.record()`: the tour's listings
and ONNX export show the primitives); and a gradient that must be differentiable again
(create_graph) differentiates the composed step.
"""
import functools

from .. import autograd, forward_ad, grad_mode, vmap_levels
from ..tensor import Tensor
from .base import Op
from .elementwise import sigmoid, tanh
from .linalg import linear
from .rearrange import chunk


def _fused(*tensors):
    """Whether a step on these tensors runs the fused op (see above)."""
    dtypes = {t.dtype for t in tensors if t is not None}
    return not (len(dtypes) > 1 or forward_ad._state.levels or vmap_levels.state.dispatch
                is not None or grad_mode._state.autocast is not None
                or autograd.active_tape() is not None)


def lstm_step(xi, h, c, weight, bias=None):
    """(h', c'): one LSTM step from the input's projection xi (B, 4H), the state h, c and the
    hidden weight (4H, H) and bias (see LSTMStep)."""
    if _fused(xi, h, c, weight, bias):
        return LSTMStep.apply(xi, h, c, weight, bias)
    return composed_lstm_step(xi, h, c, weight, bias)


def composed_lstm_step(xi, h, c, weight, bias=None):
    i, f, g, o = chunk(xi + linear(h, weight, bias), 4, dim=-1)
    c = sigmoid(f) * c + sigmoid(i) * tanh(g)
    return sigmoid(o) * tanh(c), c


def gru_step(xi, h, weight, bias=None):
    """h': one GRU step from the input's projection xi (B, 3H), the state h and the hidden
    weight (3H, H) and bias (see GRUStep)."""
    if _fused(xi, h, weight, bias):
        return GRUStep.apply(xi, h, weight, bias)
    return composed_gru_step(xi, h, weight, bias)


def composed_gru_step(xi, h, weight, bias=None):
    x_r, x_z, x_n = chunk(xi, 3, dim=-1)
    h_r, h_z, h_n = chunk(linear(h, weight, bias), 3, dim=-1)
    n = tanh(x_n + sigmoid(x_r + h_r) * h_n)
    return n + sigmoid(x_z + h_z) * (h - n)


def _composed_backward(ctx, composed, grad_outputs):
    """The composed step differentiated: gradients that are differentiable themselves."""
    inputs = ctx.saved
    wanted = [t for t, need in zip(inputs, ctx.needs_input_grad, strict=True) if need]
    with autograd.enable_grad():
        outputs = composed(*inputs)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    pairs = [(y, g) for y, g in zip(outputs, grad_outputs, strict=True) if g is not None]
    grads = iter(autograd.grad([y for y, _ in pairs], wanted, [g for _, g in pairs],
                               create_graph=True, allow_unused=True))
    return tuple([next(grads) if need else None for need in ctx.needs_input_grad])


def _tensors(ctx, *arrays):
    return tuple([None if a is None else Tensor.from_array(a, ctx.backend) for a in arrays])


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
            return _composed_backward(ctx, composed_lstm_step, (dh_new, dc_new))
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
        return _tensors(ctx, dz if need_xi else None, dz @ weight if need_h else None,
                        e * f if need_c else None, dz.T @ h if need_w else None,
                        dz.sum(axis=0) if need_b else None)


class GRUStep(Op):
    """h' = gru_step(xi, h, W, b): a = h W^T + b; r, z = sigmoid of xi + a on the first two of
    the three column blocks, n = tanh(xi_n + r a_n); h' = n + z (h - n).
    backward: dn = dh' (1 - z) (1 - n^2); dr = dn a_n r(1-r); dz = dh' (h - n) z(1-z);
    dxi = [dr, dz, dn], da = [dr, dz, dn r]; dh = da W + dh' z, dW = da^T h, db = da summed
    over rows. (No jvp nor batching rule: forward mode and vmap run the composed step.)"""

    @classmethod
    def name(cls):
        return "gru_step"

    @staticmethod
    def forward(ctx, xi, h, weight, bias):
        xp, hidden = ctx.xp, h.shape[-1]
        a = h @ weight.T
        if bias is not None:
            a += bias
        rz = xi[..., :2 * hidden] + a[..., :2 * hidden]
        rz *= 0.5   # sigmoid(x) = tanh(x/2)/2 + 1/2
        xp.tanh(rz, out=rz)
        rz *= 0.5
        rz += 0.5
        r, z = rz[..., :hidden], rz[..., hidden:]
        n = r * a[..., 2 * hidden:]
        n += xi[..., 2 * hidden:]
        xp.tanh(n, out=n)
        ctx.save(xi, h, weight, bias)
        ctx.rz, ctx.n, ctx.a_n = rz, n, a[..., 2 * hidden:]
        return n + z * (h - n)

    @staticmethod
    def backward(ctx, dh_new):
        if autograd.is_grad_enabled():   # create_graph: differentiate the composed step
            return _composed_backward(ctx, composed_gru_step, (dh_new,))
        xp, n, a_n, hidden = ctx.xp, ctx.n, ctx.a_n, ctx.n.shape[-1]
        _, h, weight, _ = [None if t is None else t.array for t in ctx.saved]
        r, z = ctx.rz[..., :hidden], ctx.rz[..., hidden:]
        g = dh_new.array
        dn = g * (1 - z) * (1 - n * n)
        dr = dn * a_n * r * (1 - r)
        dz = g * (h - n) * z * (1 - z)
        da = xp.concatenate([dr, dz, dn * r], axis=-1)
        need_xi, need_h, need_w, need_b = ctx.needs_input_grad
        return _tensors(ctx, xp.concatenate([dr, dz, dn], axis=-1) if need_xi else None,
                        da @ weight + g * z if need_h else None,
                        da.T @ h if need_w else None, da.sum(axis=0) if need_b else None)
