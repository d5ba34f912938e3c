"""Shape helpers shared by the ops: axis and size checks, the broadcasting check and the one
gradient-unbroadcast rule."""
import functools
import itertools
import operator


def as_int(op, what, value, shape=None):
    """`value` (an int or a NumPy integer, not a bool or a float) as an int, or a TypeError
    naming `op` and `what` it was meant to be."""
    if not isinstance(value, bool):
        try:
            return operator.index(value)
        except TypeError:
            pass
    of = "" if shape is None else f" (tensor of shape {tuple(shape)})"
    raise TypeError(f"{op}: {what} must be an int, got {value!r} of type "
                    f"{type(value).__name__}{of}")


class AxisError(IndexError, ValueError):
    """An axis (dim) out of range: an IndexError as in PyTorch, a ValueError as in NumPy."""


def normalize_axis(op, axis, dims):
    """One axis (negative counts from the end) as a non-negative int; `dims` is the tensor's
    shape, or only its number of dimensions. A 0-d tensor accepts 0 and -1, as in PyTorch."""
    ndim = dims if type(dims) is int else len(dims)
    if type(axis) is int and -ndim <= axis < ndim:   # the common case, checked without calls
        # (kept: it makes the call 3-4x cheaper, a few per cent of a small reduction)
        return axis % ndim
    shape = tuple(dims) if not isinstance(dims, int) else None
    a = as_int(op, "an axis (dim)", axis, shape)
    if not -max(ndim, 1) <= a < max(ndim, 1):
        of = f"shape {shape}" if shape is not None else f"{ndim} dims"
        raise AxisError(f"{op}: axis {a} is out of range for a tensor of {of} "
                        f"(expected {-max(ndim, 1)} <= axis < {max(ndim, 1)})")
    return a % ndim if ndim else 0


def check_sizes(op, sizes, allow_infer=False):
    """`sizes` (a shape) as a tuple of ints, each >= 0, or a clear error naming `op`; with
    `allow_infer`, one size may be -1 (reshape's "whatever is left")."""
    if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__iter__"):
        sizes = (sizes,)
    sizes, lowest = tuple(sizes), -1 if allow_infer else 0
    for n in sizes:   # the common case: plain ints in range, checked without calls
        if type(n) is not int or n < lowest:
            break
    else:
        if not allow_infer or sizes.count(-1) <= 1:
            return sizes
    sizes = tuple([as_int(op, "a size", n) for n in sizes])
    bad = [n for n in sizes if n < lowest]
    if bad or (allow_infer and sizes.count(-1) > 1):
        expected = "sizes >= 0 and at most one -1" if allow_infer else "sizes >= 0"
        raise ValueError(f"{op}: invalid shape {sizes}: expected {expected}")
    return sizes


def normalize_axes(op, axis, dims):
    """`axis` (None for all, an int or a sequence of ints) as a sorted tuple of non-negative
    axes, each checked by `normalize_axis`; `dims` is the shape or the number of dims. (For a
    0-d tensor, dim 0 or -1 reads as (0,): the callers that reduce drop it.)"""
    ndim = dims if isinstance(dims, int) else len(dims)
    if axis is None:
        return tuple(range(ndim))
    axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    result = [normalize_axis(op, a, dims) for a in axes]
    if len(set(result)) != len(result):
        raise ValueError(f"{op}: axis {axis} names an axis twice")
    return tuple(sorted(result))


def broadcast_clash(*shapes):
    """The lengths that stop `shapes` from broadcasting together, or None when they do (NumPy's
    rule: shapes aligned from the right; along each axis the lengths are equal or 1)."""
    if len(shapes) == 2:   # a binary op's two inputs (every call of an arithmetic op): no sets
        for x, y in zip(reversed(shapes[0]), reversed(shapes[1])):
            if x != y and x != 1 and y != 1:
                return sorted((x, y))
        return None
    for lengths in itertools.zip_longest(*(reversed(s) for s in shapes), fillvalue=1):
        distinct = set(lengths)
        distinct.discard(1)
        if len(distinct) > 1:
            return sorted(distinct)
    return None


def kept_shape(shape, axes):
    """The shape a reduction over `axes` has with keepdims=True."""
    return tuple(1 if i in axes else n for i, n in enumerate(shape))


def unbroadcast(grad, shape):
    """Sum `grad` (a tensor) down to `shape`, undoing NumPy broadcasting.

    Broadcasting prepends axes and stretches axes of length 1; the gradient of a stretched
    input is the sum over the stretched copies: d/dx sum_j f(x) = sum_j f'(x).
    """
    shape = tuple(shape)
    return grad if grad.shape == shape else _summed(*_unbroadcast_plan(grad.shape, shape), grad)


def unbroadcaster(grad_shape, shape):
    """`unbroadcast` for a gradient of shape `grad_shape` as a function of the gradient, its
    axes worked out once (a replayed program, mg.compile, calls it on every step)."""
    shape = tuple(shape)
    if tuple(grad_shape) == shape:
        return _same
    return functools.partial(_summed, *_unbroadcast_plan(tuple(grad_shape), shape))


@functools.lru_cache(maxsize=1024)
def _unbroadcast_plan(grad_shape, shape):
    """(the stretched axes, the number of leading axes, the shape to reshape to or None) that
    take a gradient of `grad_shape` down to `shape` (the shapes differ)."""
    lead = len(grad_shape) - len(shape)
    stretched = tuple(lead + i for i, n in enumerate(shape) if n == 1 and grad_shape[lead + i] != 1)
    kept = tuple(1 if i in stretched else n for i, n in enumerate(grad_shape))
    return stretched, lead, None if (kept[lead:] if lead > 0 else kept) == shape else shape


def _summed(stretched, lead, reshape, grad):
    if stretched:   # summed keeping their length-1 axes
        grad = grad.sum(axis=stretched, keepdims=True)
    if lead:        # summed away: what is left has `shape`
        grad = grad.sum(axis=tuple(range(lead)))
    return grad if reshape is None else grad.reshape(reshape)


def _same(grad):
    return grad


def dim_keywords(op, dim, keepdim, axis, keepdims):
    """PyTorch's dim=/keepdim= or their NumPy spellings axis=/keepdims= (one of each pair) as
    (axis, keepdims)."""
    if axis is not None:
        if dim is not None:
            raise TypeError(f"{op}: got dim={dim!r} and axis={axis!r}; they are the same "
                            "argument, give one")
        dim = axis
    if keepdims is not None:
        if keepdim is not None:
            raise TypeError(f"{op}: got keepdim={keepdim!r} and keepdims={keepdims!r}; they are "
                            "the same argument, give one")
        keepdim = keepdims
    return dim, bool(keepdim)
