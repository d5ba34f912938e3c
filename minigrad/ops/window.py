"""Sliding windows over the spatial axes of NCHW arrays: im2col (`Unfold`) and its adjoint
col2im (`Fold`), shared by conv2d, its transpose and the pooling ops.

Window layout. The windows of x (N, C, H, W) padded by (ph, pw), with kernel (kh, kw), stride
(sh, sw) and dilation (dh, dw), form an array of shape (C, kh, kw, Ho, Wo, N) with

    windows[c, i, j, y, x, n] = padded[n, c, y*sh + i*dh, x*sw + j*dw],
    Ho = (H + 2 ph - dh*(kh - 1) - 1) // sh + 1,   Wo likewise.

A padding entry may also be a (before, after) pair (asymmetric padding: pooling's ceil_mode).
The batch axis comes last: the padded input is kept as a (C, H, W, N) array, so a window
row (fixed c, i, j, y) is one contiguous run of Wo*N numbers. Copying the windows into the
im2col matrix (C*kh*kw, Ho*Wo*N) and adding them back (col2im) then move long runs instead
of Wo-long snippets, and conv2d's matmul result (O, Ho*Wo*N) is NCHW after one free transpose.
"""
from .base import Op
from .batch_axes import merged, split_leading
from .errors import ShapeError
from .join import constant_pad, interior
from .tangents import linear

NO_DILATION = (1, 1)



def ntuple(op, name, value, n, minimum):
    """An int or a sequence of n ints as an n-tuple, each at least `minimum`: a TypeError for
    anything but ints (2.0 and True included), a ValueError for the wrong count or too small a
    value."""
    values = tuple(value) if isinstance(value, (tuple, list)) else (value,) * n
    form = "a pair of them" if n == 2 else f"a tuple of {n}"
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        ints = "a pair of ints" if n == 2 else f"a tuple of {n} ints"
        raise TypeError(f"{op}: {name} must be an int or {ints}, got {value!r}")
    if len(values) != n or not all(v >= minimum for v in values):
        raise ValueError(f"{op}: {name} must be an int >= {minimum} or {form}, got {value!r}")
    return values


def pair(op, name, value, minimum):
    """An int or a pair of ints as a pair, each at least `minimum`."""
    return ntuple(op, name, value, 2, minimum)


def sides(padding):
    """Per-axis padding as (before, after) pairs: an int entry pads both sides alike."""
    return tuple((p, p) if isinstance(p, int) else tuple(p) for p in padding)


def output_size(op, shape, kernel, stride, padding, dilation=NO_DILATION):
    """(Ho, Wo) of the windows of an NCHW `shape`; an error naming `op` when none fits."""
    if len(shape) != 4:
        raise ShapeError(f"{op}: input must be 4-D (N, C, H, W), got shape {tuple(shape)}")
    sizes = tuple((n + before + after - d * (k - 1) - 1) // s + 1 for n, k, s, (before, after), d
                  in zip(shape[2:], kernel, stride, sides(padding), dilation))
    if min(sizes) < 1:
        extent = "" if dilation == NO_DILATION else f" dilated by {tuple(dilation)}"
        raise ShapeError(f"{op}: kernel {tuple(kernel)}{extent} is larger than the input "
                         f"{tuple(shape[2:])} padded by {tuple(padding)}")
    return sizes


def sliding_windows(xp, x, kernel, stride, padding, value=0, dilation=NO_DILATION):
    """The (C, kh, kw, Ho, Wo, N) window view of x padded with `value` (see the module doc).

    x is copied once into a C-ordered (C, H + 2 ph, W + 2 pw, N) array unless it already is
    one (a conv2d output is); the windows themselves are a stride-tricks view of that array.
    """
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    ho, wo = output_size("sliding_windows", x.shape, kernel, stride, padding, dilation)
    chwn = constant_pad(xp, x.transpose(1, 2, 3, 0), ((0, 0),) + sides(padding) + ((0, 0),),
                        value)
    c, _, _, n = chwn.shape
    s_c, s_h, s_w, s_n = chwn.strides
    return xp.lib.stride_tricks.as_strided(
        chwn, shape=(c, kh, kw, ho, wo, n),
        strides=(s_c, s_h * dh, s_w * dw, s_h * sh, s_w * sw, s_n))


