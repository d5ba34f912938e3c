"""The moves batching rules make with a batch axis at the front (minigrad/func/batching.py has
the rules; ops with a rule of their own use these too)."""
from .shape import broadcast_to


def padded(x, rank):
    """A batched value with its example's rank padded to `rank` by 1s after the batch axis."""
    missing = rank - (x.ndim - 1)
    return x if missing <= 0 else x.reshape(x.shape[:1] + (1,) * missing + x.shape[1:])


def stretched(x, size, rank=None):
    """An unbatched tensor as a batched value: its rank padded to `rank` (default: its own),
    repeated over the batch of `size` (a broadcast view, no copy)."""
    pad = 0 if rank is None else rank - x.ndim
    return broadcast_to(x, (size,) + (1,) * pad + tuple(x.shape))


def merged(x):
    """A batched value with its batch merged into the next axis (batch-major)."""
    return x.reshape((x.shape[0] * x.shape[1],) + tuple(x.shape[2:]))


def split_leading(out, size):
    """The inverse of `merged`: the leading axis holds the batch's examples one after another;
    split the batch off in front."""
    return out.reshape((size, out.shape[0] // size) + tuple(out.shape[1:]))


def into_channels(x):
    """A batched value (B, N, C, ...) as one (N, B * C, ...): example b's channels as the b-th
    block of channels (a convolution's groups, pooling's channels)."""
    order = (1, 0) + tuple(range(2, x.ndim))
    return x.permute(order).reshape((x.shape[1], -1) + tuple(x.shape[3:]))


def split_channels(out, size):
    """The inverse of `into_channels` for an output (N, B * C', ...)."""
    order = (1, 0) + tuple(range(2, out.ndim + 1))
    return out.reshape((out.shape[0], size, -1) + tuple(out.shape[2:])).permute(order)
