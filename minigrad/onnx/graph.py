"""The ONNX graph being built from one traced run: names for values, nodes, weights, and what
depends on the input (`batched`), which is what keeps the batch axis free."""
import itertools

import numpy

from .. import autograd
from . import constants
from .sizes import BatchSize, follows


class Graph:
    """Nodes (each remembering the layer that made it, for errors), weights as (name, array)
    pairs (turned into initializers only when the file is written: write.py), and the run's
    reading of its constants (constants.Run: which are the input, which are Fills)."""

    def __init__(self, onnx, names, options, x, run):
        self.onnx, self.helper = onnx, onnx.helper
        self.names = names               # value_key -> ONNX name
        self.batched = {"input"}         # ONNX names of values computed from the input
        self.nodes, self.layers, self.weights = [], [], []
        self.used = set(names.values())
        self.batch_norm, self.opset, self.batch_axis = options
        self.initialized = {id(x)}       # ids of the leaves given a name (or the input)
        self.input_dtype, self.run = x.dtype, run
        self.casts, self.sizes = {}, {}  # dtype -> the input cast; (a, b) -> [a * N + b]
        self.layer = None                # the op and layer being converted

    def kind(self, dtype):
        """ONNX's number for a NumPy dtype."""
        return self.helper.np_dtype_to_tensor_dtype(numpy.dtype(dtype))

    def input_as(self, dtype):
        """The graph input converted to `dtype` (one Cast per dtype)."""
        if dtype == self.input_dtype:
            return "input"
        if dtype not in self.casts:
            self.casts[dtype] = self.add("Cast", ["input"], to=self.kind(dtype))[0]
        return self.casts[dtype]

    def reads_input(self, ins, attrs):
        """Whether an op depends on the input: through one of `ins`, as an index array, or by a
        size that follows the batch."""
        return (any(name in self.batched for name in ins if name is not None)
                or any(id(array) in self.run.inputs
                       for array in constants.attribute_arrays(attrs))
                or follows(attrs))

    def fresh(self, stem):
        """A name not used yet, from `stem`."""
        name, k = stem, 1
        while name in self.used:
            name, k = f"{stem}_{k}", k + 1
        self.used.add(name)
        return name

    def constant(self, array, stem="const", exact=False):
        """A weight holding `array` (a NumPy array, not copied); its name (`stem` itself when
        `exact`)."""
        name = stem if exact else self.fresh(stem)
        self.weights.append((name, numpy.asarray(array)))
        return name

    def add(self, op_type, inputs, outputs=None, **attrs):
        """One ONNX node; returns its output names (fresh ones unless given)."""
        outputs = outputs or [self.fresh(op_type.lower())]
        self.nodes.append(self.helper.make_node(op_type, list(inputs), list(outputs),
                                                **attrs))
        self.layers.append(self.layer)
        if any(name in self.batched for name in inputs):
            self.batched.update(outputs)
        return outputs

    def ints(self, values):
        """A 1-D int64 tensor of `values`: an initializer, or where some are BatchSizes, a
        Concat of initializers and sizes computed from the input's shape."""
        parts = []
        for computed, run in itertools.groupby(values, lambda v: isinstance(v, BatchSize)):
            run = list(run)
            parts += ([self.size(v.a, v.b) for v in run] if computed else
                      [self.constant(numpy.asarray(run, dtype=numpy.int64), "shape")])
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return self.constant(numpy.zeros(0, numpy.int64), "shape")
        return self.add("Concat", parts, axis=0)[0]

    def size(self, a, b):
        """[a * N + b], int64 of shape (1,), N the input's size on the batch axis."""
        if (a, b) not in self.sizes:
            if (1, 0) not in self.sizes:
                self.sizes[1, 0] = self.add("Shape", ["input"], start=self.batch_axis,
                                            end=self.batch_axis + 1)[0]
            size = self.sizes[1, 0]
            if a != 1:
                (size,) = self.add("Mul", [size, self.constant(numpy.asarray([a]), "a")])
            if b:
                (size,) = self.add("Add", [size, self.constant(numpy.asarray([b]), "b")])
            self.sizes[a, b] = size
        return self.sizes[a, b]

    def fill(self, fill):
        """A constants.Fill: its one value (computed as a * N + b where it follows the batch)
        expanded to its shape (computed where it follows the batch)."""
        if fill.line is None:
            value = self.constant(numpy.asarray(fill.value, fill.dtype), "fill")
        else:
            a, b = fill.line
            (value,) = self.add("Cast", [self.size(1, 0)], to=self.kind(fill.dtype))
            for op_type, number in (("Mul", a), ("Add", b)):
                (value,) = self.add(op_type, [value, self.constant(
                    numpy.asarray(number, fill.dtype), "fill")])
            (value,) = self.add("Squeeze", [value])
        return self.add("Expand", [value, self.ints(fill.shape)])[0]

    def name_of(self, tensor, layer):
        key = autograd.value_key(tensor)
        if key not in self.names:
            source = f"output {tensor._index} of {tensor._node.name}" if tensor._node else "a value"
            raise NotImplementedError(f"onnx.export: {layer} uses {source}, which the export of "
                                      "that op does not write")
        return self.names[key]
