"""conv1d, conv2d and conv_transpose2d with PyTorch's arguments, resolved into the ops of
conv.py: ints or pairs for stride, padding, dilation and output_padding, `groups`, and
padding="valid" (none) or "same" (stride 1; the output has the input's size).

"same" pads each spatial axis by d*(k - 1) in all, half on each side; when that total is odd
the extra row or column goes to the bottom or right, as in PyTorch (padded first, since the
window ops pad symmetrically). conv1d is conv2d over a length-1 height axis.
"""
from ._promotion import autocast_inputs, check_same_dtype
from .conv import Conv2d, ConvTranspose2d, EmptyBatchConv2d
from .errors import ShapeError
from .join import pad
from .opmath import float32_call
from .shape import reshape
from .window import ntuple, pair


def _groups(op, groups):
    if not isinstance(groups, int) or groups < 1:
        raise ValueError(f"{op}: groups must be an int >= 1, got {groups!r}")
    return groups


def same_padding(op, kernel, stride, dilation):
    """The (before, after) padding per axis that keeps the spatial size ("same")."""
    if stride != (1, 1):
        raise ValueError(f"{op}: padding='same' needs stride 1, got stride {stride}; give the "
                         "padding as numbers for a strided convolution")
    totals = [d * (k - 1) for k, d in zip(kernel, dilation)]
    return tuple((t // 2, t - t // 2) for t in totals)


def conv_padding(op, padding, kernel, stride, dilation):
    """conv2d's `padding` (an int, a pair, "valid" or "same") as (before, after) per axis."""
    if padding == "valid":
        return ((0, 0), (0, 0))
    if padding == "same":
        return same_padding(op, kernel, stride, dilation)
    if isinstance(padding, str):
        raise ValueError(f"{op}: padding must be 'valid', 'same', an int or a pair, "
                         f"not {padding!r}")
    return tuple((p, p) for p in pair(op, "padding", padding, 0))


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D cross-correlation of NCHW `x` with `weight` (out, in/groups, kh, kw), as in
    PyTorch: stride, dilation and padding (zeros; or "valid"/"same") are ints or pairs;
    `groups` splits the channels (groups = in channels = out channels: depthwise)."""
    x, weight, bias = autocast_inputs("conv2d", x, weight, bias)
    stride, dilation = pair("conv2d", "stride", stride, 1), pair("conv2d", "dilation", dilation, 1)
    groups = _groups("conv2d", groups)
    sides = conv_padding("conv2d", padding, weight.shape[2:], stride, dilation)
    if any(before != after for before, after in sides):   # "same" with an odd total
        x = pad(x, ((0, 0), (0, 0)) + tuple((0, after - before) for before, after in sides))
    check_same_dtype("conv2d", ("input", "weight", "bias"), (x, weight, bias))
    op = EmptyBatchConv2d if x.shape[0] == 0 else Conv2d
    return float32_call(op.apply, x, weight, bias, stride=stride,
                        padding=tuple(b for b, _ in sides), dilation=dilation, groups=groups)


def _one(op, name, value, minimum):
    """An int or a 1-tuple of one, at least `minimum`, as an int."""
    return ntuple(op, name, value, 1, minimum)[0]


def conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-D cross-correlation of (N, C, L) `x` with `weight` (out, in/groups, k), as in PyTorch;
    conv2d over a height axis of length 1."""
    if x.ndim != 3 or weight.ndim != 3:
        raise ShapeError(f"conv1d: expected input (N, C, L) and weight (out, in/groups, k), "
                         f"got shapes {x.shape} and {weight.shape}")
    if not isinstance(padding, str):
        padding = (0, _one("conv1d", "padding", padding, 0))
    out = conv2d(reshape(x, (x.shape[0], x.shape[1], 1, x.shape[2])),
                 reshape(weight, weight.shape[:2] + (1, weight.shape[2])), bias,
                 (1, _one("conv1d", "stride", stride, 1)), padding,
                 (1, _one("conv1d", "dilation", dilation, 1)), groups)
    return reshape(out, out.shape[:2] + out.shape[3:])


def conv_transpose2d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    """The transpose (adjoint) of conv2d, as in PyTorch: `weight` is (in, out/groups, kh, kw)
    and the output (N, out, Ho, Wo) has Ho = (H - 1)*sh - 2*ph + dh*(kh - 1) + oph + 1, the
    output_padding adding rows at the bottom (and columns at the right) that no window reads.
    Each output_padding entry is below its stride or its dilation."""
    op = "conv_transpose2d"
    x, weight, bias = autocast_inputs(op, x, weight, bias)
    stride, dilation = pair(op, "stride", stride, 1), pair(op, "dilation", dilation, 1)
    padding, extra = pair(op, "padding", padding, 0), pair(op, "output_padding", output_padding, 0)
    groups = _groups(op, groups)
    if any(e >= max(s, d) for e, s, d in zip(extra, stride, dilation)):
        raise ValueError(f"{op}: output_padding {extra} must be below the stride {stride} or "
                         f"the dilation {dilation}")
    if x.ndim != 4 or weight.ndim != 4:
        raise ShapeError(f"{op}: expected input (N, C, H, W) and weight (in, out/groups, kh, kw),"
                         f" got shapes {x.shape} and {weight.shape}")
    size = tuple((n - 1) * s - 2 * p + d * (k - 1) + e + 1 for n, s, p, d, k, e
                 in zip(x.shape[2:], stride, padding, dilation, weight.shape[2:], extra))
    if min(size) < 1:
        raise ShapeError(f"{op}: the output of input {x.shape} and weight {weight.shape} with "
                         f"stride {stride}, padding {padding} would have size {size}")
    return float32_call(ConvTranspose2d.apply, x, weight, bias, size=size, stride=stride,
                        padding=padding, dilation=dilation, groups=groups)
