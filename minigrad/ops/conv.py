"""2-D convolution (cross-correlation, as in PyTorch) by im2col and matrix products.

With the windows of the padded input copied into the im2col matrix
cols (C*kh*kw, Ho*Wo*N) (layout in window.py) and the weight viewed as W (O, C*kh*kw):

    out = W @ cols  (+ bias per output channel)          -> (O, Ho, Wo, N), NCHW by a transpose
    dW  = g @ cols^T                                      (g viewed as (O, Ho*Wo*N))
    dx  = col2im(W^T @ g)                                 (Fold, whose backward is im2col)
    db  = sum of g over N, Ho, Wo

Speed on the CPU comes from memory traffic. The im2col matrix is the largest array of a small
CNN (5 MB for LeNet's first layer at batch 64), and writing it out and reading it back from
memory costs more than the products. So cols is never built whole: forward copies the windows
of a few output rows at a time into a reused buffer that stays in the L2 cache, multiplies, and
moves on; backward recomputes the blocks for dW the same way instead of keeping cols from
forward. The products land (with matmul's out=) in one (O, Ho, Wo, N) array, so the NCHW result
is a transposed view, not a copy, and the layers after it (batch norm, ReLU, pooling, the next
im2col) work on that channels-first layout without reordering it.

When the contraction C*kh*kw is short (a first layer: 25 for 1 x 5 x 5), OpenBLAS runs a GEMM
over many columns at a fraction of its speed; such products run per output row (a batched
matmul over groups of Wo*N columns). On the GPU there are no blocks: one product over all
columns.
"""
import threading

from .. import autograd
from ..tensor import Tensor
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
# Values per im2col block on the CPU (512 kB of float32): the block and its products stay in L2.
BLOCK_ELEMENTS = 1 << 17
_local = threading.local()   # one reused block buffer per thread


def _grouped(matrix, groups):
    """A (rows, Ho*Wo*N) matrix as (groups, rows, Ho*Wo*N / groups): column blocks of whole
    output rows, a view (array or tensor)."""
    return matrix.reshape(matrix.shape[0], groups, -1).swapaxes(0, 1)


def _im2col_blocks(backend, windows):
    """The im2col matrix in blocks of whole output rows: yields (y0, y1, cols) with cols the
    (C*kh*kw, y1 - y0, Wo*N) columns of output rows y0..y1-1, copied from the window view into
    a buffer that the next block reuses (on the CPU; on the GPU one block of all rows)."""
    c, kh, kw, ho, wo, n = windows.shape
    per_row = c * kh * kw * wo * n
    step = max(1, min(ho, BLOCK_ELEMENTS // per_row)) if backend.device == "cpu" else ho
    size = step * per_row
    buffer = getattr(_local, "buffer", None)
    if buffer is None or buffer.dtype != windows.dtype or buffer.size < size \
            or not isinstance(buffer, backend.xp.ndarray):
        buffer = backend.xp.empty(size, windows.dtype)
        if step < ho:   # keep only block-sized buffers
            _local.buffer = buffer
    for y0 in range(0, ho, step):
        y1 = min(y0 + step, ho)
        cols = buffer[:(y1 - y0) * per_row].reshape(c, kh, kw, y1 - y0, wo, n)
        cols[...] = windows[:, :, :, y0:y1]   # the im2col copy of this block
        yield y0, y1, cols.reshape(c * kh * kw, y1 - y0, wo * n)


class Conv2d(Op):
    """conv2d(x (N, C, H, W), weight (O, C, kh, kw), bias (O,) optional) -> (N, O, Ho, Wo)."""

    @staticmethod
    def forward(ctx, x, weight, bias=None, stride=(1, 1), padding=(0, 0)):
        _check(x, weight, bias)
        xp, (n, o), kernel = ctx.xp, (x.shape[0], weight.shape[0]), weight.shape[2:]
        ho, wo = output_size("conv2d", x.shape, kernel, stride, padding)
        windows = sliding_windows(xp, x, kernel, stride, padding)
        out = xp.empty((o, ho, wo * n), dtype=xp.result_type(weight.dtype, x.dtype))
        flat, w2 = out.reshape(o, -1), weight.reshape(o, -1)
        for y0, y1, cols in _im2col_blocks(ctx.backend, windows):
            if ctx.backend.device != "cpu":   # one block: one product over all columns
                flat[...] = w2 @ cols.reshape(cols.shape[0], -1)
            elif cols.shape[0] < SHORT_CONTRACTION:   # per output row: (rows, O, Wo*N)
                xp.matmul(w2, cols.swapaxes(0, 1), out=out[:, y0:y1].swapaxes(0, 1))
            else:
                xp.matmul(w2, cols.reshape(cols.shape[0], -1), out=flat[:, y0 * wo * n:y1 * wo * n])
        if bias is not None:
            out += bias.reshape(o, 1, 1)
        ctx.kernel, ctx.stride, ctx.padding = kernel, stride, padding
        ctx.save(x, weight)
        return out.reshape(o, ho, wo, n).transpose(3, 0, 1, 2)   # (N, O, Ho, Wo), a view

    @staticmethod
    def backward(ctx, g):
        x, weight = ctx.saved
        n, o, ho, wo = g.shape
        contraction = weight.shape[1] * weight.shape[2] * weight.shape[3]
        groups = ho if contraction < SHORT_CONTRACTION else 1
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
            if autograd.is_grad_enabled():
                # create_graph: dW must depend on x and g through the graph, so im2col is an op
                cols = Unfold.apply(x, kernel=ctx.kernel, stride=ctx.stride,
                                    padding=ctx.padding).reshape((contraction, -1))
                dw_t = (_grouped(cols, groups) @ g3.swapaxes(1, 2)).sum(axis=0)   # (K, O)
                dw = dw_t.T.reshape(weight.shape)
            else:
                dw = Tensor.from_array(_weight_grad(ctx, x.data, g.data, weight.data), g.backend)
        if len(needs) == 3 and needs[2]:
            db = g.sum(axis=(0, 2, 3))
        return (dx, dw) if len(needs) == 2 else (dx, dw, db)


def _weight_grad(ctx, x, g, weight):
    """dW = g @ cols^T as array code, summed over im2col blocks recomputed from x (a constant:
    used when the gradient itself need not be differentiable); `weight` is an array."""
    xp, (n, o, ho, wo) = ctx.xp, g.shape
    g3 = g.transpose(1, 2, 3, 0).reshape(o, ho, wo * n)   # a view when g has the conv's layout
    dw_t = xp.zeros((weight[0].size, o), dtype=xp.result_type(x.dtype, g.dtype))
    windows = sliding_windows(xp, x, ctx.kernel, ctx.stride, ctx.padding)
    for y0, y1, cols in _im2col_blocks(ctx.backend, windows):
        dw_t += cols.reshape(cols.shape[0], -1) @ g3[:, y0:y1].reshape(o, -1).T
    return dw_t.T.reshape(weight.shape).astype(weight.dtype, copy=False)


def conv2d(x, weight, bias=None, stride=1, padding=0):
    """2-D cross-correlation of NCHW `x` with `weight` (out, in, kh, kw), as in PyTorch;
    `stride` and `padding` (zeros) are ints or (height, width) pairs."""
    stride, padding = pair("conv2d", "stride", stride, 1), pair("conv2d", "padding", padding, 0)
    inputs = (x, weight) if bias is None else (x, weight, bias)
    return Conv2d.apply(*inputs, stride=stride, padding=padding)
