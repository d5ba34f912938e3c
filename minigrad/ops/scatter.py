"""Gathers and scatters along one axis, with PyTorch's names and rules: gather, scatter,
scatter_add, index_select, index_add, masked_select, narrow, unbind and nonzero.

gather reads out[i][j] = x[index[i][j]][j] (along dim 0; likewise along any dim); the index may
be shorter than x along the other axes, and then only that leading block of x is read. scatter
writes src at those places of a copy of x (the op `Scatter`) and scatter_add adds it. They are
built on TakeAlongAxis and PutAlongAxis (ops/ordering.py), whose backwards are each other;
index_select and index_add pick or add whole slices along `dim` through GetItem and IndexAdd
(ops/indexing.py), narrow and unbind are basic slices. Index values are checked here, on every
backend (CuPy would wrap an out-of-range index around silently).
"""
from ..shapes import normalize_axis
from ..tensor import Tensor
from .base import Op
from .elementwise import where
from .indexing import GetItem, IndexAdd
from .ordering import PutAlongAxis, TakeAlongAxis, along_axis
from .shape import broadcast_to
from .tangents import linear


class Scatter(Op):
    """x with src written at `indices` along `axis` (out[index[i][j]][j] = src[i][j] for axis 0;
    where an index repeats, one write wins, as in PyTorch);
    dx = g with 0 at the written places, dsrc = g gathered at the indices.
    jvp: dy = dx with dsrc written at the indices."""
    batching = "axes"

    @staticmethod
    def forward(ctx, x, src, indices, axis):
        place = along_axis(ctx.xp, indices, axis)
        ctx.indices, ctx.axis = indices, axis
        ctx.written = ctx.xp.zeros(x.shape, dtype=bool)
        ctx.written[place] = True
        out = x.copy()
        out[place] = src
        return out

    @staticmethod
    def backward(ctx, g):
        need_x, need_src = ctx.needs_input_grad
        return (where(ctx.written, 0, g) if need_x else None,
                TakeAlongAxis.apply(g, indices=ctx.indices, axis=ctx.axis) if need_src else None)

    jvp = staticmethod(linear)


def _index_tensor(op, x, index, dtypes=("int64", "int32")):
    if not isinstance(index, Tensor):
        raise TypeError(f"{op}(): index must be a Tensor, got {type(index).__name__}")
    if index.device != x.device:
        raise RuntimeError(f"{op}(): index is on {index.device} but the tensor is on {x.device}")
    if index.dtype.name not in dtypes:
        raise RuntimeError(f"{op}(): expected an index of dtype {' or '.join(dtypes)}, got "
                           f"{index.dtype} (shape {index.shape})")
    return index.array


def _check_range(op, indices, size, axis, shape, error=RuntimeError):
    """`error` unless every index lies in [0, size) (one reduction, one host read)."""
    if indices.size:
        low, high = int(indices.min()), int(indices.max())
        if low < 0 or high >= size:
            raise error(f"{op}(): index {high if high >= size else low} is out of bounds for "
                        f"dimension {axis} with size {size} (tensor of shape {shape})")


def _along(op, x, dim, index):
    """(axis, index array) for gather and the scatters: an integer index with x's number of dims,
    no longer than x along the other axes, its values in range along `axis`."""
    axis = normalize_axis(op, dim, x.shape)
    indices = _index_tensor(op, x, index)
    if indices.ndim != x.ndim or x.ndim == 0:
        raise RuntimeError(f"{op}(): index (shape {indices.shape}) must have the same number of "
                           f"dims as the tensor (shape {x.shape}), at least one")
    if any(n > m for d, (n, m) in enumerate(zip(indices.shape, x.shape)) if d != axis):
        raise RuntimeError(f"{op}(): index of shape {indices.shape} is larger than the tensor "
                           f"of shape {x.shape} along a dim other than {axis}")
    _check_range(op, indices, x.shape[axis], axis, x.shape)
    return axis, indices


def _block(op, t, shape, what):
    """t cut to its leading block of `shape` (t itself when it has that shape)."""
    if t.ndim != len(shape) or any(n > m for n, m in zip(shape, t.shape)):
        raise RuntimeError(f"{op}(): {what} of shape {t.shape} is smaller than the index of "
                           f"shape {shape}")
    if t.shape == tuple(shape):
        return t
    return GetItem.apply(t, index=tuple(slice(0, n) for n in shape), gathers=False)


def _source(op, x, src, shape):
    """src as a tensor of x's dtype, cut to the index's `shape`."""
    if not isinstance(src, Tensor):
        raise TypeError(f"{op}(): src must be a Tensor, got {type(src).__name__}")
    if src.dtype != x.dtype:
        raise RuntimeError(f"{op}(): expected self.dtype to be equal to src.dtype, got "
                           f"{x.dtype} and {src.dtype}")
    return _block(op, src, shape, "src")


def gather(x, dim, index):
    """out[i][j] = x[index[i][j]][j] along `dim` (an int64 index of x's number of dims)."""
    axis, indices = _along("gather", x, dim, index)
    shape = indices.shape[:axis] + (x.shape[axis],) + indices.shape[axis + 1:]
    return TakeAlongAxis.apply(_block("gather", x, shape, "input"), indices=indices, axis=axis)


def scatter(x, dim, index, src=None, value=None, *, reduce=None):
    """A copy of x with src (a tensor, or a number `value`) written at index along `dim`:
    out[index[i][j]][j] = src[i][j] for dim 0."""
    if reduce is not None:
        raise NotImplementedError(f"scatter(): reduce={reduce!r} is not supported by minigrad; "
                                  "use scatter_add for reduce='add'")
    axis, indices = _along("scatter", x, dim, index)
    src = value if src is None else src
    if isinstance(src, (bool, int, float)):
        src = Tensor.from_array(x.backend.xp.full(indices.shape, src, dtype=x.dtype), x.backend)
    return Scatter.apply(x, _source("scatter", x, src, indices.shape), indices=indices,
                         axis=axis)


