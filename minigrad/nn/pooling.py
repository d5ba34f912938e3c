"""2-D max and average pooling layers."""
from . import functional as F
from .module import Module


class _Pool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = kernel_size if stride is None else stride
        self.padding = padding

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxPool2d(_Pool2d):
    """Maximum over kernel_size windows of NCHW input; stride defaults to kernel_size;
    padding counts as -inf."""

    def forward(self, input):
        return F.max_pool2d(input, self.kernel_size, self.stride, self.padding)


class AvgPool2d(_Pool2d):
    """Mean over kernel_size windows of NCHW input; stride defaults to kernel_size."""

    def forward(self, input):
        return F.avg_pool2d(input, self.kernel_size, self.stride, self.padding)
