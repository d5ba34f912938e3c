"""Counting and bucketing, with PyTorch's names and rules: histc, histogram, searchsorted and
bucketize. Their results are counts and positions: constants, with no gradient (PyTorch defines
none either).

A value x falls in bin floor((x - lo) * bins / (hi - lo)) of histc (the right edge hi in the
last bin; values outside [lo, hi] and NaN are not counted), PyTorch's formula, computed in the
input's dtype so that the same bins come out. histogram finds each bin among its edges with
searchsorted, so it takes any increasing edges too.
"""
import collections

from ..dtypes import is_floating
from ..tensor import Tensor
from .base import device_mismatch

HistogramResult = collections.namedtuple("histogram", ["hist", "bin_edges"])


def _check_floating(op, x):
    if not is_floating(x.dtype):
        raise NotImplementedError(f"{op}: not implemented for dtype {x.dtype} (tensor of shape "
                                  f"{x.shape}); count a floating tensor, e.g. x.float()")


def _check_bins(op, bins):
    if not isinstance(bins, int) or isinstance(bins, bool) or bins <= 0:
        raise RuntimeError(f"{op}: bins must be an int > 0, got {bins!r}")


def _limits(op, x, low, high, widen):
    """(lo, hi) of the bins: the given range, or the data's when the range is empty, widened by
    `widen` on each side when that is empty too."""
    if low > high:
        raise RuntimeError(f"{op}: max must be larger than min, got min={low}, max={high}")
    if low == high and x.numel():
        low, high = float(x.array.min()), float(x.array.max())
    if low == high:
        low, high = low - widen, high + widen
    return low, high


def histc(x, bins=100, min=0, max=0):
    """Counts of x's values in `bins` equal bins over [min, max] (the data's range when
    min == max), of x's dtype."""
    _check_floating("histc", x)
    _check_bins("histc", bins)
    xp, values = x.backend.xp, x.array.reshape(-1)
    low, high = (xp.asarray(v, dtype=x.dtype) for v in _limits("histc", x, min, max, 1))
    inside = (values >= low) & (values <= high)   # False for NaN
    position = ((values[inside] - low) * bins / (high - low)).astype("int64")
    position[position == bins] = bins - 1   # the right edge belongs to the last bin
    counts = xp.bincount(position, minlength=bins)[:bins]
    return Tensor.from_array(counts.astype(x.dtype), x.backend)


def histogram(x, bins=100, *, range=None, weight=None, density=False):
    """(hist, bin_edges): `bins` equal bins over `range` (default the data's), or the given
    increasing edges (a 1-D tensor); `weight` weighs each value, `density` divides by the total
    and the bin widths so the histogram integrates to 1."""
    _check_floating("histogram", x)
    xp = x.backend.xp
    if isinstance(bins, Tensor):
        if bins.ndim != 1 or bins.shape[0] < 2 or bins.dtype != x.dtype:
            raise RuntimeError(f"histogram: bin edges must be a 1-D tensor of at least 2 "
                               f"increasing values of the input's dtype {x.dtype}, got shape "
                               f"{bins.shape} and dtype {bins.dtype}")
        edges = bins.array
    else:
        _check_bins("histogram", bins)
        low, high = _limits("histogram", x, *(range or (0.0, 0.0)), 0.5)
        edges = xp.linspace(low, high, bins + 1).astype(x.dtype)
    values = x.array.reshape(-1)
    inside = (values >= edges[0]) & (values <= edges[-1])
    position = xp.searchsorted(edges, values[inside], side="right") - 1
    count = len(edges) - 1
    position[position == count] = count - 1   # the right edge belongs to the last bin
    weights = None if weight is None else weight.array.reshape(-1)[inside]
    hist = xp.bincount(position, weights=weights, minlength=count).astype(x.dtype)
    if density:
        hist = hist / (hist.sum() * (edges[1:] - edges[:-1]))
    return HistogramResult(Tensor.from_array(hist.astype(x.dtype), x.backend),
                           Tensor.from_array(edges, x.backend))


def searchsorted(sorted_sequence, input, *, out_int32=False, right=False, side=None,
                 sorter=None):
    """For each value of `input`, its insertion point in the increasing `sorted_sequence`
    (1-D, or one row per leading index of `input`): the first position whose element is
    >= the value, or > it with right=True / side="right". int64 (int32 with out_int32)."""
    seq = sorted_sequence
    if side not in (None, "left", "right") or (side == "left" and right):
        raise RuntimeError(f"searchsorted(): side must be 'left' or 'right' and agree with "
                           f"right={right}, got side={side!r}")
    side = side or ("right" if right else "left")
    xp = seq.backend.xp
    values = input.array if isinstance(input, Tensor) else xp.asarray(input, dtype=seq.dtype)
    if isinstance(input, Tensor) and input.backend is not seq.backend:
        raise device_mismatch("searchsorted", (seq, input))
    rows = seq.array if sorter is None else xp.take_along_axis(seq.array, sorter.array, -1)
    if seq.ndim != 1 and (seq.ndim != values.ndim or seq.shape[:-1] != values.shape[:-1]):
        raise RuntimeError(f"searchsorted(): the sorted sequence must be 1-D or have the leading "
                           f"dims of the input: got shapes {seq.shape} and {values.shape}")
    if seq.ndim == 1:
        found = xp.searchsorted(rows, values, side=side)
    else:
        flat_rows, flat_values = rows.reshape(-1, rows.shape[-1]), values.reshape(
            -1, values.shape[-1])
        found = xp.stack([xp.searchsorted(r, v, side=side)
                          for r, v in zip(flat_rows, flat_values)]).reshape(values.shape)
    return Tensor.from_array(xp.asarray(found, dtype="int32" if out_int32 else "int64"),
                             seq.backend)


def bucketize(input, boundaries, *, out_int32=False, right=False):
    """The bucket of each value among the increasing 1-D `boundaries`: i with
    boundaries[i-1] < v <= boundaries[i] (boundaries[i-1] <= v < boundaries[i] with right)."""
    if boundaries.ndim != 1:
        raise RuntimeError(f"bucketize: boundaries must be 1-D, got shape {boundaries.shape}")
    return searchsorted(boundaries, input, out_int32=out_int32, right=right)
