"""Joining and padding: concatenate, stack, pad.

Each output element is a copy of one input element, so each backward cuts the gradient back
into the pieces it came from with basic slicing (`getitem`, itself differentiable). Padding by
reflection, edge replication or wrapping copies input elements into the border: along each
padded axis it is a gather (`getitem` with the indices numpy.pad gives arange(n)), whose
gradient is the scatter-add of the border back onto the elements it copied.
"""
import numpy

from ..shapes import normalize_axis
from ..tensor import Tensor
from ._promotion import promote
from .base import Op
from .errors import ShapeError
from .indexing import getitem
from .tangents import linear

PAD_MODES = ("constant", "reflect", "edge", "wrap")   # PyTorch: zeros, reflect, replicate, circular


def _check_same_shapes(op, arrays, skip_axis=None):
    """All arrays have the first one's shape, except possibly along `skip_axis`."""
    first = arrays[0].shape
    for i, a in enumerate(arrays):
        if a.ndim != len(first) or any(m != n for k, (m, n) in enumerate(zip(a.shape, first))
                                       if k != skip_axis):
            along = "" if skip_axis is None else f" except along axis {skip_axis}"
            raise ShapeError(f"{op}: input {i} has shape {a.shape} but input 0 has shape {first}; "
                             f"all shapes must match{along}")


class Concatenate(Op):
    """Inputs joined along an existing `axis`;  d(input k) = g sliced at input k's rows.
    jvp: dy = the tangents concatenated (zeros for those absent)."""
    batching = "axes"

    @staticmethod
    def forward(ctx, *arrays, axis=0):
        if not arrays:
            raise ValueError("concatenate: needs at least one tensor")
        if arrays[0].ndim == 0:
            raise ValueError("concatenate: 0-d tensors cannot be concatenated; use stack")
        ctx.axis = axis = normalize_axis("concatenate", axis, arrays[0].shape)
        _check_same_shapes("concatenate", arrays, skip_axis=axis)
        ctx.sizes = tuple(a.shape[axis] for a in arrays)
        return ctx.xp.concatenate(arrays, axis=axis)

    @staticmethod
    def backward(ctx, g):
        grads, start = [], 0
        lead = (slice(None),) * ctx.axis
        for size, needed in zip(ctx.sizes, ctx.needs_input_grad):
            grads.append(g[lead + (slice(start, start + size),)] if needed else None)
            start += size
        return tuple(grads)

    jvp = staticmethod(linear)


class Stack(Op):
    """Inputs of one shape joined along a new `axis`;  d(input k) = g[..., k, ...].
    jvp: dy = the tangents stacked (zeros for those absent)."""
    batching = "axes"

    @staticmethod
    def forward(ctx, *arrays, axis=0):
        if not arrays:
            raise ValueError("stack: needs at least one tensor")
        ctx.axis = normalize_axis("stack", axis, arrays[0].ndim + 1)
        _check_same_shapes("stack", arrays)
        return ctx.xp.stack(arrays, axis=ctx.axis)

    @staticmethod
    def backward(ctx, g):
        lead = (slice(None),) * ctx.axis
        return tuple(g[lead + (k,)] if needed else None
                     for k, needed in enumerate(ctx.needs_input_grad))

    jvp = staticmethod(linear)


def pad_pairs(op, pad_width, ndim):
    """NumPy's `pad_width` forms (n, (n,), (before, after), or one pair per axis) as one
    (before, after) pair of non-negative ints per axis."""
    if isinstance(pad_width, int):
        pairs = ((pad_width, pad_width),) * ndim
    else:
        pad_width = tuple(tuple(p) if isinstance(p, (tuple, list)) else p for p in pad_width)
        if all(isinstance(p, int) for p in pad_width) and len(pad_width) in (1, 2):
            pairs = ((pad_width[0], pad_width[-1]),) * ndim
        elif len(pad_width) == 1 and len(pad_width[0]) in (1, 2):
            pairs = ((pad_width[0][0], pad_width[0][-1]),) * ndim
        elif len(pad_width) == ndim and all(isinstance(p, tuple) and len(p) == 2
                                           for p in pad_width):
            pairs = pad_width
        else:
            raise ValueError(f"{op}: pad_width {pad_width} does not fit a tensor with {ndim} "
                             "dims; give n, (before, after) or one (before, after) pair per axis")
    if any(not isinstance(n, int) or n < 0 for pair in pairs for n in pair):
        raise ValueError(f"{op}: pad widths must be non-negative ints, got {pad_width}")
    return tuple(pairs)


