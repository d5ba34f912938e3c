"""Sizes that follow the batch: which ints of a traced run the file must compute, not store.

A model reads sizes from its input: `x.reshape(x.shape[0], -1)`, `zeros(x.shape[0], hidden)`,
`x / x.shape[0]`, the slices that split a (T * N, F) array into T steps. On the tape these are
plain ints (a reshape's target, a slice's bounds, a constant's shape); written as they are, the
file would hold the traced batch size and give wrong numbers at any other. Export therefore runs
the model at three batch sizes N0, N0 + 1, N0 + 2 (constants.py) and compares the runs int by
int, in the same place of the same op:

    equal in every run                   a plain int, stored in the file
    a * N + b at every N (a, b ints)     a BatchSize: the int of this run, and a and b, which
                                         the file computes from Shape(input)
    anything else                        an error naming the op and the layer

A BatchSize is an int (converters that do arithmetic or checks on it see this run's value);
`Graph.ints` writes it as a shape computation. The third run is what makes the fit a check:
two points fit any line, three catch N // 2 or N * N.
"""
import numbers

import numpy


class BatchSize(int):
    """An int of one traced run that is `a * N + b` for that run's batch size N."""

    def __new__(cls, value, a, b):
        size = super().__new__(cls, value)
        size.a, size.b = a, b
        return size

    def __repr__(self):
        return f"BatchSize({int(self)} = {self.name()})"

    def name(self):
        """How ONNX value infos name the size: batch, 2*batch, batch-1, ..."""
        term = "batch" if self.a == 1 else f"{self.a}*batch"
        return term if self.b == 0 else f"{term}{self.b:+d}"


def _line(values, batches):
    """(a, b) with values[i] == a * batches[i] + b for every run, or None."""
    if batches[1] == batches[0]:
        return None
    a = (values[1] - values[0]) / (batches[1] - batches[0])
    b = values[0] - a * batches[0]
    return (a, b) if all(a * n + b == v for v, n in zip(values, batches)) else None


def line(values, batches, where, what="the size"):
    """(a, b) for `values` (one per run) that follow the batch; an error naming `where` if not."""
    found = _line([float(v) for v in values], batches)
    if found is None or what == "the size" and not all(float(c).is_integer() for c in found):
        runs = ", ".join(f"{v} at batch size {n}" for v, n in zip(values, batches))
        free = len(set(batches)) > 1
        raise NotImplementedError(
            f"onnx.export: {where} uses {what} {runs}: it changes with the input"
            + (", and not as a * batch + b, so the file could not compute it; pass "
               "dynamic_batch=False to export for one batch size" if free else
               "'s values, and an ONNX file holds one value"))
    return tuple(int(c) if float(c).is_integer() else c for c in found)


def follow(values, batches, where):
    """`values` (one per run, the same structure: ints, tuples, lists, slices, dicts) with each
    int that differs between the runs made a BatchSize."""
    first = values[0]
    if isinstance(first, numbers.Integral) and not isinstance(first, (bool, numpy.bool_)):
        if all(v == first for v in values):
            return values
        a, b = line(values, batches, where)
        return [BatchSize(v, a, b) for v in values]
    if isinstance(first, slice):
        parts = [follow([getattr(v, k) for v in values], batches, where)
                 for k in ("start", "stop", "step")]
        return [slice(*bounds) for bounds in zip(*parts)]
    if type(first) in (tuple, list, dict):
        keys = list(first) if isinstance(first, dict) else range(len(first))
        if any(len(v) != len(first) for v in values):
            raise NotImplementedError(f"onnx.export: {where} has {len(first)} and "
                                      f"{len(values[1])} arguments at two batch sizes")
        columns = [follow([v[k] for v in values], batches, where) for k in keys]
        rows = [list(row) for row in zip(*columns)] if columns else [[] for _ in values]
        if isinstance(first, dict):
            return [dict(zip(keys, row)) for row in rows]
        return [type(first)(row) for row in rows]
    return values


def follows(value):
    """Whether `value` (an op's attributes) holds a BatchSize anywhere."""
    if isinstance(value, BatchSize):
        return True
    if isinstance(value, slice):
        return follows((value.start, value.stop, value.step))
    if type(value) in (tuple, list):
        return any(follows(v) for v in value)
    if isinstance(value, dict):
        return any(follows(v) for v in value.values())
    return False
