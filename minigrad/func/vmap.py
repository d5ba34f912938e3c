"""`vmap`: a function of one example run on a batch of them, as torch.func.vmap.

Each batched argument is wrapped as a BatchedTensor at a new level (minigrad/batched.py), the
function runs once, every op it calls runs once on the whole batch through its batching rule
(minigrad/func/batching.py), and the outputs are unwrapped with the batch where `out_dims`
says. No Python loop runs over the examples.
"""
import functools

from .. import modes
from .. import vmap_levels as levels
from ..batched import BatchedTensor
from ..ops.batch_axes import stretched
from ..ops.join import concatenate
from ..tensor import Tensor
from .batching import dispatch
from .pytree import broadcast_prefix, flatten, unflatten

RANDOMNESS = ("error", "different", "same")


def vmap(func, in_dims=0, out_dims=0, randomness="error", *, chunk_size=None):
    """`func` mapped over axis `in_dims` of its arguments, as torch.func.vmap: in_dims is an
    int or None for all positional arguments, or a tuple with one entry per argument (an int,
    None for an argument every example shares, or a nested tuple/list/dict of them for a
    nested argument); out_dims places the batch axis in each output the same way. Keyword
    arguments are not batched. randomness: 'error' (a random draw inside is an error),
    'different' (a draw per example) or 'same' (one draw for all). chunk_size runs the batch in
    chunks of that many examples (less memory, the same results)."""
    if randomness not in RANDOMNESS:
        raise RuntimeError(f"vmap: randomness must be one of {RANDOMNESS}, got {randomness!r}")
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"vmap: chunk_size must be a positive int or None, got {chunk_size!r}")
    name = getattr(func, "__name__", type(func).__name__)

    @functools.wraps(func)
    def batched(*args, **kwargs):
        where = f"vmap({name}, in_dims={in_dims!r}, ...)(<inputs>)"
        leaves, spec = flatten(args)
        dims = _in_dims(where, in_dims, args, leaves)
        size = _batch_size(where, leaves, dims)
        if chunk_size is None or chunk_size >= size:
            return _run(func, where, leaves, dims, spec, kwargs, size, randomness, out_dims)
        outputs = [_run(func, where, _chunk(leaves, dims, start, start + chunk_size), dims, spec,
                        kwargs, min(chunk_size, size - start), randomness, out_dims)
                   for start in range(0, size, chunk_size)]
        return _joined(outputs, out_dims)

    return batched


def _in_dims(where, in_dims, args, leaves):
    """One batch axis (or None) per leaf of the arguments, each checked against its leaf."""
    if isinstance(in_dims, tuple):
        if len(in_dims) != len(args):
            raise ValueError(f"{where}: in_dims has {len(in_dims)} entries but the function got "
                             f"{len(args)} positional arguments; give one entry per argument")
        dims = broadcast_prefix(in_dims, args, "in_dims")
    elif in_dims is None or isinstance(in_dims, int):
        dims = [in_dims] * len(leaves)
    else:
        raise ValueError(f"{where}: in_dims must be an int, None or a tuple, got "
                         f"{type(in_dims).__name__}")
    for i, (leaf, dim) in enumerate(zip(leaves, dims, strict=True)):
        if dim is None:
            continue
        if not isinstance(dim, int) or isinstance(dim, bool):
            raise ValueError(f"{where}: in_dim for input {i} must be an int or None, got {dim!r}")
        if not isinstance(leaf, Tensor):
            raise ValueError(f"{where}: got in_dim={dim} for input {i}, but that input is of type "
                             f"{type(leaf).__name__}; vmap maps over tensors only: use None as "
                             "its in_dim")
        if not -leaf.ndim <= dim < leaf.ndim:
            raise ValueError(f"{where}: got in_dim={dim} for input {i}, but that input is a tensor "
                             f"of shape {tuple(leaf.shape)} (dimensionality {leaf.ndim}), so "
                             f"expected in_dim to satisfy {-leaf.ndim} <= in_dim < {leaf.ndim}")
    return [d if d is None or d >= 0 else d + leaf.ndim for leaf, d in zip(leaves, dims,
                                                                           strict=True)]


def _batch_size(where, leaves, dims):
    sizes = {i: leaf.shape[d] for i, (leaf, d) in enumerate(zip(leaves, dims, strict=True))
             if d is not None}
    if not sizes:
        raise ValueError(f"{where}: expected at least one tensor to map over (every in_dim is "
                         "None)")
    if len(set(sizes.values())) > 1:
        listed = ", ".join(f"input {i}: {n}" for i, n in sizes.items())
        raise ValueError(f"{where}: expected all mapped tensors to have the same size in the "
                         f"mapped dimension, got sizes {listed}")
    return next(iter(sizes.values()))


def moved(x, source, destination):
    """x with axis `source` moved to `destination` (the others keep their order)."""
    if source == destination:
        return x
    order = [i for i in range(x.ndim) if i != source]
    order.insert(destination, source)
    return x.permute(tuple(order))


class _Level:
    """`with _Level(size, randomness) as level:` one more vmap running in this thread."""

    def __init__(self, size, randomness):
        self.entry = (size, randomness)

    def __enter__(self):
        modes.opened()
        levels.state.stack += (self.entry,)
        levels.state.dispatch = dispatch
        return len(levels.state.stack)

    def __exit__(self, *exc):
        levels.state.stack = levels.state.stack[:-1]
        if not levels.state.stack:
            levels.state.dispatch = None
        modes.closed()


def _run(func, where, leaves, dims, spec, kwargs, size, randomness, out_dims):
    with _Level(size, randomness) as level:
        inside = [x if d is None else BatchedTensor(moved(x, d, 0), level)
                  for x, d in zip(leaves, dims, strict=True)]
        out = func(*unflatten(inside, spec), **kwargs)
    results, out_spec = flatten(out)
    places = broadcast_prefix(out_dims, out, "out_dims")
    return unflatten([_unbatched(where, r, d, level, size) for r, d in zip(results, places,
                                                                         strict=True)], out_spec)


def _unbatched(where, out, dim, level, size):
    """An output of the function with the batch at axis `dim` (an output that does not depend
    on the batch is repeated over it, unless its out_dim is None)."""
    if not isinstance(out, Tensor):
        raise ValueError(f"{where}: the function must return only tensors, got "
                         f"{type(out).__name__}")
    is_batched = type(out) is BatchedTensor and out.level == level
    if dim is None:
        if is_batched:
            raise ValueError(f"{where}: out_dims is None for an output that depends on the mapped "
                             f"inputs (shape {tuple(out.shape)} per example); give its batch axis")
        return out
    value = out.value if is_batched else stretched(out, size)
    if not -value.ndim <= dim < value.ndim:
        raise ValueError(f"{where}: out_dim={dim} is out of range for an output with "
                         f"{value.ndim - 1} dimensions per example")
    return moved(value, 0, dim % value.ndim)


def _chunk(leaves, dims, start, stop):
    return [x if d is None else x[(slice(None),) * d + (slice(start, stop),)]
            for x, d in zip(leaves, dims, strict=True)]


def _joined(outputs, out_dims):
    """The chunks' outputs joined along each output's batch axis."""
    flat = [flatten(out)[0] for out in outputs]
    spec = flatten(outputs[0])[1]
    places = broadcast_prefix(out_dims, outputs[0], "out_dims")
    return unflatten([parts[0] if d is None else concatenate(parts, axis=d % parts[0].ndim)
                      for parts, d in zip(zip(*flat, strict=True), places, strict=True)], spec)
