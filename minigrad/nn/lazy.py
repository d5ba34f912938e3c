"""Lazy layers, as in PyTorch: LazyLinear, LazyConv1d, LazyConv2d, LazyBatchNorm1d and
LazyBatchNorm2d take every size but the input's, and read that from their first input.

Until then their parameters (and batch norm's running statistics) are placeholders without
data, `UninitializedParameter` and `UninitializedBuffer`. The first forward gives each its
shape in place (the same object becomes a Parameter, so an optimizer built before the first
call holds it and trains it, as in PyTorch), runs `reset_parameters` to initialize it as the
eager layer would, and turns the layer into that layer (a LazyLinear becomes a Linear).
"""
from ..creation import zeros
from ..tensor import Tensor
from .batchnorm import BatchNorm1d, BatchNorm2d
from .conv import Conv1d, Conv2d
from .linear import Linear
from .module import Parameter


class _Uninitialized:
    """What the placeholders share: an empty array that keeps the dtype and device until
    `materialize(shape)` gives it zeros of that shape and makes it a plain `cls_to_become`."""

    __slots__ = ()
    cls_to_become = None

    def materialize(self, shape):
        self.array = self.backend.xp.zeros(shape, dtype=self.dtype)
        self.__class__ = self.cls_to_become

    @property
    def shape(self):
        raise RuntimeError(f"Can't access the shape of an uninitialized parameter or buffer "
                           f"({type(self).__name__}); call the lazy layer on an input first, "
                           "which gives it its shape")

    def __repr__(self):
        return f"<{type(self).__name__}>"


class UninitializedParameter(_Uninitialized, Parameter):
    """A Parameter whose shape is not known yet (see the module docstring)."""

    cls_to_become = Parameter

    def __init__(self, requires_grad=True, device=None, dtype=None):
        super().__init__(zeros(0, device=device, dtype=dtype), requires_grad)


class UninitializedBuffer(_Uninitialized, Tensor):
    """A buffer whose shape is not known yet (see the module docstring)."""

    __slots__ = ()
    cls_to_become = Tensor

    def __init__(self, device=None, dtype=None):
        super().__init__(zeros(0, device=device, dtype=dtype))


class LazyModuleMixin:
    """The first forward: `initialize_parameters(input)` (each lazy layer's own: the input's
    size, then the shapes), `reset_parameters()`, and the layer becomes `cls_to_become`."""

    cls_to_become = None

    def _make_placeholders(self, parameters, buffers=()):
        """The named parameters and buffers (those that are not None) as placeholders of
        their dtype and device."""
        for name in parameters:
            if (old := getattr(self, name)) is not None:
                setattr(self, name, UninitializedParameter(old.requires_grad, old.device,
                                                           old.dtype))
        for name in buffers:
            if (old := getattr(self, name)) is not None:
                self.register_buffer(name, UninitializedBuffer(old.device, old.dtype))

    def _materialize(self, shapes):
        for name, shape in shapes.items():
            if (placeholder := getattr(self, name)) is not None:
                placeholder.materialize(shape)

    def _input_size(self, input, axis, what, needed_dims):
        if not isinstance(input, Tensor) or input.ndim < needed_dims:
            raise ValueError(f"{type(self).__name__}: expected a tensor of at least "
                             f"{needed_dims} dims to read {what} from, got "
                             f"{getattr(input, 'shape', type(input).__name__)}")
        return input.shape[axis]

    def forward(self, input, *args, **kwargs):
        self.initialize_parameters(input)
        self.reset_parameters()
        self.__class__ = self.cls_to_become
        return self.forward(input, *args, **kwargs)


class LazyLinear(LazyModuleMixin, Linear):
    """Linear with in_features read from the first input's last axis."""

    cls_to_become = Linear

    def __init__(self, out_features, bias=True, device=None, dtype=None):
        super().__init__(0, out_features, bias, device, dtype)
        self._make_placeholders(("weight", "bias"))

    def initialize_parameters(self, input):
        self.in_features = self._input_size(input, -1, "in_features", 1)
        self._materialize({"weight": (self.out_features, self.in_features),
                           "bias": (self.out_features,)})


class _LazyConv(LazyModuleMixin):
    """Conv with in_channels read from the first input's channel axis (the one before the
    spatial axes, so unbatched input works too)."""

    def __init__(self, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros", device=None, dtype=None):
        super().__init__(0, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, device, dtype)
        self._make_placeholders(("weight", "bias"))

    def initialize_parameters(self, input):
        channels = self._input_size(input, -self.dims - 1, "in_channels", self.dims + 1)
        if channels % self.groups:
            raise ValueError(f"{type(self).__name__}: in_channels={channels} (from the input of "
                             f"shape {input.shape}) must be divisible by groups={self.groups}")
        self.in_channels = channels
        self._materialize({"weight": (self.out_channels, channels // self.groups)
                           + self.kernel_size, "bias": (self.out_channels,)})


class LazyConv1d(_LazyConv, Conv1d):
    """Conv1d with in_channels read from the first input."""

    cls_to_become = Conv1d


class LazyConv2d(_LazyConv, Conv2d):
    """Conv2d with in_channels read from the first input."""

    cls_to_become = Conv2d


class _LazyBatchNorm(LazyModuleMixin):
    """BatchNorm with num_features read from the first input's axis 1."""

    def __init__(self, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 **options):
        super().__init__(0, eps, momentum, affine, track_running_stats, **options)
        self._make_placeholders(("weight", "bias"), ("running_mean", "running_var"))

    def initialize_parameters(self, input):
        self.num_features = self._input_size(input, 1, "num_features", 2)
        shape = (self.num_features,)
        self._materialize({"weight": shape, "bias": shape, "running_mean": shape,
                           "running_var": shape})


class LazyBatchNorm1d(_LazyBatchNorm, BatchNorm1d):
    """BatchNorm1d with num_features read from the first input."""

    cls_to_become = BatchNorm1d


class LazyBatchNorm2d(_LazyBatchNorm, BatchNorm2d):
    """BatchNorm2d with num_features read from the first input."""

    cls_to_become = BatchNorm2d
