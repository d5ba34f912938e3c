"""Adaptive 2-D pooling: the window sizes follow from the output size, as in PyTorch.

Output position i of an axis of length n pooled to `out` reads input positions
start = floor(i * n / out) up to end = ceil((i + 1) * n / out) (exclusive): windows that cover
the axis, of lengths differing by at most one, overlapping where out does not divide n.

Average pooling is linear and acts on each axis separately: out = A_h @ x @ A_w^T, with A (out, n)
holding 1 / (end - start) over each window's row. Max pooling gathers, per window, the first
maximal element in row-major order (PyTorch's pick on the CPU): the windows padded to one length
by repeating their last index (a repeat comes after the original, so never wins a tie).
"""
import numpy

from ..dtypes import is_floating
from ..tensor import as_tensor
from .base import Op
from .indexing import GetItem, IndexAdd
from .linalg import matmul
from .opmath import in_float32


def adaptive_output_size(op, shape, output_size):
    """output_size (an int, or a pair of ints or None for "the input's size") as a pair."""
    if len(shape) != 4:
        raise ValueError(f"{op}: input must be 4-D (N, C, H, W), got shape {tuple(shape)}")
    sizes = (output_size,) * 2 if isinstance(output_size, int) or output_size is None \
        else tuple(output_size)
    sizes = tuple(n if s is None else s for s, n in zip(sizes, shape[2:])) \
        if len(sizes) == 2 else sizes
    if len(sizes) != 2 or not all(isinstance(s, int) and s >= 1 for s in sizes):
        raise ValueError(f"{op}: output_size must be an int >= 1, None or a pair of them, "
                         f"got {output_size!r}")
    return sizes


def window_bounds(n, out):
    """[(start, end)] of the `out` adaptive windows over an axis of length n."""
    return [(i * n // out, -(-(i + 1) * n // out)) for i in range(out)]


def _averaging_matrix(n, out, dtype):
    matrix = numpy.zeros((out, n), dtype=dtype)
    for i, (start, end) in enumerate(window_bounds(n, out)):
        matrix[i, start:end] = 1.0 / (end - start)
    return matrix


@in_float32
def adaptive_avg_pool2d(x, output_size):
    """Mean over adaptive windows of NCHW `x`: A_h @ x @ A_w^T (see the module doc)."""
    ho, wo = adaptive_output_size("adaptive_avg_pool2d", x.shape, output_size)
    if not is_floating(x.dtype):
        raise TypeError(f"adaptive_avg_pool2d: needs a floating-point input, got {x.dtype}")
    rows, cols = (as_tensor(_averaging_matrix(n, out, x.dtype), device=x.device)
                  for n, out in ((x.shape[2], ho), (x.shape[3], wo)))
    return matmul(matmul(rows, x), cols.T)


def _window_indices(xp, n, out):
    """(out, longest window) indices of each window, the shorter ones padded with their last."""
    bounds = window_bounds(n, out)
    longest = max(end - start for start, end in bounds)
    return xp.asarray([[min(start + k, end - 1) for k in range(longest)]
                       for start, end in bounds])


class AdaptiveMaxPool2d(Op):
    """max over each adaptive window, and where it is (h * W + w in its plane, int64);
    dx = g at the window's first maximal element (a scatter: IndexAdd).
    jvp: dy = dx at the window's first maximal element."""
    batching = "leading"

    @staticmethod
    def forward(ctx, x, size):
        xp, (n, c, h, w) = ctx.xp, x.shape
        rows, cols = _window_indices(xp, h, size[0]), _window_indices(xp, w, size[1])
        values = x[:, :, rows[:, :, None, None], cols[None, None]]   # (N, C, Ho, Kh, Wo, Kw)
        offset = values.transpose(0, 1, 2, 4, 3, 5).reshape(n, c, size[0], size[1], -1) \
            .argmax(axis=-1)                                           # row-major: i * Kw + j
        kw = cols.shape[1]
        picked_rows = rows[xp.arange(size[0])[:, None], offset // kw]
        picked_cols = cols[xp.arange(size[1]), offset % kw]
        indices = (picked_rows * w + picked_cols).astype(xp.int64)     # (N, C, Ho, Wo)
        ctx.index = (xp.arange(n)[:, None, None, None], xp.arange(c)[None, :, None, None],
                     indices)
        ctx.plane_shape, ctx.in_shape = (n, c, h * w), x.shape
        return x.reshape(ctx.plane_shape)[ctx.index], indices

    @staticmethod
    def backward(ctx, g, g_indices=None):
        plane = IndexAdd.apply(g, shape=ctx.plane_shape, index=ctx.index, gathers=True)
        return plane.reshape(ctx.in_shape)

    @staticmethod
    def jvp(ctx, dx):
        return GetItem.apply(dx.reshape(ctx.plane_shape), index=ctx.index, gathers=True), None


def adaptive_max_pool2d(x, output_size, return_indices=False):
    """Max over adaptive windows of NCHW `x` (see the module doc); with return_indices also
    each maximum's position h * W + w in its plane."""
    size = adaptive_output_size("adaptive_max_pool2d", x.shape, output_size)
    out, indices = AdaptiveMaxPool2d.apply(x, size=size)
    return (out, indices) if return_indices else out
