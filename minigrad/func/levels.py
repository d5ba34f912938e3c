"""Moving values between the vmap levels a transform saw and the ones running now.

`grad`, `vjp` and `jvp` differentiate the values under some vmap levels (`at`): each input
they watch, and each output, is there a plain tensor whose first axes are those batches. A
value batched at other levels keeps them as batches around it: a vjp function called later
inside a further vmap (jacrev's) gets cotangents batched at that newer level, and jvp's tangent
may be batched where its primal is not (jacfwd's basis). `exposed` makes the levels `at` axes
and keeps the others, and `hidden` undoes it.
"""
from ..batched import unwrapped, wrapped
from ..ops.shape import broadcast_to
from ..vmap_levels import batch_sizes, levels


def running():
    return tuple(levels())


def exposed(t, at):
    """`t` with the batches of the levels `at` (ascending) as its first axes, in order
    (stretched over a level it is not batched at); the levels it is batched at outside `at`
    stay batches of the result."""
    value, have = unwrapped(t)
    order = list(have)
    for level, size in zip(at, batch_sizes(at), strict=True):
        if level not in have:   # the same value for every example of that level
            shape, position = tuple(value.shape), len(order)
            value = broadcast_to(value.unsqueeze(position),
                                 shape[:position] + (size,) + shape[position:])
            order.append(level)
    kept = [level for level in have if level not in at]
    return wrapped(_reordered(value, order, kept + list(at)), kept)


def hidden(t, at):
    """The inverse of `exposed`: the axes after the batches `t` keeps are the batches of the
    levels `at`."""
    value, kept = unwrapped(t)
    order = kept + list(at)
    return wrapped(_reordered(value, order, sorted(order)), sorted(order))


def _reordered(value, order, target):
    """`value`, whose first axes are the batches of the levels `order`, with them in the order
    `target` instead."""
    if order == target:
        return value
    axes = [order.index(level) for level in target]
    return value.permute(tuple(axes) + tuple(range(len(axes), value.ndim)))
