"""Rearranging primitives beyond reshape and permute: flip, roll, diagonal, clone, split (and
chunk: its pieces are one node), and the compositions built on them and on reshape and
broadcast (tril/triu, repeat, tile, squeeze, unsqueeze). Every output element is a copy of an
input element, so each backward moves the gradient back the way it came."""
from ..shapes import AxisError, as_int, normalize_axes
from .base import Op
from .elementwise import where
from .errors import ShapeError
from .join import Concatenate
from .shape import broadcast_to, reshape
from .tangents import linear


def _axes(op, dims, ndim):
    """`dims` (an int or a sequence) as a tuple of non-negative axes, in the order given."""
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    return tuple(normalize_axes(op, d, ndim)[0] for d in dims)


class Flip(Op):
    """x reversed along `axes`;  dx = g reversed along the same axes.
    jvp: dy = dx flipped."""
    batching = "axes"

    @staticmethod
    def forward(ctx, x, axes):
        ctx.axes = axes
        return ctx.xp.flip(x, axis=axes) if axes else x

    @staticmethod
    def backward(ctx, g):
        return Flip.apply(g, axes=ctx.axes)

    jvp = staticmethod(linear)


def flip(x, dims):
    return Flip.apply(x, axes=_axes("flip", dims, x.ndim))


class Roll(Op):
    """x shifted cyclically by `shifts` along `axes` (the flattened x when axes is None);
    dx = g rolled back by -shifts.
    jvp: dy = dx rolled."""

    @classmethod
    def batching(cls, size, batched, x, shifts, axes):
        """Without axes each example is rolled flat: the batch rows of (B, -1)."""
        if axes is None:
            return cls.apply(x.reshape((size, -1)), shifts=shifts, axes=(1,)).reshape(x.shape)
        return cls.apply(x, shifts=shifts, axes=tuple([a + 1 if a >= 0 else a for a in axes]))

    @staticmethod
    def forward(ctx, x, shifts, axes):
        ctx.shifts, ctx.axes = shifts, axes
        return ctx.xp.roll(x, shifts, axis=axes)

    @staticmethod
    def backward(ctx, g):
        back = tuple(-s for s in ctx.shifts) if isinstance(ctx.shifts, tuple) else -ctx.shifts
        return Roll.apply(g, shifts=back, axes=ctx.axes)

    jvp = staticmethod(linear)


def roll(x, shifts, dims=None):
    if dims is None:
        if not isinstance(shifts, int) and len(shifts) == 1:   # PyTorch takes (k,) as k here
            shifts = shifts[0]
        if not isinstance(shifts, int):
            raise ValueError(f"roll: without dims, shifts must be one int, got {shifts!r}")
        return Roll.apply(x, shifts=shifts, axes=None)
    axes = _axes("roll", dims, x.ndim)
    shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    if len(shifts) != len(axes):
        raise ValueError(f"roll: {len(shifts)} shifts for {len(axes)} dims")
    return Roll.apply(x, shifts=shifts, axes=axes)


def _diagonal_index(xp, shape, offset):
    """(rows, cols) of the diagonal `offset` of the last two axes of `shape`."""
    rows, cols = shape[-2], shape[-1]
    length = max(0, min(rows - max(-offset, 0), cols - max(offset, 0)))
    steps = xp.arange(length)
    return steps + max(-offset, 0), steps + max(offset, 0)


class Diagonal(Op):
    """The diagonal `offset` of the plane (axis1, axis2), as a new last axis (NumPy's and
    PyTorch's layout);  dx = zeros with g written back on that diagonal (DiagonalScatter).
    jvp: dy = the diagonal of dx."""
    batching = "axes"

    @staticmethod
    def forward(ctx, x, offset, axis1, axis2):
        ctx.in_shape, ctx.offset, ctx.axis1, ctx.axis2 = x.shape, offset, axis1, axis2
        return ctx.xp.diagonal(x, offset, axis1, axis2).copy()

    @staticmethod
    def backward(ctx, g):
        return DiagonalScatter.apply(g, shape=ctx.in_shape, offset=ctx.offset, axis1=ctx.axis1,
                                     axis2=ctx.axis2)

    jvp = staticmethod(linear)


