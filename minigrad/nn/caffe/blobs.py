"""Batch-norm checkpoints to and from Caffe's blob layouts (plain NumPy arrays in and out).

minigrad's state of one BatchNorm layer is PyTorch's: `weight` (gamma), `bias` (beta),
`running_mean`, `running_var` (the unbiased variance), `num_batches_tracked`, each absent where
the layer has none. Caffe forks store the same numbers in different blobs:

BVLC Caffe: a `BatchNorm` layer with three blobs and, after it, a `Scale` layer
    BatchNorm  [mean * s, var * s, s]     s: shape (1,), the sum of moving-average weights
    Scale      [gamma, beta]  or [gamma]  (bias_term: false)
  Inference uses mean = blob0 / s and var = blob1 / s (both 0 when s is 0, as BVLC does). Each
  training step does s = f * s + 1, blob0 = f * blob0 + batch_mean, blob1 = f * blob1 +
  unbiased batch_var, with f = moving_average_fraction, so blob / s is a bias-corrected
  exponential average; the stored variance is unbiased, like minigrad's.

NVIDIA Caffe (0.16 and later): one fused `BatchNorm` layer with five blobs (three without
`scale_bias`)
    [global mean, global var, variance correction, scale, bias]
  Assumed here: the variance correction is a factor of shape (1,) by which the first two blobs are
  multiplied -- 1 in models NVIDIA Caffe trained itself, BVLC's s in BVLC snapshots it loaded --
  so mean = blob0 / blob2 and var = blob1 / blob2, and writing stores blob2 = 1. The moving
  averages are plain exponential averages (weight f on the old value). Caveat: NVIDIA Caffe's
  CPU engine adds eps to the variance it averages, its cuDNN engine stores the unbiased variance;
  the blobs do not say which engine wrote them, so the variance is taken as it is.
  (NVIDIA Caffe 0.15's `BN` layer used a third order, [scale, shift, mean, var]: pass
  `blobs[2], blobs[3], [1], blobs[0], blobs[1]` to `from_nvcaffe`.)

Momentum: Caffe's `moving_average_fraction` f is the weight of the OLD value; minigrad's (and
PyTorch's) `momentum` is the weight of the NEW batch: momentum = 1 - f (Caffe's default 0.999 is
momentum 0.001). BVLC's extra normalization by s only matters while s is still growing, i.e.
for the first few hundred steps at f = 0.999.

`eps` is a layer setting (prototxt), not a blob: set the layer's eps to Caffe's `eps`
(default 1e-5; NVIDIA Caffe uses at least 1e-5). Caffe keeps no batch counter, so
`num_batches_tracked` is 0 after conversion.
"""
import numpy

_STATS = ("running_mean", "running_var")


def momentum_from_moving_average_fraction(fraction):
    """minigrad/PyTorch momentum (weight of the new batch) for Caffe's moving_average_fraction."""
    return 1.0 - fraction


def moving_average_fraction_from_momentum(momentum):
    """Caffe's moving_average_fraction (weight of the old value) for a minigrad momentum."""
    return 1.0 - momentum


def _vector(name, blob, channels=None):
    """A float32 copy of `blob`, flattened ((C,) and (1, C, 1, 1) blobs both occur)."""
    array = numpy.array(blob, dtype=numpy.float32).reshape(-1)
    if channels is not None and array.size != channels:
        raise ValueError(f"caffe: blob {name} has {array.size} values, but the layer has "
                         f"{channels} channels")
    return array


def _scaled_stats(layout, blobs):
    """(mean, var) from [mean * s, var * s, s], with BVLC's rule for s = 0."""
    mean = _vector(f"0 ({layout} mean)", blobs[0])
    var = _vector(f"1 ({layout} variance)", blobs[1], mean.size)
    factor = _vector(f"2 ({layout} scale factor)", blobs[2])
    if factor.size != 1:
        raise ValueError(f"caffe: blob 2 of a {layout} BatchNorm holds one scale factor, not "
                         f"{factor.size} values")
    inverse = numpy.float32(0.0) if factor[0] == 0 else numpy.float32(1.0) / factor[0]
    return mean * inverse, var * inverse


