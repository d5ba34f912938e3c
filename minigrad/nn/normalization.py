"""The other normalization layers, all composed from the same primitive, `ops.normalize`:

    LayerNorm          normalize each sample over its last axes            (PyTorch's LayerNorm)
    GroupNorm          reshape (N, C, *) -> (N, G, rest), normalize over rest
    InstanceNorm1d/2d/3d  normalize each sample's channel over its positions (L / H, W / D, H, W)
    RMSNorm            divide each sample by the root mean square over its last axes
    RegionBatchNorm2d  batch norm with statistics per horizontal region and one shared
                       weight/bias: (N, C, H, W) -> (N, C, R, H/R, W), normalize over (0, 3, 4)
"""
from .. import creation, ops
from . import batch_norm_core
from . import functional as F
from .batchnorm import _BatchNorm
from .module import Module, Parameter


def _affine_parameters(module, shape, enabled, bias, device, dtype):
    """Register weight (ones) and bias (zeros) of `shape`, or None for those not enabled."""
    module.register_parameter("weight", Parameter(creation.ones(shape, device=device, dtype=dtype))
                              if enabled else None)
    module.register_parameter("bias", Parameter(creation.zeros(shape, device=device, dtype=dtype))
                              if enabled and bias else None)


class LayerNorm(Module):
    """y = normalize(x over its last len(normalized_shape) axes) * weight + bias, with weight and
    bias of shape normalized_shape (PyTorch's LayerNorm)."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True,
                 device=None, dtype=None):
        super().__init__()
        self.normalized_shape = ((normalized_shape,) if isinstance(normalized_shape, int)
                                 else tuple(normalized_shape))
        self.eps, self.elementwise_affine = eps, elementwise_affine
        _affine_parameters(self, self.normalized_shape, elementwise_affine, bias, device, dtype)

    def forward(self, input):
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


class GroupNorm(Module):
    """Normalize each sample over groups of num_channels / num_groups channels (and all
    positions), then per-channel weight and bias (PyTorch's GroupNorm)."""

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, device=None, dtype=None):
        super().__init__()
        if isinstance(num_groups, bool) or not isinstance(num_groups, int) or num_groups < 1:
            raise ValueError(f"GroupNorm: num_groups must be an int >= 1, not {num_groups!r}")
        if num_channels % num_groups:
            raise ValueError(f"GroupNorm: num_channels ({num_channels}) must be divisible by "
                             f"num_groups ({num_groups})")
        self.num_groups, self.num_channels, self.eps, self.affine = (
            num_groups, num_channels, eps, affine)
        _affine_parameters(self, (num_channels,), affine, True, device, dtype)

    def forward(self, input):
        if input.ndim < 2 or input.shape[1] != self.num_channels:
            raise ValueError(f"GroupNorm: expected input of shape (N, {self.num_channels}, *) "
                             f"for num_channels={self.num_channels}, got shape {input.shape}")
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"


class _InstanceNorm(Module):
    """Normalize each channel of each sample over its positions (PyTorch's InstanceNorm*d: no
    affine and no running statistics by default). With track_running_stats, training moves the
    running buffers towards the batch mean of the per-sample statistics,
    running = (1 - momentum) * running + momentum * batch, and evaluation uses them.
    Subclasses set `_spatial`, the number of position axes."""

    _spatial = None

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=False,
                 track_running_stats=False, device=None, dtype=None):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        _affine_parameters(self, (num_features,), affine, True, device, dtype)
        if track_running_stats:
            self.register_buffer("running_mean", creation.zeros(num_features, device=device,
                                                                dtype=dtype))
            self.register_buffer("running_var", creation.ones(num_features, device=device,
                                                              dtype=dtype))
            self.register_buffer("num_batches_tracked",
                                 creation.zeros((), dtype="int64", device=device))
        else:
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                self.register_buffer(name, None)

    def forward(self, input):
        batched = self._spatial + 2
        if input.ndim == batched - 1:   # one unbatched (C, *positions) sample
            return ops.reshape(self.forward(ops.reshape(input, (1,) + input.shape)), input.shape)
        if input.ndim != batched or input.shape[1] != self.num_features:
            name = f"{type(self).__name__}({self.num_features})"
            raise ValueError(f"{name}: expected (N, {self.num_features}, *positions) or "
                             f"({self.num_features}, *positions) input with {self._spatial} "
                             f"position axes, got shape {input.shape}")
        use_input_stats = self.training or not self.track_running_stats
        if self.training and self.track_running_stats:
            self.num_batches_tracked.array[...] += 1
        return F.instance_norm(input, self.running_mean, self.running_var, self.weight,
                               self.bias, use_input_stats,
                               0.0 if self.momentum is None else self.momentum, self.eps)

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, track_running_stats={self.track_running_stats}")


