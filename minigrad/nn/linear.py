"""Fully connected layer and the identity."""
from . import functional as F
from . import init
from .module import Module


class Identity(Module):
    """Returns its input unchanged (a placeholder where a layer is optional). Arguments given
    to the constructor are ignored, as in PyTorch, so it can stand in for any layer."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


class Linear(Module):
    """y = x @ weight^T + bias, weight (out_features, in_features), bias (out_features,),
    both ~ U(-1/sqrt(in_features), 1/sqrt(in_features)) as in PyTorch."""

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight, self.bias = init.default_parameters((out_features, in_features), bias,
                                                         device, dtype)

    def reset_parameters(self):
        init.default_init_(self.weight, self.bias)

    def forward(self, input):
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")
