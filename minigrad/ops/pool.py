"""2-D max and average pooling (NCHW), on the window view of window.py.

The windows are a stride-tricks view, so pooling reads the input in place: when the kernel
equals the stride and tiles the input, the view is exactly the reshape (N, C, H/k, k, W/k, k)
and the backward's scatter (Fold) is a reshape too; otherwise Fold adds per kernel offset.

Max pooling sends each output's gradient to one maximal element of its window: the first in
row-major window order, which is the element PyTorch picks on CPU. (Where PyTorch and this
rule could differ is only ties; among tied maxima both pick the first.) Padding reads as -inf,
so a padded position is never the maximum. Average pooling divides by kh*kw, padding included
(PyTorch's count_include_pad=True).
"""
from .base import Op
from .window import Fold, output_size, pair, sliding_windows


def _pool_params(op, kernel_size, stride, padding):
    kernel = pair(op, "kernel_size", kernel_size, 1)
    stride = kernel if stride is None else pair(op, "stride", stride, 1)
    padding = pair(op, "padding", padding, 0)
    if any(2 * p > k for p, k in zip(padding, kernel)):
        raise ValueError(f"{op}: padding {padding} must be at most half of kernel_size {kernel}")
    return dict(kernel=kernel, stride=stride, padding=padding)


def _windows(ctx, op, x, kernel, stride, padding, value):
    output_size(op, x.shape, kernel, stride, padding)
    ctx.in_shape, ctx.stride, ctx.padding = x.shape, stride, padding
    return sliding_windows(ctx.xp, x, kernel, stride, padding, value)


def _per_window(g):
    """An output gradient (N, C, Ho, Wo) viewed as (C, 1, 1, Ho, Wo, N), to broadcast over
    the kernel axes of the window layout."""
    n, c, ho, wo = g.shape
    return g.permute(1, 2, 3, 0).reshape((c, 1, 1, ho, wo, n))


def _offsets(windows):
    """The kernel offsets (i, j) of a window array, in row-major window order."""
    return [(i, j) for i in range(windows.shape[1]) for j in range(windows.shape[2])]


def window_max(xp, windows):
    """The maximum of every window, (C, Ho, Wo, N): elementwise maxima of the kh*kw offset
    slices, each a long strided run (three times faster than a reduction over axes (1, 2))."""
    first, *rest = [windows[:, i, j] for i, j in _offsets(windows)]
    if not rest:
        return first.copy()
    out = xp.maximum(first, rest[0])
    for part in rest[1:]:
        xp.maximum(out, part, out=out)
    return out


def first_max_mask(xp, windows, out):
    """Boolean mask, in window layout, of the first maximal element of every window."""
    mask = windows == out[:, None, None]
    taken = xp.zeros(out.shape, dtype=bool)
    for i, j in _offsets(mask):
        hit = mask[:, i, j]
        hit &= ~taken            # a later tie loses to an earlier maximum
        taken |= hit
    return mask


class MaxPool2d(Op):
    """max over each window;  dx = g at the window's first maximal element, 0 elsewhere."""

    @staticmethod
    def forward(ctx, x, kernel, stride, padding):
        windows = _windows(ctx, "max_pool2d", x, kernel, stride, padding, value=-float("inf"))
        out = window_max(ctx.xp, windows)
        ctx.save(first_max_mask(ctx.xp, windows, out))
        return out.transpose(3, 0, 1, 2)

    @staticmethod
    def backward(ctx, g):
        (mask,) = ctx.saved
        return Fold.apply(_per_window(g) * mask, in_shape=ctx.in_shape, stride=ctx.stride,
                          padding=ctx.padding)


class AvgPool2d(Op):
    """mean over each window (padding counts);  dx = g / (kh*kw) at every element of the window."""

    @staticmethod
    def forward(ctx, x, kernel, stride, padding):
        windows = _windows(ctx, "avg_pool2d", x, kernel, stride, padding, value=0)
        ctx.window_shape = windows.shape
        return windows.mean(axis=(1, 2)).transpose(3, 0, 1, 2)

    @staticmethod
    def backward(ctx, g):
        count = ctx.window_shape[1] * ctx.window_shape[2]
        spread = (_per_window(g) * (1.0 / count)).broadcast_to(ctx.window_shape)
        return Fold.apply(spread, in_shape=ctx.in_shape, stride=ctx.stride, padding=ctx.padding)


def max_pool2d(x, kernel_size, stride=None, padding=0):
    """Max over kh x kw windows of NCHW `x` (stride defaults to kernel_size; -inf padding)."""
    return MaxPool2d.apply(x, **_pool_params("max_pool2d", kernel_size, stride, padding))


def avg_pool2d(x, kernel_size, stride=None, padding=0):
    """Mean over kh x kw windows of NCHW `x` (stride defaults to kernel_size; zero padding
    counted in the mean)."""
    return AvgPool2d.apply(x, **_pool_params("avg_pool2d", kernel_size, stride, padding))