class InstanceNorm1d(_InstanceNorm):
    """Instance norm of (N, C, L) input over L."""

    _spatial = 1


class InstanceNorm2d(_InstanceNorm):
    """Instance norm of (N, C, H, W) input over (H, W)."""

    _spatial = 2


class InstanceNorm3d(_InstanceNorm):
    """Instance norm of (N, C, D, H, W) input over (D, H, W)."""

    _spatial = 3


class RMSNorm(Module):
    """y = x / sqrt(mean(x^2 over the last len(normalized_shape) axes) + eps) * weight
    (PyTorch's RMSNorm; eps=None means the machine epsilon of the input's dtype)."""

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None,
                 dtype=None):
        super().__init__()
        self.normalized_shape = ((normalized_shape,) if isinstance(normalized_shape, int)
                                 else tuple(normalized_shape))
        self.eps, self.elementwise_affine = eps, elementwise_affine
        _affine_parameters(self, self.normalized_shape, elementwise_affine, False, device, dtype)

    def forward(self, input):
        return F.rms_norm(input, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


class RegionBatchNorm2d(_BatchNorm):
    """Batch norm with statistics per region and one shared weight/bias.

    The H axis of (N, C, H, W) input is cut into `regions` (R) equal bands. Each (channel, band)
    gets its own mean and variance over (N, H/R, W), while every band of a channel is scaled and
    shifted by the same weight[c] and bias[c]. No Python loop over regions, no slices and no
    concatenation:

        x5 = x.reshape(N, C, R, H/R, W)
        y5 = normalize(x5, axes=(0, 3, 4)) * weight.view(1, C, 1, 1, 1) + bias.view(1, C, 1, 1, 1)

    which is batch norm over C*R channels of the view x.reshape(N, C*R, H/R*W), with weight and
    bias repeated R times (broadcast, so their gradients sum over the bands). The layer runs it
    that way, so `fused` works as in BatchNorm2d. Running statistics have shape (C, R) and follow
    BatchNorm's update rule (see batchnorm.py); evaluation uses each band's own.
    """

    _dims = (4,)

    def __init__(self, num_features, regions, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, scale=None, center=None, fused="auto", device=None,
                 dtype=None):
        if isinstance(regions, bool) or not isinstance(regions, int) or regions < 1:
            raise ValueError(f"RegionBatchNorm2d: regions must be an int >= 1 (bands of the "
                             f"height), not {regions!r}")
        super().__init__(num_features, eps, momentum, affine, track_running_stats, scale,
                         center, fused, device, dtype)
        self.regions = regions
        if track_running_stats:   # one statistic per channel and region, not per channel
            shape = (num_features, regions)
            self.running_mean = creation.zeros(shape, device=device, dtype=dtype)
            self.running_var = creation.ones(shape, device=device, dtype=dtype)

    def _check_input(self, input):
        if input.ndim == 4 and input.shape[2] % self.regions:
            raise ValueError(f"RegionBatchNorm2d: the height {input.shape[2]} of the input of "
                             f"shape {input.shape} does not split into {self.regions} equal "
                             "regions")
        return super()._check_input(input, self.num_features * self.regions,
                                    "channel and region")

    def _batch_norm(self, input, factor, count, activation=None):
        """Batch norm of the view (N, C * R, H / R * W): one channel per (channel, region),
        weight and bias repeated over the regions, the running statistics seen as (C * R,)."""
        n, c, h, w = input.shape
        channels, per_band = c * self.regions, (c, self.regions)
        weight, bias = (
            None if p is None else ops.reshape(ops.broadcast_to(ops.reshape(p, (c, 1)), per_band),
                                               (channels,))
            for p in (self.weight, self.bias))
        keep_running = not self.training or self.track_running_stats
        running_mean, running_var = (   # views: updated in place
            ops.reshape(b, (channels,)) if keep_running and b is not None else None
            for b in (self.running_mean, self.running_var))
        view = ops.reshape(input, (n, channels, (h // self.regions) * w))
        y = batch_norm_core.batch_norm(
            view, weight, bias, running_mean, running_var, training=count is not None,
            factor=factor, eps=self.eps, count=count, fused=self.fused is not False)
        return ops.reshape(y, input.shape)

    def extra_repr(self):
        return super().extra_repr().replace(f"{self.num_features}, ",
                                            f"{self.num_features}, regions={self.regions}, ", 1)
