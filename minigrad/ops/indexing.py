"""Indexing: x[index] with NumPy's rules, and its adjoint, the scatter-add of a gradient.

Basic indices (ints, slices, None, Ellipsis) pick a view; integer arrays and boolean masks
(advanced indexing) gather copies, where an integer array may pick one element several times.
The gradient of a gather is a scatter-add: every output element adds its gradient to the
input element it was read from, so repeated indices accumulate. `IndexAdd` does that scatter as
an op of its own whose backward is the gather again, which makes x[index] differentiable to any
order. `IndexPut` is assignment, `x[index] = value`, out of place: what `Tensor.__setitem__`,
`copy_` and `fill_` record when autograd follows them (minigrad/inplace.py).

Where ints stand beside arrays, PyTorch reads the ints first (each selects along its axis, as
a basic index), and only then places the arrays' dimensions by NumPy's rule; NumPy counts the
ints as arrays, so `x[1, :, idx]` puts idx's dimension first there, in the middle in PyTorch.
`IntsFirst` marks such an index and `split` reads it PyTorch's way.

Integer arrays are bounds-checked here, against `xp`, before the gather: NumPy raises on an
out-of-range index, but CuPy's gather wraps it around silently.
"""
from ..shapes import unbroadcast
from ..tensor import Tensor
from .base import Op
from .batch_axes import padded, stretched
from .elementwise import where
from .tangents import linear


def _component(x, part):
    """One part of an index as a basic index or a backend array of ints or bools."""
    if part is None or part is Ellipsis or isinstance(part, (slice, bool, int)):
        return part
    if isinstance(part, Tensor):
        if part.device != x.device:
            raise ValueError(f"getitem: the index tensor is on {part.device} but the indexed "
                             f"tensor (shape {x.shape}) is on {x.device}")
        part = part.array
    array = x.backend.asarray(part)
    if array.dtype.kind == "f" and array.size == 0:   # [] reads as float64 in NumPy
        array = array.astype("int64")
    if array.dtype.kind not in "biu":
        raise TypeError(f"getitem: an index must hold ints or bools, got {array.dtype} (indexing "
                        f"a tensor of shape {x.shape})")
    return int(array) if array.ndim == 0 and array.dtype.kind in "iu" else array


def _is_int_array(part):
    return getattr(part, "dtype", None) is not None and part.dtype.kind in "iu"


def _dims_taken(part):
    """How many axes of the indexed tensor one index part consumes."""
    if part is None or part is Ellipsis or isinstance(part, bool):
        return 0
    return part.ndim if getattr(part, "dtype", None) is not None and part.dtype == bool else 1


def _check_bounds(x, parts):
    """IndexError unless every integer array lies in [-size, size) of the axis it indexes (one
    reduction and one host read per integer array; basic ints are checked by the array library
    on every backend)."""
    axis = 0
    for position, part in enumerate(parts):
        if part is Ellipsis:   # it spans the axes that the parts after it leave
            axis = x.ndim - sum(_dims_taken(p) for p in parts[position + 1:])
            continue
        if _is_int_array(part) and part.size and axis < x.ndim:
            size = x.shape[axis]
            low, high = x.backend.to_host(part.min(), part.max())
            if low < -size or high >= size:
                bad = high if high >= size else low
                raise IndexError(f"getitem: index {bad} is out of range for axis {axis} of size "
                                 f"{size}: expected indices in [{-size}, {size}) (tensor of "
                                 f"shape {x.shape})")
        axis += _dims_taken(part)


class IntsFirst(tuple):
    """The parts of an index that holds ints and arrays (ints or bools) together."""


def split(array, index):
    """(view, rest): array[index] is view[rest]. For an IntsFirst index the view is what the
    ints select (a view of `array`, so writing into view[rest] writes into `array`) and rest
    is the index without them; any other index is read in one step."""
    if type(index) is not IntsFirst:
        return array, index
    first, rest = [], []
    for part in index:
        if isinstance(part, int) and not isinstance(part, bool):
            first.append(part)
        elif part is Ellipsis:
            first.append(part)
            rest.append(part)
        else:   # None and a bool take no axis of `array`; a slice one, a mask mask.ndim
            first.extend([slice(None)] * _dims_taken(part))
            rest.append(part)
    return array[tuple(first)], tuple(rest)


def put(array, index, value):
    """array[index] = value, for an index from normalize_index."""
    view, rest = split(array, index)
    view[rest] = value


def normalize_index(x, index):
    """`index` as a tuple whose arrays live on x's device and whose integer arrays are in range
    (an IntsFirst where ints stand beside arrays), and whether it holds an integer array (whose
    repeated entries make the scatter accumulate)."""
    parts = tuple(_component(x, p) for p in (index if isinstance(index, tuple) else (index,)))
    gathers = any(_is_int_array(p) for p in parts)
    if gathers:
        _check_bounds(x, parts)
    arrays = gathers or any(getattr(p, "dtype", None) is not None for p in parts)
    if arrays and any(isinstance(p, int) and not isinstance(p, bool) for p in parts):
        parts = IntsFirst(parts)
    return parts, gathers


def has_arrays(index):
    """Whether an index from normalize_index holds an array (advanced indexing)."""
    return any(getattr(p, "dtype", None) is not None for p in index)


