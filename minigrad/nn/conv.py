"""Convolution layers: Conv1d, Conv2d and ConvTranspose2d, with PyTorch's arguments, repr and
state layout (weight (out, in/groups, *kernel) and, transposed, (in, out/groups, *kernel);
bias (out,))."""
from .. import ops
from ..ops.conv_functions import conv_padding
from ..ops.window import ntuple
from . import functional as F
from . import init
from .module import Module

PAD_MODES = F.PAD_MODES   # PyTorch's padding_mode -> ops.pad's mode


class _Conv(Module):
    """What the convolution layers share: settings stored as PyTorch stores them (a tuple with
    one entry per spatial axis; padding may be "same" or "valid"), the parameters
    (U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = weight.shape[1] * kernel size), the repr."""

    dims, transposed = 2, False

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, padding_mode="zeros", device=None, dtype=None,
                 output_padding=0):
        super().__init__()
        name, dims = type(self).__name__, self.dims
        for channels, count in (("in_channels", in_channels), ("out_channels", out_channels)):
            if not isinstance(groups, int) or groups < 1 or count % groups:
                raise ValueError(f"{name}: {channels}={count} must be divisible by groups "
                                 f"(got groups={groups!r})")
        modes = ("zeros",) if self.transposed else ("zeros",) + tuple(PAD_MODES)
        if padding_mode not in modes:
            raise ValueError(f"{name}: padding_mode must be one of {modes}, not "
                             f"{padding_mode!r}")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        # Stored as tuples, as PyTorch does; a bad value is an error here rather than at forward.
        self.kernel_size = ntuple(name, "kernel_size", kernel_size, dims, 1)
        self.stride = ntuple(name, "stride", stride, dims, 1)
        self.dilation = ntuple(name, "dilation", dilation, dims, 1)
        self.padding = padding if isinstance(padding, str) and not self.transposed else \
            ntuple(name, "padding", padding, dims, 0)
        self.output_padding = ntuple(name, "output_padding", output_padding, dims, 0)
        self.padding_mode = padding_mode
        self._sides = self._padding_sides(name)
        shape = (in_channels, out_channels // groups) if self.transposed else \
            (out_channels, in_channels // groups)
        self.weight, self.bias = init.default_parameters(shape + self.kernel_size, bias, device,
                                                         dtype, bias_size=out_channels)

    def _padding_sides(self, name):
        """(before, after) per spatial axis, checked now ("same" with a stride is an error)."""
        lift = 2 - self.dims   # conv1d is conv2d with a height of 1
        padding = self.padding if isinstance(self.padding, str) else (0,) * lift + self.padding
        return conv_padding(name, padding, (1,) * lift + self.kernel_size,
                            (1,) * lift + self.stride, (1,) * lift + self.dilation)[lift:]

    def reset_parameters(self):
        init.default_init_(self.weight, self.bias)

    def _padded(self, input):
        """input padded by padding_mode; None for zeros (the conv itself pads with those)."""
        if self.padding_mode == "zeros":
            return None
        if input.ndim != self.dims + 2:
            raise ValueError(f"{type(self).__name__}: expected a {self.dims + 2}-D input, got "
                             f"shape {input.shape}")
        return ops.pad(input, ((0, 0), (0, 0)) + self._sides, mode=PAD_MODES[self.padding_mode])

    def extra_repr(self):
        text = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}")
        if self.padding != (0,) * self.dims:
            text += f", padding={self.padding}"
        if self.dilation != (1,) * self.dims:
            text += f", dilation={self.dilation}"
        if self.output_padding != (0,) * self.dims:
            text += f", output_padding={self.output_padding}"
        if self.groups != 1:
            text += f", groups={self.groups}"
        if self.bias is None:
            text += ", bias=False"
        if self.padding_mode != "zeros":
            text += f", padding_mode={self.padding_mode}"
        return text


class _ForwardConv(_Conv):
    """Conv1d and Conv2d: the input padded by padding_mode (when not zeros), then `_convolve`."""

    def forward(self, input):
        padded = self._padded(input)   # None unless padding_mode pads first
        x, padding = (input, self.padding) if padded is None else (padded, 0)
        return self._convolve(x, self.weight, self.bias, self.stride, padding, self.dilation,
                              self.groups)


class Conv2d(_ForwardConv):
    """2-D cross-correlation of NCHW input (F.conv2d), zero padding or padding_mode "reflect",
    "replicate" or "circular" (the input padded first, then convolved without padding)."""

    _convolve = staticmethod(F.conv2d)

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, padding_mode="zeros", device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, device, dtype)


class Conv1d(_ForwardConv):
    """1-D cross-correlation of (N, C, L) input (F.conv1d); padding_mode as in Conv2d."""

    dims = 1
    _convolve = staticmethod(F.conv1d)

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, padding_mode="zeros", device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, device, dtype)


class ConvTranspose2d(_Conv):
    """The transpose of Conv2d (F.conv_transpose2d): weight (in, out/groups, kh, kw); the
    output (N, out, Ho, Wo) has Ho = (H - 1)*sh - 2*ph + dh*(kh - 1) + output_padding + 1."""

    transposed = True

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros",
                 device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, device, dtype, output_padding)

    def forward(self, input, output_size=None):
        """output_size (H, W), or (N, C, H, W), picks the output_padding that gives it (a
        strided transpose has `stride` possible sizes), as in PyTorch."""
        return F.conv_transpose2d(input, self.weight, self.bias, self.stride, self.padding,
                                  self._output_padding(input, output_size), self.groups,
                                  self.dilation)

    def _output_padding(self, input, output_size):
        if output_size is None:
            return self.output_padding
        size = tuple(output_size)[-2:] if len(output_size) == 4 else tuple(output_size)
        smallest = tuple((n - 1) * s - 2 * p + d * (k - 1) + 1 for n, s, p, d, k in zip(
            input.shape[-2:], self.stride, self.padding, self.dilation, self.kernel_size))
        largest = tuple(n + s - 1 for n, s in zip(smallest, self.stride))
        if len(size) != 2 or not all(lo <= n <= hi for n, lo, hi in zip(size, smallest, largest)):
            raise ValueError(f"ConvTranspose2d: requested an output size of {tuple(output_size)}, "
                             f"but valid sizes range from {smallest} to {largest} (for an input "
                             f"of {input.shape[-2:]})")
        return tuple(n - lo for n, lo in zip(size, smallest))
