"""Parameter initialisation, in place, as in `torch.nn.init`.

Random values are drawn on the CPU from `generator=` (a `minigrad.Generator`; default: the
default generator, `minigrad.manual_seed`), so a model built after the same seed has the same
weights on every device. Each function fills `tensor.array` in place (not recorded on the tape,
but counted by the tensor's version counter) and returns the tensor.
"""
import math

from ..creation import zeros
from ..random import numpy_generator
from ..version import bump_version
from .module import Parameter

_LINEAR_GAINS = ("linear", "conv1d", "conv2d", "conv3d", "sigmoid", "identity")


def calculate_gain(nonlinearity, param=None):
    """The factor that keeps activations' variance steady through `nonlinearity`:
    1 for linear/sigmoid, 5/3 for tanh, sqrt(2) for relu, sqrt(2 / (1 + slope^2)) for leaky_relu
    (slope `param`, default 0.01)."""
    if nonlinearity in _LINEAR_GAINS:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        return math.sqrt(2.0 / (1 + slope ** 2))
    raise ValueError(f"calculate_gain: unknown nonlinearity {nonlinearity!r}; expected one of "
                     f"{', '.join(_LINEAR_GAINS)}, tanh, relu, leaky_relu")


def fan_in_and_fan_out(tensor):
    """(fan_in, fan_out) of a weight laid out (out, in, *kernel): in * kernel size and
    out * kernel size."""
    if tensor.ndim < 2:
        raise ValueError(f"fan in and fan out need a tensor with at least 2 dimensions, "
                         f"not shape {tensor.shape}")
    receptive = math.prod(tensor.shape[2:])
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def _fill(tensor, values):
    """Copy CPU `values` into the tensor's array, in its dtype and on its device."""
    tensor.array[...] = tensor.backend.asarray(values, dtype=tensor.dtype)
    bump_version(tensor)
    return tensor


def uniform_(tensor, a=0.0, b=1.0, generator=None):
    """Fill with samples of U(a, b)."""
    return _fill(tensor, numpy_generator(generator, "uniform_").uniform(a, b, tensor.shape))


def normal_(tensor, mean=0.0, std=1.0, generator=None):
    """Fill with samples of N(mean, std^2)."""
    return _fill(tensor, numpy_generator(generator, "normal_").normal(mean, std, tensor.shape))


def constant_(tensor, value):
    tensor.array[...] = value
    bump_version(tensor)
    return tensor


def zeros_(tensor):
    return constant_(tensor, 0)


def ones_(tensor):
    return constant_(tensor, 1)


def _fan(tensor, mode):
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"kaiming init: mode must be 'fan_in' or 'fan_out', not {mode!r}")
    fan_in, fan_out = fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def kaiming_uniform_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """He initialisation: U(-bound, bound) with bound = gain * sqrt(3 / fan).

    PyTorch's default for Linear and Conv weights is a = sqrt(5), which gives
    bound = 1 / sqrt(fan_in)."""
    bound = calculate_gain(nonlinearity, a) * math.sqrt(3.0 / _fan(tensor, mode))
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """He initialisation: N(0, std^2) with std = gain / sqrt(fan)."""
    std = calculate_gain(nonlinearity, a) / math.sqrt(_fan(tensor, mode))
    return normal_(tensor, 0.0, std, generator)


def xavier_uniform_(tensor, gain=1.0, generator=None):
    """Glorot initialisation: U(-bound, bound) with bound = gain * sqrt(6 / (fan_in + fan_out))."""
    fan_in, fan_out = fan_in_and_fan_out(tensor)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -bound, bound, generator)


def xavier_normal_(tensor, gain=1.0, generator=None):
    """Glorot initialisation: N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out))."""
    fan_in, fan_out = fan_in_and_fan_out(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)), generator)


def default_init_(weight, bias=None):
    """PyTorch's default for Linear and Conv layers: weight ~ kaiming_uniform_(a=sqrt(5)), i.e.
    U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    kaiming_uniform_(weight, a=math.sqrt(5))
    if bias is not None:
        fan_in, _ = fan_in_and_fan_out(weight)
        bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
        uniform_(bias, -bound, bound)


def default_parameters(weight_shape, bias=True, device=None, dtype=None, bias_size=None):
    """(weight, bias) Parameters for a Linear or Conv layer with the weight laid out
    (out, in, *kernel), initialised by `default_init_`; bias is None when not wanted, else of
    `bias_size` (default: out; a transposed conv's weight is (in, out/groups, *kernel))."""
    weight = Parameter(zeros(*weight_shape, dtype=dtype, device=device))
    bias = Parameter(zeros(bias_size or weight_shape[0], dtype=dtype, device=device)) \
        if bias else None
    if weight.numel():   # a lazy layer's zero-size weight has nothing to draw
        default_init_(weight, bias)
    return weight, bias