def scatter_add(x, dim, index, src):
    """A copy of x with src added at index along `dim` (repeated indices accumulate)."""
    axis, indices = _along("scatter_add", x, dim, index)
    src = _source("scatter_add", x, src, indices.shape)
    return x + PutAlongAxis.apply(src, shape=x.shape, indices=indices, axis=axis)


def _slices(op, x, dim, index):
    """(axis, index array) for index_select and index_add: a vector of ints in [0, size)."""
    axis = normalize_axis(op, dim, x.shape)
    indices = _index_tensor(op, x, index)
    if indices.ndim > 1:
        raise IndexError(f"{op}(): index is supposed to be a vector, got shape {indices.shape}")
    _check_range(op, indices, x.shape[axis] if x.ndim else 1, axis, x.shape, IndexError)
    return axis, indices.reshape(-1)


def index_select(x, dim, index):
    """The slices of x at the positions `index` (a vector of ints) along `dim`."""
    axis, indices = _slices("index_select", x, dim, index)
    return GetItem.apply(x, index=(slice(None),) * axis + (indices,), gathers=True)


def index_add(x, dim, index, source, *, alpha=1):
    """A copy of x with alpha * source[k] added to the slice index[k] along `dim` (repeated
    indices accumulate)."""
    axis, indices = _slices("index_add", x, dim, index)
    expected = x.shape[:axis] + (len(indices),) + x.shape[axis + 1:]
    if source.shape != expected:
        raise RuntimeError(f"index_add(): source of shape {source.shape} does not fit: expected "
                           f"{expected} for the tensor of shape {x.shape} and {len(indices)} "
                           f"indices along dim {axis}")
    if source.dtype != x.dtype:
        raise RuntimeError(f"index_add(): the tensor ({x.dtype}) and source ({source.dtype}) "
                           "must have the same dtype")
    source = source if alpha == 1 else source * alpha
    return x + IndexAdd.apply(source, shape=x.shape, index=(slice(None),) * axis + (indices,),
                              gathers=True)


def masked_select(x, mask):
    """The elements of x where the bool `mask` holds (both broadcast), as a 1-D tensor."""
    if not isinstance(mask, Tensor) or mask.dtype.kind != "b":
        raise RuntimeError(f"masked_select: expected a bool tensor for mask, got "
                           f"{getattr(mask, 'dtype', type(mask).__name__)}")
    xp = x.backend.xp
    try:
        shape = xp.broadcast_shapes(x.shape, mask.shape)
    except ValueError:
        raise RuntimeError(f"masked_select: the mask of shape {mask.shape} and the tensor of "
                           f"shape {x.shape} do not broadcast together") from None
    x = x if x.shape == shape else broadcast_to(x, shape)
    return GetItem.apply(x, index=(xp.broadcast_to(mask.array, shape),), gathers=False)


def nonzero(x, *, as_tuple=False):
    """The indices of the non-zero elements: an int64 (count, ndim) tensor, or with as_tuple one
    1-D tensor per axis (a 0-d tensor counts as 1-d there). A constant."""
    xp = x.backend.xp
    found = [i.astype("int64") for i in xp.nonzero(x.array.reshape(-1) if x.ndim == 0
                                                   else x.array)]
    if as_tuple:
        return tuple(Tensor.from_array(i, x.backend) for i in found)
    out = xp.stack(found, axis=1) if x.ndim else xp.zeros((len(found[0]), 0), dtype="int64")
    return Tensor.from_array(out, x.backend)


def narrow(x, dim, start, length):
    """x[..., start:start + length, ...] along `dim` (a view); start may be negative."""
    if x.ndim == 0:
        raise RuntimeError("narrow(): cannot be applied to a 0-dim tensor")
    axis = normalize_axis("narrow", dim, x.shape)
    size, start = x.shape[axis], int(start)
    if not -size <= start <= size:
        raise IndexError(f"narrow(): start {start} is out of range for dim {axis} of size {size} "
                         f"(expected {-size} <= start <= {size})")
    start = start + size if start < 0 else start
    if length < 0 or start + length > size:
        raise RuntimeError(f"narrow(): start ({start}) + length ({length}) exceeds dimension "
                           f"size ({size}), or length is negative (tensor of shape {x.shape})")
    return GetItem.apply(x, index=(slice(None),) * axis + (slice(start, start + length),),
                         gathers=False)


def select(x, dim, index):
    """x[..., index, ...] along `dim`, that axis gone (a view); index may be negative."""
    if x.ndim == 0:
        raise IndexError("select(): cannot be applied to a 0-dim tensor")
    axis = normalize_axis("select", dim, x.shape)
    size, index = x.shape[axis], int(index)
    if not -size <= index < size:
        raise IndexError(f"select(): index {index} out of range for tensor of size "
                         f"{list(x.shape)} at dimension {axis}")
    return GetItem.apply(x, index=(slice(None),) * axis + (index % size,), gathers=False)


def unbind(x, dim=0):
    """The slices of x along `dim`, as a tuple (each a view without that axis)."""
    if x.ndim == 0:
        raise IndexError("unbind(): dimension specified as 0 but the tensor has no dimensions")
    axis = normalize_axis("unbind", dim, x.shape)
    return tuple(GetItem.apply(x, index=(slice(None),) * axis + (i,), gathers=False)
                 for i in range(x.shape[axis]))
