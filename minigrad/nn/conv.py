"""2-D convolution layer."""
from ..ops.window import pair
from . import functional as F
from . import init
from .module import Module


class Conv2d(Module):
    """2-D cross-correlation of NCHW input: weight (out_channels, in_channels, kh, kw),
    bias (out_channels,), both ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with
    fan_in = in_channels * kh * kw, as in PyTorch."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, bias=True,
                 device=None, dtype=None):
        super().__init__()
        self.in_channels, self.out_channels = in_channels, out_channels
        # Stored as pairs, as PyTorch does; a bad value is an error here rather than at forward.
        self.kernel_size = pair("Conv2d", "kernel_size", kernel_size, 1)
        self.stride = pair("Conv2d", "stride", stride, 1)
        self.padding = pair("Conv2d", "padding", padding, 0)
        self.weight, self.bias = init.default_parameters(
            (out_channels, in_channels, *self.kernel_size), bias, device, dtype)

    def reset_parameters(self):
        init.default_init_(self.weight, self.bias)

    def forward(self, input):
        return F.conv2d(input, self.weight, self.bias, stride=self.stride, padding=self.padding)

    def extra_repr(self):
        text = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}")
        if self.padding != (0, 0):
            text += f", padding={self.padding}"
        return text + ("" if self.bias is not None else ", bias=False")
