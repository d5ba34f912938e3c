"""Batch norm followed by an activation, keeping only the activation's output for backward
(InPlace-ABN's layers, in minigrad's style; docs/bn-act.md):

    z = act((x - mean) / sqrt(var + eps) * weight + bias)

act is "leaky_relu" (the default; negative_slope > 0), "elu" (alpha > 0) or "identity". These
are the BatchNorm layers (same arguments, buffers, running-statistics rules and state_dict, which
loads into and from BatchNorm1d/2d) with the activation after the norm and memory="output":
`ops.fused_batch_norm_act` keeps only z, and backward recovers the rest from it. memory="input"
runs batch norm and then the activation as separate ops (x and y kept, as PyTorch does).
"""
from ..ops.fused_batch_norm_act import checked_activation
from .batchnorm import BatchNorm1d, BatchNorm2d


class _BatchNormAct:
    """The activation switches shared by BatchNormAct1d and BatchNormAct2d; the rest is the
    BatchNorm layer they are mixed into."""

    def __init__(self, num_features, activation="leaky_relu", negative_slope=0.01, alpha=1.0,
                 eps=1e-5, momentum=0.1, affine=True, track_running_stats=True, scale=None,
                 center=None, fused="auto", device=None, dtype=None, memory="output"):
        act = checked_activation(activation, negative_slope, alpha)   # before any state
        super().__init__(num_features, eps=eps, momentum=momentum, affine=affine,
                         track_running_stats=track_running_stats, scale=scale, center=center,
                         fused=fused, device=device, dtype=dtype, memory=memory)
        self._activation = act

    @property
    def activation(self):
        return self._activation.name

    def _batch_norm(self, input, factor, count, activation=None):
        return super()._batch_norm(input, factor, count, self._activation)

    def extra_repr(self):
        name, slope, alpha = self._activation
        parameter = {"leaky_relu": f", negative_slope={slope:g}",
                     "elu": f", alpha={alpha:g}"}.get(name, "")
        features, _, rest = super().extra_repr().partition(", ")
        return f"{features}, activation={name!r}{parameter}, {rest}"


class BatchNormAct1d(_BatchNormAct, BatchNorm1d):
    """BatchNorm1d over (N, C) or (N, C, L) input, then the activation; keeps only its output
    (see the module docstring)."""


class BatchNormAct2d(_BatchNormAct, BatchNorm2d):
    """BatchNorm2d over (N, C, H, W) input, then the activation; keeps only its output (see the
    module docstring)."""