def batched_index(index):
    """`index` for a batch of examples: a full slice first, for the batch axis. NumPy moves
    the axes of advanced indices split apart by a slice to the front, before the batch axis,
    so vmap refuses those (rare: x[i, :, j] with arrays i and j)."""
    arrays = [i for i, part in enumerate(index)
              if getattr(part, "dtype", None) is not None and part.ndim]
    if arrays and arrays[-1] - arrays[0] + 1 != len(arrays):
        raise RuntimeError("vmap: getitem with index arrays split apart by other index parts "
                           "cannot be batched (NumPy would move their axes before the batch "
                           "axis); index one axis at a time")
    return type(index)((slice(None),) + tuple(index))


class GetItem(Op):
    """x[index];  dx = zeros like x with g added at the indexed places (IndexAdd).
    jvp: dy = dx[index]."""

    array_backward = True

    @classmethod
    def batching(cls, size, batched, x, index, gathers):
        return cls.apply(x, index=batched_index(index), gathers=gathers)

    @classmethod
    def name(cls):
        return "getitem"   # the function's spelling (ops.getitem, Python's __getitem__)

    @staticmethod
    def forward(ctx, x, index, gathers):
        ctx.in_shape, ctx.index, ctx.gathers = x.shape, index, gathers
        if type(index) is not IntsFirst and not gathers and not any(
                part is Ellipsis for part in index):
            index = (*index, Ellipsis)   # so x[0] of a vector is a 0-d view, as in PyTorch
        view, index = split(x, index)
        try:
            return view[index]
        except IndexError as error:
            raise IndexError(f"getitem: {error} (tensor of shape {x.shape})") from None

    @staticmethod
    def backward(ctx, g):
        return IndexAdd.either(g, shape=ctx.in_shape, index=ctx.index, gathers=ctx.gathers)

    jvp = staticmethod(linear)

    @staticmethod
    def replay(ctx, index, gathers):
        """For an index read in one step (no IntsFirst); IndexAdd's forward as the backward."""
        if type(index) is IntsFirst:
            return None
        ellipsis = not gathers and not any(part is Ellipsis for part in index)
        xp, shape = ctx.xp, ctx.in_shape

        def forward(x, index=index, gathers=gathers):   # the attrs come where they hold arrays
            return x[(*index, Ellipsis) if ellipsis else index], index

        return forward, lambda index, g: _scattered(xp, g, shape, index, gathers)


class IndexAdd(Op):
    """zeros(shape) with g added at `index` (numpy.add.at: repeated indices accumulate);
    dg = gg[index].
    jvp: dy = zeros with dg added at `index`."""

    @classmethod
    def batching(cls, size, batched, g, shape, index, gathers):
        return cls.apply(g, shape=(size,) + tuple(shape), index=batched_index(index),
                         gathers=gathers)

    @staticmethod
    def forward(ctx, g, shape, index, gathers):
        ctx.index, ctx.gathers = index, gathers
        return _scattered(ctx.xp, g, shape, index, gathers)

    @staticmethod
    def backward(ctx, gg):
        return GetItem.apply(gg, index=ctx.index, gathers=ctx.gathers)

    jvp = staticmethod(linear)


def _scattered(xp, g, shape, index, gathers):
    """zeros(shape) with g added at `index`: IndexAdd's forward."""
    out = xp.zeros(shape, dtype=g.dtype)
    if gathers:
        xp.add.at(*split(out, index), g)
    else:   # every element is hit at most once: plain assignment is the scatter
        put(out, index, g)
    return out


class IndexPut(Op):
    """A copy of x with `value` (broadcast) written at `index`;  dx = g with 0 at the written
    places, dvalue = g[index] summed down to value's shape.
    jvp: dy = dx with dvalue written at `index`."""

    @classmethod
    def batching(cls, size, batched, x, value, index, gathers):
        """x stretched over the batch when only the value is batched; a batched value padded
        to the rank of the places it is written to."""
        if batched[1]:
            view, rest = split(x.backend.placeholder(tuple(x.shape[batched[0]:]), x.dtype), index)
            value = padded(value, view[rest].ndim)
        x = x if batched[0] else stretched(x, size)
        return cls.apply(x, value, index=batched_index(index), gathers=gathers)

    @staticmethod
    def forward(ctx, x, value, index, gathers):
        ctx.index, ctx.gathers, ctx.value_shape = index, gathers, value.shape
        out = x.copy()
        put(out, index, value)
        ctx.written = ctx.xp.zeros(x.shape, dtype=bool)
        put(ctx.written, index, True)
        return out

    @staticmethod
    def backward(ctx, g):
        need_x, need_value = ctx.needs_input_grad
        dx = where(ctx.written, 0, g) if need_x else None
        dvalue = (unbroadcast(GetItem.apply(g, index=ctx.index, gathers=ctx.gathers),
                              ctx.value_shape) if need_value else None)
        return dx, dvalue

    jvp = staticmethod(linear)


def getitem(x, index):
    """x[index] with NumPy semantics; index tensors (ints or bools) are accepted."""
    index, gathers = normalize_index(x, index)
    return GetItem.apply(x, index=index, gathers=gathers)
