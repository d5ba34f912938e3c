"""Moving values between the vmap levels a transform saw and the ones running now.

`grad` and `vjp` differentiate the values under the vmap levels running when they were called
(`at`): each watched input and the output there is a plain tensor whose first axes are those
batches. A vjp function called later inside a further vmap (jacrev's) gets cotangents batched
at that newer level too: `exposed` keeps the newer levels and makes the old ones axes, and
`hidden` undoes it for the gradients.
"""
from ..batched import BatchedTensor, unwrapped, wrapped
from ..ops.shape import broadcast_to
from ..vmap_levels import batch_sizes, levels
from .vmap import moved


def running():
    return tuple(levels())


def exposed(t, at):
    """`t` with the batches of the levels `at` as its first axes (in order; stretched over a
    level it is not batched at); a level above them stays a batch of the result."""
    if type(t) is BatchedTensor and t.level > len(at):   # `at` is 1, 2, ..., len(at)
        inner = exposed(t.value, at)   # its axis len(at) is t's own batch
        return BatchedTensor(moved(inner, len(at), 0), t.level)
    value, have = unwrapped(t)
    for position, (level, size) in enumerate(zip(at, batch_sizes(at), strict=True)):
        if level not in have:
            shape = tuple(value.shape)
            value = broadcast_to(value.unsqueeze(position),
                                 shape[:position] + (size,) + shape[position:])
    return value


def hidden(t, at):
    """The inverse of `exposed`: the first axes of `t` become the batches of the levels `at`."""
    if type(t) is BatchedTensor and t.level > len(at):   # `at` is 1, 2, ..., len(at)
        return BatchedTensor(hidden(moved(t.value, 0, len(at)), at), t.level)
    return wrapped(t, at)
