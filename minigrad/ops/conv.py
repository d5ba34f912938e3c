"""2-D convolution (cross-correlation, as in PyTorch), its transpose and its weight gradient, by
im2col and matrix products.

With cols (C*kh*kw, Ho*Wo*N) the im2col matrix of the padded input (the windows `unfold(x)`,
layout in window.py, dilation included), the weight viewed as W (O, C*kh*kw) and g the output
gradient viewed as (O, Ho*Wo*N):

    out = W @ cols  (+ bias per output channel)          -> (O, Ho, Wo, N), NCHW by a transpose
    dW  = g @ cols^T
    dx  = fold(W^T @ g)                                   (col2im, the adjoint of unfold)
    db  = sum of g over N, Ho, Wo

Groups split the C inputs and O outputs into G blocks, group k's outputs reading only its inputs:
the weight is (O, C/G, kh, kw) and each formula holds per group, on the group's channel slices
of the windows, weight and g (one kernel call per group: faster than one batched product over
a few groups, benchmarks/README.md). Many groups of small products (vmap's rule for a weight
per example makes one group per example) run as one batched matmul over the groups on the
whole im2col matrix instead (`_stacks`): there the kernel's cost per call, times the groups,
was most of the time of per-sample gradients. The three products are three ops, each the
others' derivative, so every derivative order runs the same kernels:

    Conv2d(x, W)           = W @ unfold(x)     dx = ConvTranspose2d(g, W),  dW = Conv2dWeight(x, g)
    ConvTranspose2d(y, W)  = fold(W^T @ y)     dy = Conv2d(g, W),           dW = Conv2dWeight(g, y)
    Conv2dWeight(x, g)     = g @ unfold(x)^T   dx = ConvTranspose2d(g, U),  dg = Conv2d(x, U)

The products run in the backend's "conv2d" kernel (on the CPU it builds cols in cache-sized
blocks and runs stride-1 transposed products as correlations: backends/numpy_conv.py). The
result lands in one (O, Ho, Wo, N) array, so the NCHW output is a transposed view, not a copy,
and the layers after it (batch norm, ReLU, pooling, the next im2col) work on that
channels-first layout without reordering it.
"""
from ..tensor import Tensor
from .base import Op
from .batch_axes import into_channels, merged, split_channels, split_leading, stretched
from .errors import ShapeError
from .tangents import product_rule, total
from .window import NO_DILATION, fold_windows, output_size, sliding_windows


def check_conv(op, x, weight, bias, groups, channels_of):
    """The shapes of a convolution's inputs: 4-D x and weight, groups dividing the channels,
    x's channels matching `channels_of(weight)`, bias one per output channel."""
    if weight.ndim != 4:
        raise ShapeError(f"{op}: weight must be 4-D, got shape {weight.shape}")
    if weight.shape[0] % groups:
        raise ShapeError(f"{op}: groups={groups} does not divide the weight's first axis "
                         f"({weight.shape[0]}; weight of shape {weight.shape})")
    expected, grouped = channels_of(weight), "" if groups == 1 else f" with groups={groups}"
    if x.ndim != 4 or x.shape[1] != expected:
        raise ShapeError(f"{op}: input of shape {x.shape} does not fit weight of shape "
                         f"{weight.shape}{grouped}: expected (N, {expected}, H, W)")
    outputs = weight.shape[0] if op == "conv2d" else weight.shape[1] * groups
    if bias is not None and bias.shape != (outputs,):
        raise ShapeError(f"{op}: bias must have shape ({outputs},) for weight of shape "
                         f"{weight.shape}{grouped}, got {bias.shape}")


MANY_GROUPS = 16   # from this many groups of products of at most SMALL_PRODUCT multiplies
SMALL_PRODUCT = 1 << 19   # each, one batched matmul over the groups (see the docstring)


def _stacks(groups, multiplies):
    """Whether a grouped conv's products, of `multiplies` each, run as one batched matmul: many
    groups, small products (measured on one CPU thread: per-example 3x3 convs 2-6x faster
    stacked; groups of 1M multiplies each 2x slower)."""
    return groups >= MANY_GROUPS and multiplies <= SMALL_PRODUCT


