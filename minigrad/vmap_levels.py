"""The vmap levels running in this thread: a leaf, so that `Op.apply` (which hands batched calls
to `state.dispatch`) and the random draws (which ask `random_levels`) need nothing above them.
What a level batches is minigrad/batched.py's and minigrad/func/'s business."""
import threading


class _Levels(threading.local):
    dispatch = None   # while a vmap runs in this thread: where Op.apply sends batched calls
    stack = ()        # (batch size, randomness) of each vmap running, outermost first


state = _Levels()


def levels():
    """The vmap levels running in this thread, 1 (outermost) and up."""
    return range(1, len(state.stack) + 1)


def random_levels(op, batchable):
    """The vmap levels a random draw of `op` must vary over (randomness='different'),
    outermost first; none outside vmap or with 'same'. randomness='error' (the default) makes a
    draw an error, as does 'different' where `op` cannot draw a batch (`batchable` False)."""
    different = []
    for level, (_, randomness) in zip(levels(), state.stack, strict=True):
        if randomness == "error" or (randomness == "different" and not batchable):
            raise RuntimeError(
                f"vmap: {op} draws random numbers inside vmap with randomness="
                f"{randomness!r}: " + ("pass randomness='different' (a draw per example) or "
                                       "'same' (one draw for the batch) to vmap, or draw "
                                       "outside it" if randomness == "error" else
                                       "it draws only the same numbers for the batch; pass "
                                       "randomness='same' or draw outside vmap"))
        if randomness == "different":
            different.append(level)
    return different


def batch_sizes(at):
    """The batch sizes of the vmap levels `at`."""
    return tuple([state.stack[level - 1][0] for level in at])
