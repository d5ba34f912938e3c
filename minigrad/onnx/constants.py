"""The constants on the tape: which of them are the input, and which must not be constants.

minigrad records an op when one of its inputs requires grad. An integer input never does, so
what it passes through before meeting a parameter is not on the tape: `tokens` reaches the
tape as the index array of `getitem(weight, index=tokens)`, `x.float()` as a constant input
of the op after it. Any value computed from the input off the tape (integer arithmetic,
`.item()`, a tensor made from `x.shape[0]`) is a constant there too, and a file holding it
would give this run's answer for every input. So the model runs a second time, on the
example's values moved one place along and, with a free batch axis, one more row (`varied`),
and the two tapes are compared constant by constant:

    the same object in both runs                a parameter, a buffer, a kept constant
    equal to the input (converted to its        the input: the graph reads "input" there
    dtype) in both runs
    equal in both runs                          a constant (a causal mask, arange(T), 0.5)
    anything else                               an error naming the op and the layer
"""
import numpy

from ..tensor import Tensor


def varied(x, dynamic_batch):
    """The example's values moved one place along (valid indices stay valid) and, when the
    batch is free, one more row."""
    moved = x.detach().roll(1)
    return moved[list(range(x.shape[0])) + [0]] if dynamic_batch and x.ndim else moved


def attribute_arrays(attrs):
    """The arrays among an op's attributes (getitem's index arrays), in order."""
    found, parts = [], list(attrs.values())
    while parts:
        part = parts.pop(0)
        if isinstance(part, (tuple, list)):
            parts[:0] = part
        elif hasattr(part, "dtype") and hasattr(part, "shape"):
            found.append(part)
    return found


def _read(node, attrs):
    """(the object, its array) for each constant a tape entry reads: the inputs no op made,
    and the arrays among its attributes."""
    leaves = [(t, t.array) for t in node.inputs if t is not None and t._node is None]
    return leaves + [(array, array) for array in attribute_arrays(attrs)]


def _equal(a, b, dtype=None):
    """Whether arrays `a` and `b` (converted to `dtype`, if given) hold the same values."""
    if a.shape != b.shape:
        return False
    a, b = Tensor.from_array(a).numpy(), Tensor.from_array(b).numpy()
    return numpy.array_equal(a, b if dtype is None else b.astype(dtype))


def inputs_among(tape, x, second, other, layer_of):
    """{id: constant} of the constants on `tape` that are the input `x`, checked against the
    `second` tape, recorded on `other` (see the module docstring); `layer_of(index)` names
    the layer that ran tape entry `index`, for the errors."""
    ops, ops_again = [node.name for node in tape], [node.name for node in second]
    if ops != ops_again:
        index = next(i for i, (a, b) in enumerate(zip(ops + [None], ops_again + [None]))
                     if a != b)
        ran = [names[index] if index < len(names) else "nothing more"
               for names in (ops, ops_again)]
        raise NotImplementedError(
            f"onnx.export: in {layer_of(index)} the model ran {ran[1]} instead of {ran[0]} on "
            f"another input (the example moved one place along, shape {other.shape}): which "
            "ops run depends on the input's values or size, and an ONNX file is one fixed "
            "sequence of ops")
    inputs = {}
    for index, ((node, _, attrs), (twin, _, twin_attrs)) in enumerate(
            zip(tape.entries, second.entries)):
        for (constant, a), (_, b) in zip(_read(node, attrs), _read(twin, twin_attrs)):
            if a is b:   # a parameter, a buffer, a constant the model keeps
                continue
            if _equal(a, x.array, a.dtype) and _equal(b, other.array, b.dtype):
                inputs[id(constant)] = constant
            elif not _equal(a, b):
                raise NotImplementedError(
                    f"onnx.export: {node.name} (in {layer_of(index)}) reads a constant of shape "
                    f"{tuple(a.shape)} that changes with the input: it was computed from the "
                    "input off the tape (integer arithmetic, a comparison, .item(), a shape "
                    "read from the input) or drawn at random, and the file would hold this "
                    "run's value. What exports: the input itself, converted (.float(), "
                    ".long()) or as an index (Embedding without padding_idx, weight[x]), and "
                    "the recorded ops on it")
    return inputs