class DiagonalScatter(Op):
    """zeros(shape) with g on the diagonal `offset` of the plane (axis1, axis2);
    dg = diagonal(gg).
    jvp: dy = zeros with dg on the diagonal."""
    batching = "axes"

    @staticmethod
    def forward(ctx, g, shape, offset, axis1, axis2):
        xp = ctx.xp
        ctx.offset, ctx.axis1, ctx.axis2 = offset, axis1, axis2
        rest = [a for a in range(len(shape)) if a not in (axis1, axis2)]
        out = xp.zeros([shape[a] for a in rest] + [shape[axis1], shape[axis2]], dtype=g.dtype)
        rows, cols = _diagonal_index(xp, out.shape, offset)
        out[..., rows, cols] = g
        return xp.moveaxis(out, (-2, -1), (axis1, axis2))

    @staticmethod
    def backward(ctx, gg):
        return Diagonal.apply(gg, offset=ctx.offset, axis1=ctx.axis1, axis2=ctx.axis2)

    jvp = staticmethod(linear)


def diagonal(x, offset=0, dim1=0, dim2=1):
    axis1, axis2 = _axes("diagonal", (dim1, dim2), x.ndim)
    if axis1 == axis2:
        raise ValueError(f"diagonal: dim1 and dim2 are the same axis {axis1} (tensor of shape "
                         f"{x.shape})")
    return Diagonal.apply(x, offset=offset, axis1=axis1, axis2=axis2)


class Clone(Op):
    """A copy of x with its own memory;  dx = g.
    jvp: dy = a copy of dx."""
    batching = "elementwise"

    @staticmethod
    def forward(ctx, x):
        return x.copy()

    @staticmethod
    def backward(ctx, g):
        return g

    jvp = staticmethod(linear)


def clone(x):
    return Clone.apply(x)


def _triangle(op, x, diagonal, keep):
    if x.ndim < 2:
        raise ShapeError(f"{op}: needs a tensor with at least 2 dims, got shape {x.shape}")
    xp = x.backend.xp
    rows, cols = x.shape[-2:]
    offsets = xp.arange(cols)[None, :] - xp.arange(rows)[:, None]   # column minus row
    zero = False if x.dtype.kind == "b" else 0   # a zero of x's kind keeps its dtype
    return where(keep(offsets, diagonal), x, zero)


def tril(x, diagonal=0):
    """x with the entries above the diagonal `diagonal` set to 0 (on the last two axes)."""
    return _triangle("tril", x, diagonal, lambda offsets, k: offsets <= k)


def triu(x, diagonal=0):
    """x with the entries below the diagonal `diagonal` set to 0 (on the last two axes)."""
    return _triangle("triu", x, diagonal, lambda offsets, k: offsets >= k)


def repeat(x, sizes):
    """x tiled `sizes[i]` times along each axis (PyTorch's Tensor.repeat; extra leading sizes
    add axes): a reshape that gives each axis a length-1 twin, a broadcast of the twins, and a
    reshape that merges each pair, so the gradient sums over the copies."""
    sizes = tuple(sizes)
    if len(sizes) < x.ndim or any(not isinstance(s, int) or s < 0 for s in sizes):
        raise ShapeError(f"repeat: sizes {sizes} must be non-negative ints, at least one per "
                         f"axis of the tensor of shape {x.shape}")
    shape = (1,) * (len(sizes) - x.ndim) + x.shape
    paired = reshape(x, [n for length in shape for n in (1, length)])
    stretched = broadcast_to(paired, [n for s, length in zip(sizes, shape) for n in (s, length)])
    return reshape(stretched, [s * length for s, length in zip(sizes, shape)])


