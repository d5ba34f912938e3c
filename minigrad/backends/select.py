"""A fast exact select for gradients: g where a mask holds, +0 elsewhere, on NumPy and CuPy.

`xp.where(mask, g, 0)` is the plain way to write it, but NumPy's `where` branches on each
element and runs about ten times slower than a multiply when the mask is true at random (as a
ReLU's after batch norm is). `g * mask` is as fast but not a select: an inf or NaN in g where
the mask is false gives NaN instead of 0. A bitwise AND with a mask of all-one or all-zero bits
is both: branch-free, and bit-exact (+0 where the mask is false, g's own bits where it holds).
"""
import numpy

_SAME_WIDTH = {n: numpy.dtype(f"int{8 * n}") for n in (1, 2, 4, 8)}


def keep_mask(xp, drop, dtype):
    """Integers as wide as `dtype`: no bits set where the boolean array `drop` holds, all bits
    elsewhere. Made once (in forward) and applied with `keep`. Built narrow, then widened: the
    bools as int8 minus 1 (0 or -1, a quarter of the memory of the wide mask), then one
    conversion, whose sign extension keeps -1 all ones."""
    return _widened(xp, drop.view(xp.int8) - xp.int8(1), dtype)


def keep_where(xp, kept, dtype):
    """The same mask from the boolean array `kept` of the positions to keep: all bits there, no
    bits elsewhere (the bools as int8, negated, then widened as in keep_mask)."""
    return _widened(xp, xp.negative(kept.view(xp.int8)), dtype)


def _widened(xp, narrow, dtype):
    """An int8 mask of 0 and -1 as integers as wide as `dtype` (sign extension: -1 stays all
    ones)."""
    return narrow.astype(_SAME_WIDTH[xp.dtype(dtype).itemsize])


def keep(g, mask):
    """`g` where `mask` (from `keep_mask` or `keep_where` for g's dtype) is set, +0 elsewhere;
    g broadcasts against the mask."""
    return (g.view(mask.dtype) & mask).view(g.dtype)
