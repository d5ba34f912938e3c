"""Version counters: how backward knows that a value it saved was changed in place since.

Every tensor has a counter; every in-place change (`x += 1`, `x.mul_(2)`, `x[0] = 5`,
`x.zero_()`, an optimizer's step) adds one to it. Tensors that share memory share one counter,
as in PyTorch: `x.detach()`, and the outputs of ops that return a view of an input's memory
(reshape, transpose, basic indexing such as `x[1:3]`). When a recorded op saves an input or an
output for its backward, the node remembers that tensor's counter and its value then; backward
through the node compares, and a change is an error that names the op and the tensor, instead
of a gradient silently computed from the wrong numbers.

One lock, `IN_PLACE_LOCK`, is held by every in-place change minigrad makes to a tensor's memory
(the in-place ops, optimizer steps, batch norm's running statistics) and by the copies that
`state_dict()`, `Optimizer.state_dict()` and `mg.save` take of a tensor, so a tensor saved
while another thread trains is its value before or after each change, never a mix of two steps.
(Different tensors may still come from different steps: save between steps for one step.)
"""
import functools
import threading

IN_PLACE_LOCK = threading.RLock()


def in_place(function):
    """`function` (an in-place change of a tensor) run holding IN_PLACE_LOCK."""
    @functools.wraps(function)
    def locked(*args, **kwargs):
        with IN_PLACE_LOCK:
            return function(*args, **kwargs)
    return locked


class VersionCounter:
    """How many times the memory of a tensor (and of the tensors sharing it) was changed in
    place. `has_views` marks memory that some op's output views (minigrad/views.py; a custom
    Function's ctx.mark_dirty refuses such a tensor); `inference` marks the memory of
    inference tensors."""

    __slots__ = ("value", "has_views", "inference")

    def __init__(self, inference=False):
        self.value = 0
        self.has_views = False
        self.inference = inference


def bump_version(tensor):
    """Count one in-place change of `tensor`'s memory (in-place ops call it, and so does code
    that writes `.data` itself, such as the optimizers' steps)."""
    tensor._version_counter.value += 1


def viewed_input(array, tensors):
    """The position of the tensor among `tensors` whose memory `array` is a view of, or None.
    (NumPy and CuPy point a view's `.base` at the array that owns the memory.)"""
    owner = getattr(array, "base", None)   # None too for a saved None or number
    if owner is not None:
        for i, t in enumerate(tensors):
            if t is not None and (t.array is owner or t.array.base is owner):
                return i
    return None


def output_counter(array, inputs):
    """The counter for an op's output `array`: its input's if it views that input's memory."""
    i = viewed_input(array, inputs)
    if i is None:
        return VersionCounter()
    inputs[i]._version_counter.has_views = True
    return inputs[i]._version_counter


def remember(sources, inputs, output_counters):
    """(counter, value then) for each saved input or output of a node and each saved view of an
    input, None for other saved arrays (constants); `sources` are the node's (kind, where,
    index) triples. What the value was is worded only if it changed (`changed_error`): this
    runs for every recorded op."""
    saved = []
    for kind, where, index in sources:
        if kind == "input":
            counter = None if inputs[where] is None else inputs[where]._version_counter
        elif kind == "output":
            counter = output_counters[index]
        else:
            i = viewed_input(where, inputs)
            counter = None if i is None else inputs[i]._version_counter
        saved.append(None if counter is None else (counter, counter.value))
    return saved


def changed_error(node, i):
    """The error for reading the value `node` saved `i`-th for backward, which was changed in
    place after forward (its counter moved on from the value `remember` kept)."""
    (counter, version), (kind, where, index) = node._saved_versions[i], node._saved_sources[i]
    if kind == "input":
        what, shape = f"input {where}", node.inputs[where].shape
    elif kind == "output":
        what, shape = f"output {index}", where.shape
    else:
        what, shape = f"a view of input {viewed_input(where, node.inputs)}", where.shape
    return RuntimeError(
        f"one of the variables needed for gradient computation has been modified by an "
        f"inplace operation: {what} of {node.name} (node {node.seq}), a tensor of shape "
        f"{tuple(shape)}, is at version {counter.value}; expected version {version}, the "
        f"version {node.name} saved in forward. Make the in-place change after the backward, "
        "or on a copy (mg.ops.clone(x)), or compute the value again after it")