def tile(x, dims):
    """PyTorch's tile: repeat with `dims` padded with leading 1s to the tensor's rank."""
    dims = tuple(dims)
    return repeat(x, (1,) * (x.ndim - len(dims)) + dims)


def squeeze(x, dim=None):
    """x without its length-1 axes (all of them, or those among `dim` that have length 1)."""
    axes = normalize_axes("squeeze", dim, x.ndim)
    axes = axes if x.ndim else ()   # a 0-d tensor's dim 0 or -1: nothing to drop
    drop = {a for a in axes if x.shape[a] == 1}
    return reshape(x, [n for a, n in enumerate(x.shape) if a not in drop])


def unsqueeze(x, dim):
    """x with a new length-1 axis at `dim` (in [-ndim - 1, ndim])."""
    ndim = x.ndim
    axis = as_int("unsqueeze", "dim", dim, x.shape)
    if not -ndim - 1 <= axis <= ndim:
        raise AxisError(f"unsqueeze: dim {dim} is out of range for a tensor of shape {x.shape} "
                        f"(expected {-ndim - 1} <= dim <= {ndim})")
    axis %= ndim + 1
    return reshape(x, x.shape[:axis] + (1,) + x.shape[axis:])


def split(x, split_size_or_sections, dim=0):
    """x cut along `dim` into pieces of `split_size_or_sections` (the last may be shorter), or
    into pieces of the listed lengths; a tuple of views (Split)."""
    axis = normalize_axes("split", dim, x.ndim)[0]
    length = x.shape[axis]
    if isinstance(split_size_or_sections, int):
        if split_size_or_sections <= 0:
            raise ValueError(f"split: split_size must be positive, got {split_size_or_sections}")
        sizes = [min(split_size_or_sections, length - start)
                 for start in range(0, length, split_size_or_sections)] or [0]
    else:
        sizes = list(split_size_or_sections)
        if sum(sizes) != length:
            raise ShapeError(f"split: sections {sizes} sum to {sum(sizes)}, but axis {axis} of "
                             f"the tensor of shape {x.shape} has length {length}")
    return Split.apply(x, axis=axis, sizes=tuple(sizes))


class Split(Op):
    """x cut along `axis` into views of the given `sizes`;  dx = the pieces' gradients
    concatenated (zeros for a piece that got none): one node however many pieces, so a time
    loop over the pieces sends back one gradient array, not one full-size array per piece.
    jvp: dy = dx cut the same way."""
    batching = "axes"

    @staticmethod
    def forward(ctx, x, axis, sizes):
        ctx.axis, ctx.sizes, ctx.shape = axis, sizes, x.shape
        lead, starts = (slice(None),) * axis, [sum(sizes[:k]) for k in range(len(sizes))]
        return tuple([x[lead + (slice(a, a + n),)] for a, n in zip(starts, sizes, strict=True)])

    @staticmethod
    def backward(ctx, *grads):
        shape = list(ctx.shape)
        like = next(g for g in grads if g is not None)
        pieces = []
        for g, n in zip(grads, ctx.sizes, strict=True):
            shape[ctx.axis] = n
            pieces.append(g if g is not None else like.new_zeros(tuple(shape)))
        return Concatenate.apply(*pieces, axis=ctx.axis)

    jvp = staticmethod(linear)


def chunk(x, chunks, dim=0):
    """x cut along `dim` into `chunks` pieces of ceil(length / chunks) (PyTorch's chunk: fewer
    pieces when the length runs out)."""
    if not isinstance(chunks, int) or chunks <= 0:
        raise ShapeError(f"chunk: chunks must be a positive int, got {chunks!r}")
    length = x.shape[normalize_axes("chunk", dim, x.ndim)[0]]
    return split(x, max(1, -(-length // chunks)), dim)

