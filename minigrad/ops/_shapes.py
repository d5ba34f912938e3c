"""Shape helpers shared by the ops: axis normalization, the broadcasting check and the one
gradient-unbroadcast rule."""
import itertools


def normalize_axes(op, axis, ndim):
    """`axis` (None, an int or a sequence) as a sorted tuple of non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    result = []
    for a in axes:
        if not -ndim <= a < max(ndim, 1):
            raise ValueError(f"{op}: axis {a} is out of range for a tensor with {ndim} dims")
        result.append(a % ndim if ndim else 0)
    if len(set(result)) != len(result):
        raise ValueError(f"{op}: axis {axis} names an axis twice")
    return tuple(sorted(result))


def broadcast_clash(*shapes):
    """The lengths that stop `shapes` from broadcasting together, or None when they do (NumPy's
    rule: shapes aligned from the right; along each axis the lengths are equal or 1)."""
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
    if grad.shape == tuple(shape):
        return grad
    lead = grad.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, n in enumerate(shape) if n == 1 and grad.shape[lead + i] != 1)
    summed = grad.sum(axis=axes, keepdims=True) if axes else grad
    return summed.reshape(shape)
