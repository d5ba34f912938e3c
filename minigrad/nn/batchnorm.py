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
An empty batch gives an empty output and leaves the running statistics as they were (it is
counted in num_batches_tracked), as in PyTorch.

`scale` / `center` switch weight and bias separately (both default to `affine`); an absent one
costs nothing. `fused`: True runs `ops.fused_batch_norm` (one op), False the composition
normalize, mul, add, "auto" the fused op (CUDA kernels on the GPU, NumPy on the CPU: the faster
path on both). The results, the buffers and the state_dict are the same either way.

`memory`: "input" (the default) keeps the input x for backward; "output" keeps the output y
instead (`ops.fused_batch_norm_act` with the identity, the op that keeps its output; plain
BatchNorm applies no activation), so x is freed after forward when nothing else holds it:
worth it when x is used only by this layer (a conv's output). Backward
then divides by weight, so a weight of exactly 0 that is trained is an error (docs/bn-act.md).
The BatchNormAct layers (nn/batchnorm_act.py) are these layers with an activation after the
norm, memory="output" by default.
"""
import contextlib

from .. import creation, tracing
from ..ops.errors import ShapeError
from ..ops.fused_batch_norm import check_batch_norm
from ..tensor import Tensor
from . import batch_norm_core
from .module import Module, Parameter


class _BatchNorm(Module):
    """Shared by the batch-norm layers. Each sets `_dims`; the variants extend `_check_input`
    (RegionBatchNorm2d) or `_batch_norm` (the BatchNormAct layers add their activation,
    RegionBatchNorm2d views the input), and SyncBatchNorm wraps `forward` around sync_normalize.
    forward reads as PyTorch's: the check, the averaging factor, one functional call."""

    _dims = ()   # accepted input ndim

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, scale=None, center=None, fused="auto", device=None,
                 dtype=None, memory="input"):
        super().__init__()
        if isinstance(num_features, bool) or not isinstance(num_features, int) or \
                num_features < 0:
            raise ValueError(f"{type(self).__name__}: num_features must be an int >= 0 (the "
                             f"channels of the input), not {num_features!r}")
        if fused not in ("auto", True, False):
            raise ValueError(f"{type(self).__name__}: fused must be 'auto', True or False, not "
                             f"{fused!r}")
        if memory not in ("input", "output"):
            raise ValueError(f"{type(self).__name__}: memory must be 'input' or 'output', not "
                             f"{memory!r}")
        if memory == "output" and fused is False:
            raise ValueError(f"{type(self).__name__}: memory='output' runs the fused op "
                             "fused_batch_norm_act; it cannot be combined with fused=False")
        if momentum is not None and not 0.0 <= momentum <= 1.0:
            raise ValueError(f"{type(self).__name__}: momentum must be in [0, 1] or None, not "
                             f"{momentum}")
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        self.fused, self.memory = fused, memory
        self.scale = affine if scale is None else bool(scale)
        self.center = affine if center is None else bool(center)
        self.register_parameter("weight", Parameter(
            creation.ones(num_features, device=device, dtype=dtype)) if self.scale else None)
        self.register_parameter("bias", Parameter(
            creation.zeros(num_features, device=device, dtype=dtype)) if self.center else None)
        if track_running_stats:
            self.register_buffer("running_mean",
                                 creation.zeros(num_features, device=device, dtype=dtype))
            self.register_buffer("running_var",
                                 creation.ones(num_features, device=device, dtype=dtype))
            self.register_buffer("num_batches_tracked",
                                 creation.zeros((), dtype="int64", device=device))
        else:
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                self.register_buffer(name, None)

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

    def forward(self, input):
        count = self._check_input(input)   # the one check: the calls below trust it
        if not (self.training and self.track_running_stats):
            return self._batch_norm(input, 0.0, count)
        with self._counted_batch(count) as factor:
            return self._batch_norm(input, factor, count)

    def _batch_norm(self, input, factor, count, activation=None):
        """The one functional call, on checked input: `factor` is the running-average weight,
        `count` the values per batch statistic (None: the running statistics are used)."""
        keep_running = not self.training or self.track_running_stats
        return batch_norm_core.batch_norm(
            input, self.weight, self.bias, self.running_mean if keep_running else None,
            self.running_var if keep_running else None, training=count is not None,
            factor=factor, eps=self.eps, count=count, fused=self.fused is not False,
            memory=self.memory, activation=activation)

    def _check_input(self, input, statistics=None, unit="channel", batch_facts=True):
        """Every check of one call: a tensor of the accepted dims with num_features channels on
        axis 1, of a floating dtype that suits the parameters and buffers, and, when the batch's
        statistics are used, more than one value behind each of the `statistics` (default: one
        per channel) or none at all (an empty batch, as PyTorch allows). Returns that count, or
        None when the running statistics are used. batch_facts=False checks the layer's own
        facts only (type, dims, channels): SyncBatchNorm's sync_normalize checks the dtypes and
        counts the values of all ranks together, naming each rank."""
        name = f"{type(self).__name__}({self.num_features})"
        if not isinstance(input, Tensor):
            raise TypeError(f"{type(self).__name__}: expected a Tensor, got "
                            f"{type(input).__name__}")
        if input.ndim not in self._dims or input.shape[1] != self.num_features:
            dims = " or ".join(f"{n}-d" for n in self._dims)
            # as in PyTorch: a ValueError for the number of dims, a RuntimeError for the channels
            error = ValueError if input.ndim not in self._dims else ShapeError
            raise error(f"{name}: expected {dims} input with {self.num_features} channels "
                        f"on axis 1, got shape {input.shape}")
        if not batch_facts:
            return None
        batch_statistics = self.training or not self.track_running_stats
        running = {} if batch_statistics or statistics else {
            "running_mean": self.running_mean, "running_var": self.running_var}
        check_batch_norm(name, input, 1, count_values=False, weight=self.weight, bias=self.bias,
                         **running)
        if not batch_statistics:
            return None
        if input.numel() == 0:
            return 0
        return batch_norm_core.values_per_statistic(name, input, statistics or self.num_features,
                                                    unit)

    # Set by population_statistics: the running statistics then become the average of the
    # batches' statistics weighted by their value counts (None: the layer's own rule).
    _population_count = None

    @contextlib.contextmanager
    def population_statistics(self):
        """Inside the block, the running statistics start again (reset_running_stats) and each
        training batch b moves them to the exact population average
            running = sum_b n_b * batch_b / sum_b n_b      (n_b values per statistic)
        instead of the momentum rule; afterwards the rule is the layer's own again.
        nn.utils.recompute_batchnorm_stats ("precise BN") runs its batches inside."""
        self.reset_running_stats()
        self._population_count = 0
        try:
            yield self
        finally:
            self._population_count = None

    @contextlib.contextmanager
    def _counted_batch(self, count):
        """Count one training batch of `count` values per statistic, and give its weight in the
        running averages (PyTorch's exponential_average_factor; momentum=None: 1 / the number
        of batches; inside population_statistics: its share of the values). A batch whose block
        raises is not counted."""
        population = self._population_count
        tracing.run(_count, self.num_batches_tracked, 1)   # in place on the 0-d array
        if population is not None:
            self._population_count += count
            factor = count / self._population_count if self._population_count else 0.0
        elif self.momentum is None:
            factor = 1.0 / int(self.num_batches_tracked.item())
        else:
            factor = self.momentum
        try:
            yield factor
        except BaseException:
            tracing.run(_count, self.num_batches_tracked, -1)   # the batch was not used
            self._population_count = population
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


def _count(counter, batches):
    """num_batches_tracked += batches, on its 0-d array (a step of a compiled program)."""
    counter.array += batches
