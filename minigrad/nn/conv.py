"""2-D convolution layer."""
from . import functional as F
from . import init
from .module import Module


def pair(value):
    """(value, value) for an int, the value itself for a pair."""
    return (value, value) if isinstance(value, int) else tuple(value)


class Conv2d(Module):
    """2-D cross-correlation of NCHW input: weight (out_channels, in_channels, kh, kw),
    bias (out_channels,), both ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with
    fan_in = in_channels * kh * kw, as in PyTorch."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, bias=True,
                 device=None, dtype=None):
        super().__init__()
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride, self.padding = pair(kernel_size), pair(stride), pair(padding)
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
