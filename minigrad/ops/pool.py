"""2-D max and average pooling (NCHW), on the window view of window.py.

The windows are a stride-tricks view, so pooling reads the input in place: when the kernel
equals the stride and tiles the input, the view is exactly the reshape (N, C, H/k, k, W/k, k)
and the backward's scatter (Fold) is a reshape too; otherwise Fold adds per kernel offset.

Max pooling sends each output's gradient to one maximal element of its window: the first in
row-major window order, which is the element PyTorch picks on CPU. (Where PyTorch and this
rule could differ is only ties; among tied maxima both pick the first.) Padding reads as -inf,
so a padded position is never the maximum; return_indices gives that element's position as
PyTorch does, h * W + w within its (n, c) plane.

ceil_mode counts the last, partial window too, when it starts inside the input or the left
padding: Ho = ceil((H + 2p - d*(k - 1) - 1) / s) + 1, one less if window Ho - 1 would start
at or past H + p; the windows reach past the padding there, so the bottom/right is padded more.

Average pooling divides each window's sum by its count: kh*kw with count_include_pad (padding
counted, as in PyTorch's default), only the input positions without it; the positions past the
padding that ceil_mode adds never count; divisor_override replaces the count.
"""
from ..backends.select import keep_where
from .base import Op
from .elementwise import Keep
from .opmath import in_float32
from .tangents import linear
from .window import NO_DILATION, Fold, Unfold, output_size, pair, sliding_windows


def _pool_params(op, kernel_size, stride, padding, ceil_mode):
    kernel = pair(op, "kernel_size", kernel_size, 1)
    stride = kernel if stride is None else pair(op, "stride", stride, 1)
    padding = pair(op, "padding", padding, 0)
    if any(2 * p > k for p, k in zip(padding, kernel)):
        raise ValueError(f"{op}: padding {padding} must be at most half of kernel_size {kernel}")
    return dict(kernel=kernel, stride=stride, padding=padding, ceil_mode=bool(ceil_mode))