def fold_windows(xp, windows, in_shape, stride, padding, dilation=NO_DILATION):
    """col2im: the (N, C, H, W) array that holds, at each input position, the sum of the
    window entries read from it (zero where no window reads); the adjoint of sliding_windows.

    When the windows tile the input exactly (stride = kernel, no padding or dilation, nothing
    left over) every position is read once and the sum is a reshape; otherwise one strided add
    per kernel offset (kh*kw of them, each over all windows at once).
    """
    c, kh, kw, ho, wo, n = windows.shape
    (sh, sw), (dh, dw), pads = stride, dilation, sides(padding)
    h, w = in_shape[2:]
    if ((sh, sw) == (kh, kw) and pads == ((0, 0), (0, 0)) and (dh, dw) == NO_DILATION
            and (ho * kh, wo * kw) == (h, w)):
        chwn = windows.transpose(0, 3, 1, 4, 2, 5).reshape(c, h, w, n)
        return chwn.transpose(3, 0, 1, 2)
    (top, bottom), (left, right) = pads
    chwn = xp.zeros((c, h + top + bottom, w + left + right, n), dtype=windows.dtype)
    for i in range(kh):
        for j in range(kw):
            chwn[:, i * dh:i * dh + sh * ho:sh, j * dw:j * dw + sw * wo:sw, :] += windows[:, i, j]
    return chwn[interior(((0, 0),) + pads + ((0, 0),), (c, h, w, n))].transpose(3, 0, 1, 2)


class Unfold(Op):
    """im2col: the windows of zero-padded x, shape (C, kh, kw, Ho, Wo, N) (a view);
    dx = Fold(g), the sum of each window's gradient back at the positions it read.
    jvp: dy = the windows of dx."""

    @classmethod
    def batching(cls, size, batched, x, **attrs):
        """The batch's samples as one (B * N, ...) input; the batch axis, next to last in the
        windows, moved to the front."""
        windows = cls.apply(merged(x), **attrs)
        windows = windows.reshape(tuple(windows.shape[:-1]) + (size, -1))
        return windows.permute((5, 0, 1, 2, 3, 4, 6))

    @staticmethod
    def forward(ctx, x, kernel, stride, padding, dilation=NO_DILATION):
        ctx.in_shape, ctx.stride, ctx.padding, ctx.dilation = x.shape, stride, padding, dilation
        return sliding_windows(ctx.xp, x, kernel, stride, padding, dilation=dilation)

    @staticmethod
    def backward(ctx, g):
        return Fold.apply(g, in_shape=ctx.in_shape, stride=ctx.stride, padding=ctx.padding,
                          dilation=ctx.dilation)

    jvp = staticmethod(linear)


class Fold(Op):
    """col2im: window entries (C, kh, kw, Ho, Wo, N) summed back into an (N, C, H, W) input;
    dwindows = Unfold(g), since each entry was a plain copy of the position it is added to.
    jvp: dy = Fold(dwindows)."""

    @classmethod
    def batching(cls, size, batched, windows, in_shape, **attrs):
        """The batch axis moved next to the samples' and merged with them: one (B * N, ...)
        output, split again."""
        windows = windows.permute((1, 2, 3, 4, 5, 0, 6))
        windows = windows.reshape(tuple(windows.shape[:5]) + (-1,))
        out = cls.apply(windows, in_shape=(size * in_shape[0],) + tuple(in_shape[1:]), **attrs)
        return split_leading(out, size)

    @staticmethod
    def forward(ctx, windows, in_shape, stride, padding, dilation=NO_DILATION):
        ctx.kernel, ctx.stride, ctx.padding = windows.shape[1:3], stride, padding
        ctx.dilation = dilation
        return fold_windows(ctx.xp, windows, in_shape, stride, padding, dilation)

    @staticmethod
    def backward(ctx, g):
        return Unfold.apply(g, kernel=ctx.kernel, stride=ctx.stride, padding=ctx.padding,
                            dilation=ctx.dilation)

    jvp = staticmethod(linear)