def _state(mean, var, gamma, beta, prefix):
    state = {}
    if gamma is not None:
        state[prefix + "weight"] = gamma
    if beta is not None:
        state[prefix + "bias"] = beta
    state[prefix + "running_mean"] = mean
    state[prefix + "running_var"] = var
    state[prefix + "num_batches_tracked"] = numpy.array(0, dtype=numpy.int64)
    return state


def _count(layout, blobs, allowed):
    blobs = list(blobs)
    if len(blobs) not in allowed:
        raise ValueError(f"caffe: a {layout} layer has {' or '.join(map(str, allowed))} blobs, "
                         f"got {len(blobs)}")
    return blobs


def from_bvlc(batch_norm_blobs, scale_blobs=None, prefix=""):
    """A minigrad BatchNorm state dict from BVLC blobs: `batch_norm_blobs` = [mean * s, var * s,
    s] and, if the BatchNorm is followed by a Scale layer, `scale_blobs` = [gamma] or
    [gamma, beta]. Keys get `prefix` (e.g. "bn1.")."""
    blobs = _count("BVLC BatchNorm", batch_norm_blobs, (3,))
    mean, var = _scaled_stats("BVLC", blobs)
    gamma = beta = None
    if scale_blobs is not None:
        scale = _count("BVLC Scale", scale_blobs, (1, 2))
        gamma = _vector("Scale 0 (gamma)", scale[0], mean.size)
        beta = _vector("Scale 1 (beta)", scale[1], mean.size) if len(scale) == 2 else None
    return _state(mean, var, gamma, beta, prefix)


def _stats_from(state, prefix):
    missing = [prefix + key for key in _STATS if prefix + key not in state]
    if missing:
        raise ValueError(f"caffe: the state dict has no {', '.join(missing)} (a BatchNorm "
                         "layer with track_running_stats=True is needed)")
    mean = _vector(prefix + "running_mean", state[prefix + "running_mean"])
    return mean, _vector(prefix + "running_var", state[prefix + "running_var"], mean.size)


def to_bvlc(state, prefix=""):
    """(batch_norm_blobs, scale_blobs) in BVLC's layout from a minigrad BatchNorm state dict:
    [mean, var, [1.0]] (s = 1), and [gamma, beta] for the Scale layer -- [gamma] when the layer
    has no bias, gamma = 1 when it has a bias only, None when it has neither."""
    mean, var = _stats_from(state, prefix)
    batch_norm_blobs = [mean, var, numpy.ones(1, numpy.float32)]
    gamma, beta = state.get(prefix + "weight"), state.get(prefix + "bias")
    if gamma is None and beta is None:
        return batch_norm_blobs, None
    gamma = numpy.ones_like(mean) if gamma is None else _vector("weight", gamma, mean.size)
    scale_blobs = [gamma] if beta is None else [gamma, _vector("bias", beta, mean.size)]
    return batch_norm_blobs, scale_blobs


def from_nvcaffe(blobs, prefix=""):
    """A minigrad BatchNorm state dict from NVIDIA Caffe's fused BatchNorm blobs: [mean, var,
    variance correction, scale, bias], or the first three without scale_bias."""
    blobs = _count("NVIDIA Caffe BatchNorm", blobs, (3, 5))
    mean, var = _scaled_stats("NVIDIA Caffe", blobs)
    gamma = beta = None
    if len(blobs) == 5:
        gamma = _vector("3 (scale)", blobs[3], mean.size)
        beta = _vector("4 (bias)", blobs[4], mean.size)
    return _state(mean, var, gamma, beta, prefix)


def to_nvcaffe(state, prefix=""):
    """NVIDIA Caffe's fused BatchNorm blobs from a minigrad BatchNorm state dict: [mean, var,
    [1.0], scale, bias] (a missing scale is 1, a missing bias 0), or [mean, var, [1.0]] when the
    layer has neither."""
    mean, var = _stats_from(state, prefix)
    blobs = [mean, var, numpy.ones(1, numpy.float32)]
    gamma, beta = state.get(prefix + "weight"), state.get(prefix + "bias")
    if gamma is None and beta is None:
        return blobs
    blobs.append(numpy.ones_like(mean) if gamma is None else _vector("weight", gamma, mean.size))
    blobs.append(numpy.zeros_like(mean) if beta is None else _vector("bias", beta, mean.size))
    return blobs