def pool_sides(op, shape, kernel, stride, padding, dilation, ceil_mode):
    """(before, after) padding per spatial axis; after grows so ceil_mode's last window fits."""
    output_size(op, shape, kernel, stride, padding, dilation)   # a clear error if none fits
    if not ceil_mode:
        return tuple((p, p) for p in padding)
    sides = []
    for n, k, s, p, d in zip(shape[2:], kernel, stride, padding, dilation):
        span = n + 2 * p - d * (k - 1) - 1
        out = -(-span // s) + 1
        if (out - 1) * s >= n + p:
            out -= 1
        sides.append((p, max(p, (out - 1) * s + d * (k - 1) + 1 - n - p)))
    return tuple(sides)


def _windows(ctx, op, x, kernel, stride, padding, ceil_mode, value, dilation=NO_DILATION):
    sides = pool_sides(op, x.shape, kernel, stride, padding, dilation, ceil_mode)
    ctx.in_shape, ctx.stride, ctx.padding, ctx.dilation = x.shape, stride, sides, dilation
    return sliding_windows(ctx.xp, x, kernel, stride, sides, value, dilation)


def _fold(ctx, windows):
    return Fold.apply(windows, in_shape=ctx.in_shape, stride=ctx.stride, padding=ctx.padding,
                      dilation=ctx.dilation)


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
    first, *rest = _offsets(mask)
    taken = mask[:, first[0], first[1]].copy()   # windows whose maximum is marked already
    for i, j in rest:
        hit = mask[:, i, j]
        xp.greater(hit, taken, out=hit)   # hit and not taken: a later tie loses
        taken |= hit
    return mask


def _flat_indices(xp, mask, in_shape, stride, sides, dilation):
    """h * W + w of each window's marked element, (N, C, Ho, Wo) int64."""
    c, kh, kw, ho, wo, n = mask.shape
    offset = mask.reshape(c, kh * kw, ho, wo, n).argmax(axis=1)   # row-major: i * kw + j
    (sh, sw), (dh, dw), ((top, _), (left, _)) = stride, dilation, sides
    rows = xp.arange(ho).reshape(ho, 1, 1) * sh + (offset // kw) * dh - top
    cols = xp.arange(wo).reshape(wo, 1) * sw + (offset % kw) * dw - left
    return (rows * in_shape[3] + cols).astype(xp.int64).transpose(3, 0, 1, 2)


class MaxPool2d(Op):
    """max over each window (and, with return_indices, where it is);
    dx = g at the window's first maximal element, 0 elsewhere.
    jvp: dy = dx at the window's first maximal element."""
    batching = "leading"

    @staticmethod
    def forward(ctx, x, kernel, stride, padding, ceil_mode=False, dilation=NO_DILATION,
                return_indices=False):
        windows = _windows(ctx, "max_pool2d", x, kernel, stride, padding, ceil_mode,
                           -float("inf"), dilation)
        out = window_max(ctx.xp, windows)
        mask = first_max_mask(ctx.xp, windows, out)
        ctx.keep = keep_where(ctx.xp, mask, x.dtype)
        if return_indices:
            return out.transpose(3, 0, 1, 2), _flat_indices(ctx.xp, mask, x.shape, stride,
                                                            ctx.padding, dilation)
        return out.transpose(3, 0, 1, 2)

    @staticmethod
    def backward(ctx, g, g_indices=None):
        # a select, as PyTorch's scatter: an inf or NaN in g reaches only the maximum
        return _fold(ctx, Keep.apply(_per_window(g), mask=ctx.keep))

    @staticmethod
    def jvp(ctx, dx):
        windows = Unfold.apply(dx, kernel=ctx.attrs["kernel"], stride=ctx.stride,
                               padding=ctx.padding, dilation=ctx.dilation)
        dy = Keep.apply(windows, mask=ctx.keep).sum(axis=(1, 2)).permute(3, 0, 1, 2)
        return (dy, None) if len(ctx.results) == 2 else dy


def _counts(n, k, s, before, out, count_include_pad):
    """Per output position along one axis, how many of its window's positions count."""
    counts = []
    for y in range(out):
        start, end = y * s - before, min(y * s - before + k, n + before)
        counts.append(end - start if count_include_pad else min(end, n) - max(start, 0))
    return counts


def _divisor(ctx, x, kernel, stride, count_include_pad, divisor_override, out_shape):
    """What each window's sum is divided by: a number, or (1, Ho, Wo, 1) where counts differ."""
    if divisor_override is not None:
        return divisor_override
    (ho, wo), (top, _), (left, _) = out_shape, *ctx.padding
    rows = _counts(x.shape[2], kernel[0], stride[0], top, ho, count_include_pad)
    cols = _counts(x.shape[3], kernel[1], stride[1], left, wo, count_include_pad)
    if len(set(rows)) == 1 and len(set(cols)) == 1:
        return rows[0] * cols[0]
    counts = ctx.xp.asarray(rows, dtype=x.dtype)[:, None] * ctx.xp.asarray(cols, dtype=x.dtype)
    return counts.reshape(1, ho, wo, 1)


class AvgPool2d(Op):
    """sum over each window / its count (see the module doc);
    dx = g / count at every element of the window.
    jvp: dy = avg_pool2d(dx)."""
    batching = "leading"

    @staticmethod
    def forward(ctx, x, kernel, stride, padding, ceil_mode=False, count_include_pad=True,
                divisor_override=None):
        windows = _windows(ctx, "avg_pool2d", x, kernel, stride, padding, ceil_mode, 0)
        ctx.window_shape = windows.shape
        ctx.divisor = _divisor(ctx, x, kernel, stride, count_include_pad, divisor_override,
                               windows.shape[3:5])
        return (windows.sum(axis=(1, 2)) / ctx.divisor).transpose(3, 0, 1, 2)

    @staticmethod
    def backward(ctx, g):
        divisor = ctx.divisor
        if not isinstance(divisor, (int, float)):   # (1, Ho, Wo, 1): per window, in its layout
            divisor = divisor.reshape((1, 1) + divisor.shape)
        spread = (_per_window(g) * (1.0 / divisor)).broadcast_to(ctx.window_shape)
        return _fold(ctx, spread)

    jvp = staticmethod(linear)


def _check_divisor(divisor_override):
    if divisor_override is not None and (not isinstance(divisor_override, int)
                                         or divisor_override == 0):
        raise ValueError(f"avg_pool2d: divisor_override must be a nonzero int or None, got "
                         f"{divisor_override!r}")
    return divisor_override


def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """Max over kh x kw windows of NCHW `x` (stride defaults to kernel_size; -inf padding);
    with return_indices also each maximum's position h * W + w in its plane."""
    params = _pool_params("max_pool2d", kernel_size, stride, padding, ceil_mode)
    return MaxPool2d.apply(x, **params, dilation=pair("max_pool2d", "dilation", dilation, 1),
                           return_indices=bool(return_indices))


@in_float32
def avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """Mean over kh x kw windows of NCHW `x` (stride defaults to kernel_size; zero padding
    counted in the mean unless count_include_pad=False; divisor_override replaces the count)."""
    return AvgPool2d.apply(x, **_pool_params("avg_pool2d", kernel_size, stride, padding,
                                             ceil_mode),
                           count_include_pad=bool(count_include_pad),
                           divisor_override=_check_divisor(divisor_override))