def _by_group(xp, groups, product, *parts):
    """product(*slices) of each group's slice (along axis 0) of every part, joined along axis 0;
    the one call product(*parts) when groups == 1."""
    if groups == 1:
        return product(*parts)
    pieces = zip(*(xp.split(part, groups, axis=0) for part in parts))
    return xp.concatenate([product(*piece) for piece in pieces], axis=0)


def _blocks(a, groups, columns):
    """`a` as (G, rows, columns): group k's block of rows of the matrix it stands for (its first
    axes the rows, its last the columns; a copy where a view cannot say it, as the windows)."""
    return a.reshape(groups, -1, columns)


def _forward_product(xp, groups, kernel, weight, windows):
    """W @ cols per group as (O, Ho, Wo, N)."""
    if not _stacks(groups, weight.size // groups * windows[0, 0, 0].size):
        return _by_group(xp, groups, kernel.forward, weight, windows)
    positions = windows.shape[3:]   # (Ho, Wo, N)
    cols = _blocks(windows, groups, windows[0, 0, 0].size)
    w = _blocks(weight, groups, cols.shape[1])
    return xp.matmul(w, cols).reshape((weight.shape[0],) + positions)


def _input_product(xp, groups, kernel, weight, g):
    """W^T @ g per group as windows (C, kh, kw, Ho, Wo, N), for weight (I, C/G, kh, kw) and
    g (I, Ho, Wo, N)."""
    if not _stacks(groups, weight.size // groups * g[0].size):
        return _by_group(xp, groups, kernel.input_grad, weight, g)
    w = _blocks(weight, groups, weight[0].size)
    dcols = xp.matmul(w.swapaxes(1, 2), _blocks(g, groups, g[0].size))
    return dcols.reshape((weight.shape[1] * groups,) + weight.shape[2:] + g.shape[1:])


def _windows(ctx, x, kernel, shape=None):
    """The windows of x for ctx's geometry, cut to the (Ho, Wo) of `shape` when given (a
    transposed conv with output_padding >= stride has an output with windows to spare)."""
    windows = sliding_windows(ctx.xp, x, kernel, ctx.geometry["stride"],
                              ctx.geometry["padding"], dilation=ctx.geometry["dilation"])
    if shape is not None and windows.shape[3:5] != shape[2:]:
        windows = windows[:, :, :, :shape[2], :shape[3]]
    return windows


def _crop(t, shape):
    """t cut to the spatial size of `shape` (the same reason as in _windows)."""
    return t if t.shape[2:] == shape[2:] else t[:, :, :shape[2], :shape[3]]


def _geometry(ctx, stride, padding, dilation, groups):
    ctx.geometry = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    return ctx.geometry


class Conv2d(Op):
    """conv2d(x (N, C, H, W), weight (O, C/G, kh, kw), bias (O,) or None) -> (N, O, Ho, Wo);
    out = W @ unfold(x) + b,  dx = ConvTranspose2d(g, W),  dW = Conv2dWeight(x, g),  db = sum(g).
    jvp: dy = conv2d(dx, w) + conv2d(x, dw) + db."""

    @classmethod
    def batching(cls, size, batched, x, weight, bias, **geometry):
        """An unbatched weight and bias: the batch's samples as one batch. A weight per example:
        one grouped convolution, example b's channels forming group b (of B * groups)."""
        if not batched[1] and not batched[2]:
            return split_leading(cls.apply(merged(x), weight, bias, **geometry), size)
        x = x if batched[0] else stretched(x, size)
        weight = weight if batched[1] else stretched(weight, size)
        if bias is not None:
            bias = (bias if batched[2] else stretched(bias, size)).reshape((-1,))
        y = cls.apply(into_channels(x), weight.reshape((-1,) + tuple(weight.shape[2:])),
                      bias, **{**geometry, "groups": size * geometry.get("groups", 1)})
        return split_channels(y, size)

    @staticmethod
    def forward(ctx, x, weight, bias, *, stride, padding, dilation=NO_DILATION, groups=1):
        check_conv("conv2d", x, weight, bias, groups, lambda w: w.shape[1] * groups)
        _geometry(ctx, stride, padding, dilation, groups)
        output_size("conv2d", x.shape, weight.shape[2:], stride, padding, dilation)
        windows = _windows(ctx, x, weight.shape[2:])   # unfold(x), a view
        kernel = ctx.backend.kernel("conv2d")
        out = _forward_product(ctx.xp, groups, kernel, weight, windows)   # (O, Ho, Wo, N)
        if bias is not None:
            out += bias.reshape(-1, 1, 1, 1)
        ctx.save(x, weight)
        return out.transpose(3, 0, 1, 2)   # (N, O, Ho, Wo), a view

    @staticmethod
    def backward(ctx, g):
        x, weight = ctx.saved
        need_x, need_w, need_b = ctx.needs_input_grad
        dx = ConvTranspose2d.apply(g, weight, None, size=x.shape[2:], **ctx.geometry) \
            if need_x else None
        dw = Conv2dWeight.apply(x, g, kernel=weight.shape[2:], **ctx.geometry) if need_w else None
        return dx, dw, g.sum(axis=(0, 2, 3)) if need_b else None

    @staticmethod
    def jvp(ctx, dx, dweight, dbias):
        return total(product_rule(ctx, dx, dweight, None, added=(2,)),
                     None if dbias is None else dbias.reshape((1, -1, 1, 1)))


class ConvTranspose2d(Op):
    """conv_transpose2d(y (N, I, H, W), weight (I, O/G, kh, kw), bias (O,) or None, size)
    -> (N, O, *size), the adjoint of conv2d with that weight;
    out = fold(W^T @ y) + b,  dy = Conv2d(g, W),  dW = Conv2dWeight(g, y),  db = sum(g).
    jvp: dy = conv_transpose2d(dy_in, w) + conv_transpose2d(y, dw) + db."""
    batching = "leading"

    @staticmethod
    def forward(ctx, y, weight, bias, *, size, stride, padding, dilation=NO_DILATION, groups=1):
        check_conv("conv_transpose2d", y, weight, bias, groups, lambda w: w.shape[0])
        _geometry(ctx, stride, padding, dilation, groups)
        n, channels = y.shape[0], weight.shape[1] * groups
        fits = output_size("conv_transpose2d", (n, channels) + tuple(size), weight.shape[2:],
                           stride, padding, dilation)
        if fits[0] < y.shape[2] or fits[1] < y.shape[3]:
            raise ValueError(f"conv_transpose2d: an output of size {tuple(size)} holds only "
                             f"{fits} windows, fewer than the input's {y.shape[2:]}")
        kernel = ctx.backend.kernel("conv2d")
        y_cols = y.transpose(1, 2, 3, 0)   # (I, H, W, N): free when y has conv2d's layout
        if not _stacks(groups, weight.size // groups * y_cols[0].size) and kernel.transposes(
                weight.shape, stride, padding, dilation):
            out = _by_group(ctx.xp, groups, lambda w_k, y_k: kernel.transpose(   # fold(W^T @ y)
                w_k, y_k, size, padding), weight, y_cols).transpose(3, 0, 1, 2)
        else:
            dwindows = _input_product(ctx.xp, groups, kernel, weight, y_cols)   # W^T @ y
            out = fold_windows(ctx.xp, dwindows, (n, channels) + tuple(size), stride, padding,
                               dilation)
        if bias is not None:
            out += bias.reshape(1, -1, 1, 1)
        ctx.save(y, weight)
        return out

    @staticmethod
    def backward(ctx, g):
        y, weight = ctx.saved
        need_y, need_w, need_b = ctx.needs_input_grad
        dy = _crop(Conv2d.apply(g, weight, None, **ctx.geometry), y.shape) if need_y else None
        dw = Conv2dWeight.apply(g, y, kernel=weight.shape[2:], **ctx.geometry) if need_w else None
        return dy, dw, g.sum(axis=(0, 2, 3)) if need_b else None

    @staticmethod
    def jvp(ctx, dx, dweight, dbias):
        return total(product_rule(ctx, dx, dweight, None, added=(2,)),
                     None if dbias is None else dbias.reshape((1, -1, 1, 1)))


class Conv2dWeight(Op):
    """conv2d's weight gradient: x (N, C, H, W) and g (N, O, Ho, Wo) -> (O, C/G, kh, kw);
    out = g @ unfold(x)^T,  dx = ConvTranspose2d(g, U),  dg = Conv2d(x, U).
    jvp: dy = conv2d_weight(dx, g) + conv2d_weight(x, dg)."""

    @classmethod
    def batching(cls, size, batched, x, g, **geometry):
        """As conv2d's rule with a weight per example: example b's channels are group b."""
        x, g = [v if b else stretched(v, size) for v, b in zip((x, g), batched, strict=True)]
        groups = size * geometry.pop("groups", 1)
        u = cls.apply(into_channels(x), into_channels(g), groups=groups,
                      **geometry)
        return u.reshape((size, -1) + tuple(u.shape[1:]))

    @staticmethod
    def forward(ctx, x, g, *, kernel, stride, padding, dilation=NO_DILATION, groups=1):
        _geometry(ctx, stride, padding, dilation, groups)
        windows = _windows(ctx, x, kernel, g.shape)
        g_cols = g.transpose(1, 2, 3, 0)   # (O, Ho, Wo, N): free when g kept the layout
        dtype = ctx.xp.result_type(x.dtype, g.dtype)
        conv = ctx.backend.kernel("conv2d")
        ctx.save(x, g)
        if _stacks(groups, g_cols.size // groups * (windows[:, :, :, 0, 0, 0].size // groups)):
            positions = g_cols[0].size
            dw = ctx.xp.matmul(_blocks(g_cols, groups, positions),
                               _blocks(windows, groups, positions).swapaxes(1, 2))
            return dw.astype(dtype, copy=False).reshape(
                (g.shape[1], x.shape[1] // groups) + tuple(kernel))
        return _by_group(ctx.xp, groups, lambda g_k, windows_k: conv.weight_grad(
            g_k, windows_k, dtype), g_cols, windows)

    @staticmethod
    def backward(ctx, u):
        x, g = ctx.saved
        need_x, need_g = ctx.needs_input_grad
        dx = ConvTranspose2d.apply(g, u, None, size=x.shape[2:], **ctx.geometry) \
            if need_x else None
        dg = _crop(Conv2d.apply(x, u, None, **ctx.geometry), g.shape) if need_g else None
        return dx, dg

    jvp = staticmethod(product_rule)


class EmptyBatchConv2d(Op):
    """conv2d of an empty batch (N = 0), as in PyTorch: a (0, O, Ho, Wo) output;
    dx is empty, dweight = 0 (a sum of no products), dbias = g summed, also 0.
    jvp: dy = an empty tangent."""
    batching = "leading"

    @staticmethod
    def forward(ctx, x, weight, bias, *, stride, padding, dilation=NO_DILATION, groups=1):
        check_conv("conv2d", x, weight, bias, groups, lambda w: w.shape[1] * groups)
        ho, wo = output_size("conv2d", x.shape, weight.shape[2:], stride, padding, dilation)
        ctx.x_shape, ctx.weight_shape = x.shape, weight.shape
        return ctx.xp.zeros((0, weight.shape[0], ho, wo), dtype=x.dtype)

    @staticmethod
    def backward(ctx, g):
        xp, backend = ctx.xp, ctx.backend
        dx = Tensor.from_array(xp.zeros(ctx.x_shape, dtype=g.dtype), backend)
        dw = Tensor.from_array(xp.zeros(ctx.weight_shape, dtype=g.dtype), backend)
        return dx, dw, (g.sum(axis=(0, 2, 3)) if ctx.needs_input_grad[2] else None)

    @staticmethod
    def jvp(ctx, dx, dweight, dbias):
        return total(product_rule(ctx, dx, dweight, None, added=(2,)),
                     None if dbias is None else dbias.reshape((1, -1, 1, 1)))
