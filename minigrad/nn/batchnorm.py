"""Batch normalization layers: BatchNorm1d, BatchNorm2d, BatchNorm3d.

Each normalizes every channel (axis 1) with statistics over the batch and spatial axes, then
scales by `weight` (gamma) and shifts by `bias` (beta):

    y = (x - mean) / sqrt(var + eps) * weight + bias

In training the batch's statistics are used and the running buffers move towards them (no
gradient; unbiased variance):

    running = (1 - momentum) * running + momentum * batch          (momentum a number)
    running = running + (batch - running) / num_batches_tracked    (momentum=None: the
                                                                    cumulative average)

(PyTorch's convention. Caffe's `moving_average_fraction` and Keras' `momentum` give the weight
of the old value instead: keep = 1 - momentum.) In evaluation the running statistics are used.
With track_running_stats=False there are no buffers and batch statistics are used always.

`scale` / `center` switch weight and bias separately (both default to `affine`); an absent one
costs nothing. `fused`: True runs `ops.fused_batch_norm` (one op), False the composition
normalize, mul, add, "auto" the fused op (CUDA kernels on the GPU, NumPy on the CPU: the faster
path on both). The results, the buffers and the state_dict are the same either way.

`memory`: "input" (the default) keeps the input x for backward; "output" keeps the output y
instead (`ops.fused_batch_norm_act` with no activation), so x is freed after forward when
nothing else holds it: worth it when x is used only by this layer (a conv's output). Backward
then divides by weight, so a weight of exactly 0 that is trained is an error (docs/bn-act.md).
The BatchNormAct layers (nn/batchnorm_act.py) are these layers with an activation after the
norm, memory="output" by default.
"""
import math

from .. import creation
from ..ops.errors import ShapeError
from ..tensor import Tensor
from . import functional as F
from .module import Module, Parameter


