"""The constants on the tape: which of them are the input, which follow the batch, and which
must not be constants.

minigrad records an op when one of its inputs requires grad. An integer input never does, so
what it passes through before meeting a parameter is not on the tape: `tokens` reaches the
tape as the index array of `getitem(weight, index=tokens)`, `x.float()` as a constant input
of the op after it. Any value computed from the input off the tape (integer arithmetic,
`.item()`, a tensor made from `x.shape[0]`) is a constant there too, and a file holding it
would give this run's answer for every input. So the model runs three times, on the example
and on its values moved one and two places along with, when the batch is free, one and two
more rows (`varied`), and the tapes are compared constant by constant:

    the same object in every run              a parameter, a buffer, a kept constant
    equal to the input (converted to its      the input: the graph reads "input" there
    dtype) in every run
    equal in every run                        a constant (a causal mask, arange(T), 0.5)
    one value throughout, its shape and       a Fill: zeros(x.shape[0], hidden), a 0-d
    value a * batch + b (sizes.py)            x.shape[0]; the file computes it (Expand)
    anything else                             an error naming the op and the layer

The ints among the ops' attributes (a reshape's target, a slice's bounds) are compared the
same way (sizes.follow).
"""
from collections import namedtuple

import numpy

from ..tensor import Tensor
from . import sizes

Fill = namedtuple("Fill", "value shape dtype line")   # line: (a, b) when the value is
                                                      # a * batch + b; shape may hold BatchSizes
Run = namedtuple("Run", "inputs fills attrs")    # {id: constant}, {id: Fill}, attrs per entry


def varied(x, moved, dynamic_batch, batch_axis):
    """The example's values moved `moved` places along (valid indices stay valid) and, when the
    batch is free, `moved` more rows on the batch axis (copies of the first ones)."""
    shifted = x.detach().roll(moved)
    if not (dynamic_batch and moved and x.ndim):
        return shifted
    rows = list(range(x.shape[batch_axis])) + [k % x.shape[batch_axis] for k in range(moved)]
    return shifted.index_select(batch_axis, Tensor.from_array(numpy.asarray(rows)))


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
    """(the object, its array, whether it is an input of the op) for each constant a tape
    entry reads: the inputs no op made, and the arrays among its attributes."""
    leaves = [(t, t.array, True) for t in node.inputs if t is not None and t._node is None]
    return leaves + [(array, array, False) for array in attribute_arrays(attrs)]


def _host(array):
    return Tensor.from_array(array).numpy()


def _equal(a, b, dtype=None):
    """Whether arrays `a` and `b` (converted to `dtype`, if given) hold the same values."""
    if a.shape != b.shape:
        return False
    a, b = _host(a), _host(b)
    return numpy.array_equal(a, b if dtype is None else b.astype(dtype))


def _fills(arrays, batches, where):
    """The Fill of each run, when every array holds one value throughout; else None."""
    hosts = [_host(a) for a in arrays]
    if any(a.size == 0 or not (a == a.flat[0]).all() or a.dtype != hosts[0].dtype
           or a.ndim != hosts[0].ndim for a in hosts):
        return None
    shapes = sizes.follow([tuple(a.shape) for a in hosts], batches, where)
    values = [a.flat[0].item() for a in hosts]
    line = (None if all(v == values[0] for v in values)
            else sizes.line(values, batches, where, what="the value"))
    return [Fill(v, s, a.dtype, line) for v, s, a in zip(values, shapes, hosts)]


def read(tapes, xs, batches, layer_of):
    """One Run per tape (the model run on each of `xs`, of batch sizes `batches`): which of its
    constants are the input, which are Fills, and its ops' attributes with the sizes that
    follow the batch made BatchSizes. An error naming the op and the layer (`layer_of(index)`
    for tape entry `index`) for a constant or size that changes otherwise."""
    _same_ops(tapes, xs, layer_of)
    runs = [Run({}, {}, []) for _ in tapes]
    for index, entries in enumerate(zip(*(tape.entries for tape in tapes))):
        where = f"{entries[0][0].name} (in {layer_of(index)})"
        for run, attrs in zip(runs, sizes.follow([attrs for _, _, attrs in entries], batches,
                                                 where)):
            run.attrs.append(attrs)
        for constants in zip(*(_read(node, attrs) for node, _, attrs in entries)):
            objects, arrays, leaf = zip(*constants)
            if all(o is objects[0] for o in objects):   # a parameter, a buffer, kept
                continue
            if all(_equal(a, x.array, a.dtype) for a, x in zip(arrays, xs)):
                for run, constant in zip(runs, objects):
                    run.inputs[id(constant)] = constant
                continue
            if all(_equal(a, arrays[0]) for a in arrays[1:]):
                continue
            fills = _fills(arrays, batches, where) if leaf[0] else None
            if fills is None:
                raise NotImplementedError(
                    f"onnx.export: {where} reads a constant of shape {tuple(arrays[0].shape)} "
                    "that changes with the input: it was computed from the input off the tape "
                    "(integer arithmetic, a comparison, .item()) or drawn at random, and the "
                    "file would hold this run's value. What exports: the input itself, "
                    "converted (.float(), .long()) or as an index (Embedding without "
                    "padding_idx, weight[x]), the recorded ops on it, and constants of one "
                    "value whose shape follows the batch (zeros(x.shape[0], n))")
            for run, constant, fill in zip(runs, objects, fills):
                run.fills[id(constant)] = fill
    return runs


def _same_ops(tapes, xs, layer_of):
    """An error unless every run ran the same ops."""
    ops = [node.name for node in tapes[0]]
    for tape, other in zip(tapes[1:], xs[1:]):
        again = [node.name for node in tape]
        if again == ops:
            continue
        index = next(i for i, (a, b) in enumerate(zip(ops + [None], again + [None])) if a != b)
        ran = [names[index] if index < len(names) else "nothing more" for names in (ops, again)]
        raise NotImplementedError(
            f"onnx.export: in {layer_of(index)} the model ran {ran[1]} instead of {ran[0]} on "
            f"another input (the example moved along, shape {other.shape}): which ops run "
            "depends on the input's values or size, and an ONNX file is one fixed sequence of "
            "ops")
