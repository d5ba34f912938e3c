"""2-D convolution (cross-correlation, as in PyTorch) by im2col and one matrix product.

With the windows of the padded input copied into the im2col matrix
cols (C*kh*kw, Ho*Wo*N) (layout in window.py) and the weight viewed as W (O, C*kh*kw):

    out = W @ cols  (+ bias per output channel)          -> (O, Ho, Wo, N), NCHW by a transpose
    dW  = g @ cols^T                                      (g viewed as (O, Ho*Wo*N))
    dx  = col2im(W^T @ g)                                 (Fold, whose backward is im2col)
    db  = sum of g over N, Ho, Wo

Speed. When the contraction C*kh*kw is short (a first layer: 25 for 1 x 5 x 5), one GEMM over
all Ho*Wo*N columns streams a matrix far larger than the cache and OpenBLAS runs it at a
fraction of its speed; the products are then done per output row (a batched matmul over Ho
groups of Wo*N columns, each small enough for the small-matrix kernels). Either way the products
are written (with matmul's out=) into one (O, Ho, Wo, N) array, so the NCHW result is a
transposed view, not a copy, and the layers after it (batch norm, ReLU, pooling, the next im2col)
work on that channels-first layout without reordering it.
"""
from .. import autograd
from .base import Op
from .window import Fold, Unfold, output_size, pair, sliding_windows


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


# Below this contraction length the products run per output row (see the module doc).
SHORT_CONTRACTION = 100


def _grouped(matrix, groups):
    """A (rows, Ho*Wo*N) matrix as (groups, rows, Ho*Wo*N / groups): column blocks of whole
    output rows, a view (array or tensor)."""
    return matrix.reshape(matrix.shape[0], groups, -1).swapaxes(0, 1)


class Conv2d(Op):
    """conv2d(x (N, C, H, W), weight (O, C, kh, kw), bias (O,) optional) -> (N, O, Ho, Wo)."""

    @staticmethod
    def forward(ctx, x, weight, bias=None, stride=(1, 1), padding=(0, 0)):
        _check(x, weight, bias)
        (n, o), kernel = (x.shape[0], weight.shape[0]), weight.shape[2:]
        ho, wo = output_size("conv2d", x.shape, kernel, stride, padding)
        cols = sliding_windows(ctx.xp, x, kernel, stride, padding)
        cols = cols.reshape(-1, ho * wo * n)   # the one im2col copy
        groups = ho if cols.shape[0] < SHORT_CONTRACTION else 1
        out = ctx.xp.empty((o, ho * wo * n), dtype=ctx.xp.result_type(weight.dtype, cols.dtype))
        ctx.xp.matmul(weight.reshape(o, -1), _grouped(cols, groups), out=_grouped(out, groups))
        if bias is not None:
            out += bias.reshape(o, 1)
        ctx.kernel, ctx.stride, ctx.padding, ctx.groups = kernel, stride, padding, groups
        ctx.save(x, weight, cols)
        return out.reshape(o, ho, wo, n).transpose(3, 0, 1, 2)   # (N, O, Ho, Wo), a view

    @staticmethod
    def backward(ctx, g):
        x, weight, cols = ctx.saved
        (n, o, ho, wo), groups = g.shape, ctx.groups
        # g as (groups, O, columns) like the forward's product: free when g kept that layout
        g3 = _grouped(g.permute(1, 2, 3, 0).reshape((o, -1)), groups)
        needs = ctx.needs_input_grad
        dx = dw = db = None
        if needs[0]:
            dcols = weight.reshape((o, -1)).T @ g3                      # (groups, K, columns)
            dcols = dcols.swapaxes(0, 1).reshape(
                x.shape[1:2] + ctx.kernel + (ho, wo) + x.shape[:1])
            dx = Fold.apply(dcols, in_shape=x.shape, stride=ctx.stride, padding=ctx.padding)
        if needs[1]:
            if autograd.is_grad_enabled() and x.requires_grad:
                # create_graph: dW must depend on x through the graph, so im2col is redone as an
                # op instead of reusing the constant matrix saved by forward.
                cols = Unfold.apply(x, kernel=ctx.kernel, stride=ctx.stride,
                                    padding=ctx.padding).reshape(cols.shape)
            dw_t = (_grouped(cols, groups) @ g3.swapaxes(1, 2)).sum(axis=0)   # (K, O)
            dw = dw_t.T.reshape(weight.shape)
        if len(needs) == 3 and needs[2]:
            db = g.sum(axis=(0, 2, 3))
        return (dx, dw) if len(needs) == 2 else (dx, dw, db)


def conv2d(x, weight, bias=None, stride=1, padding=0):
    """2-D cross-correlation of NCHW `x` with `weight` (out, in, kh, kw), as in PyTorch;
    `stride` and `padding` (zeros) are ints or (height, width) pairs."""
    stride, padding = pair("conv2d", "stride", stride, 1), pair("conv2d", "padding", padding, 0)
    inputs = (x, weight) if bias is None else (x, weight, bias)
    return Conv2d.apply(*inputs, stride=stride, padding=padding)