class _BatchNorm(Module):
    """Shared by the BatchNorm layers (they differ only in the input dims they accept)."""

    _dims = ()               # accepted input ndim
    _stat_unit = "channel"   # what one running statistic describes

    _activation = F.IDENTITY   # (activation, negative_slope, alpha) after the norm

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, scale=None, center=None, fused="auto", device=None,
                 dtype=None, memory="input"):
        super().__init__()
        if fused not in ("auto", True, False):
            raise ValueError(f"{type(self).__name__}: fused must be 'auto', True or False, not "
                             f"{fused!r}")
        if memory not in ("input", "output"):
            raise ValueError(f"{type(self).__name__}: memory must be 'input' or 'output', not "
                             f"{memory!r}")
        if memory == "output" and fused is False:
            raise ValueError(f"{type(self).__name__}: memory='output' runs the fused op "
                             "fused_batch_norm_act; it cannot be combined with fused=False")
        self.memory = memory
        if momentum is not None and not 0.0 <= momentum <= 1.0:
            raise ValueError(f"{type(self).__name__}: momentum must be in [0, 1] or None, not "
                             f"{momentum}")
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats, self.fused = affine, track_running_stats, fused
        self.scale = affine if scale is None else bool(scale)
        self.center = affine if center is None else bool(center)
        shape = self._stat_shape()
        self.register_parameter("weight", Parameter(
            creation.ones(num_features, device=device, dtype=dtype)) if self.scale else None)
        self.register_parameter("bias", Parameter(
            creation.zeros(num_features, device=device, dtype=dtype)) if self.center else None)
        if track_running_stats:
            self.register_buffer("running_mean", creation.zeros(shape, device=device, dtype=dtype))
            self.register_buffer("running_var", creation.ones(shape, device=device, dtype=dtype))
            self.register_buffer("num_batches_tracked",
                                 creation.zeros((), dtype="int64", device=device))
        else:
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                self.register_buffer(name, None)

    def _stat_shape(self):
        """The shape of the running statistics: one per channel."""
        return (self.num_features,)

    def reset_running_stats(self):
        """Running mean 0, running variance 1, no batches tracked."""
        if self.track_running_stats:
            self.running_mean.zero_()
            self.running_var.array[...] = 1
            self.num_batches_tracked.zero_()

    def reset_parameters(self):
        self.reset_running_stats()
        if self.weight is not None:
            self.weight.array[...] = 1
        if self.bias is not None:
            self.bias.array[...] = 0

    def _check_input(self, input):
        if not isinstance(input, Tensor):
            raise TypeError(f"{type(self).__name__}: expected a Tensor, got "
                            f"{type(input).__name__}")
        if input.ndim not in self._dims or input.shape[1] != self.num_features:
            dims = " or ".join(f"{n}-d" for n in self._dims)
            # as in PyTorch: a ValueError for the number of dims, a RuntimeError for the channels
            error = ValueError if input.ndim not in self._dims else ShapeError
            raise error(f"{type(self).__name__}({self.num_features}): expected {dims} input "
                        f"with {self.num_features} channels on axis 1, got shape {input.shape}")

    # Set to 0 by recompute_batchnorm_stats: the running statistics then become the average of
    # the batches' statistics weighted by their value counts (None: the layer's own rule).
    _population_count = None

    def _factor(self, count):
        """This batch's weight in the running averages (the batch counter already advanced);
        `count` is the number of values behind each of its statistics."""
        if self._population_count is not None:
            self._population_count += count
            return count / self._population_count
        if self.momentum is None:
            return 1.0 / int(self.num_batches_tracked.item())
        return self.momentum

    def _per_channel(self):
        """(weight, bias, running_mean, running_var) as (C,) vectors for F._batch_norm."""
        return self.weight, self.bias, self.running_mean, self.running_var

    def _channels_view(self, input):
        """The input as F._batch_norm sees it (channels on axis 1) and the function that takes
        the result back to the input's shape."""
        return input, None

    def _normalize(self, input, factor, count):
        """The layer's function for one call, on checked input: `factor` is the running-average
        weight, `count` the values per batch statistic (None: running statistics are used)."""
        keep_running = not self.training or self.track_running_stats
        weight, bias, running_mean, running_var = self._per_channel()
        view, restore = self._channels_view(input)
        y = F._batch_norm(view, running_mean=running_mean if keep_running else None,
                          running_var=running_var if keep_running else None, weight=weight,
                          bias=bias, training=count is not None, factor=factor, eps=self.eps,
                          fused=self.fused, count=count, activation=self._activation,
                          memory=self.memory)
        return y if restore is None else restore(y)

    def forward(self, input):
        self._check_input(input)   # the one check: F._batch_norm takes the input as it is
        count = None
        if self.training or not self.track_running_stats:   # batch statistics: check count
            count = F._values_per_statistic(f"{type(self).__name__}({self.num_features})",
                                            input, math.prod(self._stat_shape()),
                                            self._stat_unit)
        if not (self.training and self.track_running_stats):
            return self._normalize(input, 0.0, count)
        self.num_batches_tracked.array += 1   # in place on the 0-d array
        try:
            return self._normalize(input, self._factor(count), count)
        except Exception:
            self.num_batches_tracked.array -= 1   # the batch was not used
            raise

    def update_rule(self):
        """The running-statistics update, as text."""
        if not self.track_running_stats:
            return "no running stats: batch statistics always"
        if self.momentum is None:
            return ("running = running + (batch - running) / num_batches_tracked "
                    "(cumulative average; unbiased var)")
        keep = 1.0 - self.momentum
        return (f"running = {keep:g} * running + {self.momentum:g} * batch "
                "(unbiased var)")

    def extra_repr(self):
        text = (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, track_running_stats={self.track_running_stats}")
        if (self.scale, self.center) != (self.affine, self.affine):
            text += f", scale={self.scale}, center={self.center}"
        if self.fused != "auto":
            text += f", fused={self.fused}"
        if self.memory != "input":
            text += f", memory={self.memory!r}"
        return text + f"; {self.update_rule()}"


_LAYER_DOC = """Batch norm over {shape} input, per channel (axis 1):
    y = (x - mean) / sqrt(var + eps) * weight + bias. Training uses the batch's statistics and
    updates the buffers with the unbiased batch variance,
        running = (1 - momentum) * running + momentum * batch
    (momentum=None: running = running + (batch - running) / num_batches_tracked, the cumulative
    average); evaluation uses the running statistics. See the module docstring for the rest."""


class BatchNorm1d(_BatchNorm):
    __doc__ = _LAYER_DOC.format(shape="(N, C) or (N, C, L)")
    _dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    __doc__ = _LAYER_DOC.format(shape="(N, C, H, W)")
    _dims = (4,)


class BatchNorm3d(_BatchNorm):
    __doc__ = _LAYER_DOC.format(shape="(N, C, D, H, W)")
    _dims = (5,)