def constant_pad(xp, x, pairs, value):
    """x surrounded by `value`: (before, after) extra elements per axis, in a C-ordered array
    (x itself when there is nothing to pad and x already is one)."""
    if not any(before or after for before, after in pairs):
        return xp.ascontiguousarray(x)
    shape = tuple(n + before + after for n, (before, after) in zip(x.shape, pairs))
    out = xp.full(shape, value, dtype=x.dtype)
    out[interior(pairs, x.shape)] = x
    return out


def interior(pairs, shape):
    """The slices that pick the original region out of a padded array."""
    return tuple(slice(before, before + n) for n, (before, _) in zip(shape, pairs))


class Pad(Op):
    """x padded with a constant (NumPy's mode="constant");  dx = g with the border cut off.
    jvp: dy = dx padded with zeros."""

    @classmethod
    def batching(cls, size, batched, x, pad_width, value=0.0):
        pairs = ((0, 0),) + pad_pairs("pad", pad_width, x.ndim - 1)
        return cls.apply(x, pad_width=pairs, value=value)

    @staticmethod
    def forward(ctx, x, pad_width, value=0.0):
        ctx.pairs = pad_pairs("pad", pad_width, x.ndim)
        ctx.in_shape = x.shape
        return constant_pad(ctx.xp, x, ctx.pairs, value)

    @staticmethod
    def backward(ctx, g):
        return g[interior(ctx.pairs, ctx.in_shape)]

    @staticmethod
    def jvp(ctx, dx):
        return Pad.apply(dx, pad_width=ctx.attrs["pad_width"], value=0.0)


def _promoted(op, tensors):
    """The inputs in their promoted dtype (torch.cat's rule), when any of them is a tensor."""
    tensors = tuple(tensors)
    return promote(op, *tensors) if any(isinstance(t, Tensor) for t in tensors) else tensors


def concatenate(tensors, axis=0, *, dim=None):
    """Join tensors along an existing axis (numpy.concatenate, torch.cat with dim=)."""
    axis = axis if dim is None else dim
    return Concatenate.apply(*_promoted("concatenate", tensors), axis=axis)


def stack(tensors, axis=0, *, dim=None):
    """Join tensors of one shape along a new axis (numpy.stack, torch.stack with dim=)."""
    axis = axis if dim is None else dim
    return Stack.apply(*_promoted("stack", tensors), axis=axis)


def pad(x, pad_width, value=0.0, mode="constant"):
    """numpy.pad(x, pad_width, mode) with NumPy's `pad_width`: mode "constant" fills with
    `value`; "reflect" mirrors without repeating the edge, "edge" repeats it, "wrap" is circular.
    As in PyTorch, a reflected pad is shorter than its axis and a wrapped one at most as long."""
    if mode == "constant":
        return Pad.apply(x, pad_width=pad_width, value=value)
    if mode not in PAD_MODES:
        raise ValueError(f"pad: mode must be one of {PAD_MODES}, not {mode!r}")
    for axis, (before, after) in enumerate(pad_pairs("pad", pad_width, x.ndim)):
        if before or after:
            x = getitem(x, (slice(None),) * axis + (_source_indices(mode, x.shape, axis,
                                                                    before, after),))
    return x


def _source_indices(mode, shape, axis, before, after):
    """For each position of the padded `axis`, the index of the element it copies."""
    n, widest = shape[axis], max(before, after)
    fits, needs = {"reflect": (widest < n, "pad widths below the axis length"),
                   "wrap": (widest <= n, "pad widths at most the axis length"),
                   "edge": (n > 0, "a non-empty axis")}[mode]
    if not fits:
        raise ValueError(f"pad: mode {mode!r} needs {needs}, but axis {axis} of shape {shape} "
                         f"has length {n} and pad ({before}, {after})")
    return numpy.pad(numpy.arange(n), (before, after), mode)
