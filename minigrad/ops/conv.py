"""2-D convolution (cross-correlation, as in PyTorch) by im2col and matrix products.

With cols (C*kh*kw, Ho*Wo*N) the im2col matrix of the padded input (the windows `unfold(x)`,
layout in window.py), the weight viewed as W (O, C*kh*kw) and g the output gradient viewed as
(O, Ho*Wo*N):

    out = W @ cols  (+ bias per output channel)          -> (O, Ho, Wo, N), NCHW by a transpose
    dW  = g @ cols^T
    dx  = fold(W^T @ g)                                   (col2im, the adjoint of unfold)
    db  = sum of g over N, Ho, Wo

The products run in the backend's "conv2d" kernel (on the CPU it builds cols in cache-sized
blocks: backends/numpy_conv.py). The result lands in one (O, Ho, Wo, N) array, so the NCHW output
is a transposed view, not a copy, and the layers after it (batch norm, ReLU, pooling, the next
im2col) work on that channels-first layout without reordering it.
"""
from .. import autograd
from ..tensor import Tensor
from ._promotion import check_same_dtype
from .base import Op
from .window import Fold, Unfold, fold_windows, output_size, pair, sliding_windows


def _check(x, weight, bias):
    if weight.ndim != 4:
        raise ValueError(f"conv2d: weight must be 4-D (out_channels, in_channels, kh, kw), got "
                         f"shape {weight.shape}")
    if x.ndim != 4 or x.shape[1] != weight.shape[1]:
        raise ValueError(f"conv2d: input of shape {x.shape} does not fit weight of shape "
                         f"{weight.shape}: expected (N, {weight.shape[1]}, H, W)")
    if bias is not None and bias.shape != weight.shape[:1]:
        raise ValueError(f"conv2d: bias must have shape ({weight.shape[0]},) for weight of "
                         f"shape {weight.shape}, got {bias.shape}")


class Conv2d(Op):
    """conv2d(x (N, C, H, W), weight (O, C, kh, kw), bias (O,) or None) -> (N, O, Ho, Wo);
    out = W @ unfold(x) + b,  dW = g @ cols^T,  dx = fold(W^T @ g),  db = sum(g)."""

    @staticmethod
    def forward(ctx, x, weight, bias, *, stride, padding):
        _check(x, weight, bias)
        ctx.kernel, ctx.stride, ctx.padding = weight.shape[2:], stride, padding
        output_size("conv2d", x.shape, ctx.kernel, stride, padding)   # a clear error if none
        windows = sliding_windows(ctx.xp, x, ctx.kernel, stride, padding)   # unfold(x), a view
        out = ctx.backend.kernel("conv2d").forward(weight, windows)   # W @ cols: (O, Ho, Wo, N)
        if bias is not None:
            out += bias.reshape(-1, 1, 1, 1)
        ctx.save(x, weight)
        return out.transpose(3, 0, 1, 2)   # (N, O, Ho, Wo), a view

    @staticmethod
    def backward(ctx, g):
        x, weight = ctx.saved
        need_x, need_w, need_b = ctx.needs_input_grad
        db = g.sum(axis=(0, 2, 3)) if need_b else None
        if autograd.is_grad_enabled():   # create_graph: the same formulas as differentiable ops
            return Conv2d._graph_backward(ctx, g, x, weight, need_x, need_w) + (db,)
        xp, kernel = ctx.xp, ctx.backend.kernel("conv2d")
        g_cols = g.data.transpose(1, 2, 3, 0)   # (O, Ho, Wo, N): free when g kept the layout
        dx = dw = None
        if need_x:
            dwindows = kernel.input_grad(weight.data, g_cols)   # W^T @ g
            dx = fold_windows(xp, dwindows, x.shape, ctx.stride, ctx.padding)
        if need_w:
            windows = sliding_windows(xp, x.data, ctx.kernel, ctx.stride, ctx.padding)
            dw = kernel.weight_grad(g_cols, windows, weight.dtype)   # g @ cols^T
        return _constant(dx, g), _constant(dw, g), db

    @staticmethod
    def _graph_backward(ctx, g, x, weight, need_x, need_w):
        """(dx, dW) written with ops, so they depend on x, weight and g through the graph."""
        (n, o, ho, wo), contraction = g.shape, weight.numel() // weight.shape[0]
        g2 = g.permute(1, 2, 3, 0).reshape((o, -1))   # (O, Ho*Wo*N)
        dx = dw = None
        if need_x:
            dcols = (weight.reshape((o, contraction)).T @ g2).reshape(
                weight.shape[1:] + (ho, wo, n))
            dx = Fold.apply(dcols, in_shape=x.shape, stride=ctx.stride, padding=ctx.padding)
        if need_w:
            cols = Unfold.apply(x, kernel=ctx.kernel, stride=ctx.stride, padding=ctx.padding)
            dw = (g2 @ cols.reshape((contraction, -1)).T).reshape(weight.shape)
        return dx, dw


def _constant(array, like):
    return None if array is None else Tensor.from_array(array, like.backend)


def conv2d(x, weight, bias=None, stride=1, padding=0):
    """2-D cross-correlation of NCHW `x` with `weight` (out, in, kh, kw), as in PyTorch;
    `stride` and `padding` (zeros) are ints or (height, width) pairs."""
    stride, padding = pair("conv2d", "stride", stride, 1), pair("conv2d", "padding", padding, 0)
    check_same_dtype("conv2d", ("input", "weight", "bias"), (x, weight, bias))
    op = EmptyBatchConv2d if x.shape[0] == 0 else Conv2d
    return op.apply(x, weight, bias, stride=stride, padding=padding)


class EmptyBatchConv2d(Op):
    """conv2d of an empty batch (N = 0), as in PyTorch: a (0, O, Ho, Wo) output;
    dx is empty, dweight = 0 (a sum of no products), dbias = g summed, also 0."""

    @staticmethod
    def forward(ctx, x, weight, bias=None, stride=(1, 1), padding=(0, 0)):
        _check(x, weight, bias)
        ho, wo = output_size("conv2d", x.shape, weight.shape[2:], stride, padding)
        ctx.x_shape, ctx.weight_shape = x.shape, weight.shape
        return ctx.xp.zeros((0, weight.shape[0], ho, wo), dtype=x.dtype)

    @staticmethod
    def backward(ctx, g):
        xp, backend = ctx.xp, ctx.backend
        dx = Tensor.from_array(xp.zeros(ctx.x_shape, dtype=g.dtype), backend)
        dw = Tensor.from_array(xp.zeros(ctx.weight_shape, dtype=g.dtype), backend)
        return dx, dw, (g.sum(axis=(0, 2, 3)) if ctx.needs_input_grad[2] else None)
