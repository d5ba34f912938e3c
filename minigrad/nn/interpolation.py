"""Resizing (N, C, *spatial) inputs: F.interpolate, behind nn.Upsample.

Each spatial axis is resized on its own (the modes here are separable), by gathering source
positions along it with integer indices, which `getitem` differentiates by scattering back:

    nearest:  out[i] = x[min(floor(i * s), n_in - 1)]
    linear:   out[i] = (1 - w) x[i0] + w x[i0 + 1],  i0 = floor(p), w = p - i0, with
              p = i * (n_in - 1) / (n_out - 1)              (align_corners=True)
              p = max((i + 0.5) * s - 0.5, 0)               (align_corners=False)

where s = n_in / n_out, or 1 / scale_factor when a scale factor is given (PyTorch's rules).
bilinear and trilinear are linear along two and three axes.
"""
import math

from .. import ops

_MODES = {"nearest": None, "linear": 1, "bilinear": 2, "trilinear": 3}


def _sizes(op, input, size, scale_factor):
    """[(n_in, n_out, scale)] per spatial axis."""
    spatial = input.shape[2:]
    if (size is None) == (scale_factor is None):
        raise ValueError(f"{op}: give exactly one of size and scale_factor")
    if size is not None:
        sizes = (size,) * len(spatial) if isinstance(size, int) else tuple(size)
        if len(sizes) != len(spatial) or min(sizes) < 1:
            raise ValueError(f"{op}: size {size} does not fit the {len(spatial)} spatial axes "
                             f"of an input of shape {input.shape}")
        return [(n, m, n / m) for n, m in zip(spatial, sizes)]
    factors = ((scale_factor,) * len(spatial) if isinstance(scale_factor, (int, float))
               else tuple(scale_factor))
    if len(factors) != len(spatial) or min(factors) <= 0:
        raise ValueError(f"{op}: scale_factor {scale_factor} does not fit the {len(spatial)} "
                         f"spatial axes of an input of shape {input.shape}")
    return [(n, math.floor(n * f), 1.0 / f) for n, f in zip(spatial, factors)]


def _along(x, axis, index):
    """x gathered at integer positions `index` along `axis`."""
    return ops.getitem(x, (slice(None),) * axis + (index,))


def _linear_positions(xp, n_in, n_out, scale, align_corners):
    """(i0, i1, w) for linear resizing of one axis (see the module docstring)."""
    out = xp.arange(n_out, dtype="float64")
    if align_corners:
        p = out * ((n_in - 1) / (n_out - 1)) if n_out > 1 else out * 0
    else:
        p = xp.maximum((out + 0.5) * scale - 0.5, 0.0)
    i0 = xp.minimum(xp.floor(p).astype("int64"), n_in - 1)
    return i0, xp.minimum(i0 + 1, n_in - 1), p - i0


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """Resize (N, C, *spatial) input to `size` or by `scale_factor`, as
    torch.nn.functional.interpolate, for mode "nearest", "linear" (3-D input), "bilinear"
    (4-D) and "trilinear" (5-D)."""
    op = "interpolate"
    if mode not in _MODES:
        raise NotImplementedError(f"{op}: mode {mode!r} is not supported; minigrad has "
                                  f"{', '.join(_MODES)}")
    if antialias or recompute_scale_factor:
        raise NotImplementedError(f"{op}: antialias and recompute_scale_factor are not supported")
    if input.ndim < 3 or (_MODES[mode] is not None and input.ndim != _MODES[mode] + 2):
        spatial = "some" if _MODES[mode] is None else _MODES[mode]
        raise ValueError(f"{op}: mode {mode!r} expects (N, C) followed by {spatial} spatial "
                         f"axes, got an input of shape {input.shape}")
    if mode == "nearest" and align_corners is not None:
        raise ValueError(f"{op}: align_corners only applies to the linear modes, not 'nearest'")
    xp, out = input.backend.xp, input
    for k, (n_in, n_out, scale) in enumerate(_sizes(op, input, size, scale_factor)):
        axis = k + 2
        if mode == "nearest":
            index = xp.minimum(xp.floor(xp.arange(n_out) * scale).astype("int64"), n_in - 1)
            out = _along(out, axis, index)
            continue
        i0, i1, w = _linear_positions(xp, n_in, n_out, scale, bool(align_corners))
        w = w.astype(input.dtype).reshape((n_out,) + (1,) * (input.ndim - axis - 1))
        out = _along(out, axis, i0) * (1 - w) + _along(out, axis, i1) * w
    return out
