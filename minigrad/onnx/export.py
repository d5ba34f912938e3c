"""The exporter: trace the model on the tape, name every value, convert op by op (ops.py)."""
import contextlib

import numpy

from .. import autograd
from ..atomic import atomic_write
from ..tensor import Tensor
from . import constants, ops

OPSET = 18   # ReduceMean with its axes as an input; Gelu needs 20 (below, it is spelled out)


def _onnx():
    try:
        import onnx
    except ImportError:
        raise ImportError("mg.onnx.export needs the onnx package: pip install 'minigrad[onnx]' "
                          "(onnx, and onnxruntime to run the file)") from None
    return onnx


@contextlib.contextmanager
def _layers_seen(model, tape):
    """Record, for each module call, [its name, the first and past-the-last tape index]."""
    calls, open_calls, handles, top = [], [], [], type(model).__name__
    for name, module in model.named_modules():
        def before(module, args, name=name or top):
            open_calls.append([name, len(tape), None])
            calls.append(open_calls[-1])

        def after(module, args, output):
            open_calls.pop()[2] = len(tape)

        handles += [module.register_forward_pre_hook(before), module.register_forward_hook(after)]
    try:
        yield calls
    finally:
        for handle in handles:
            handle.remove()


def _layer_of(calls, index):
    """The innermost module call that ran tape entry `index` (the last one to start)."""
    inside = [name for name, start, end in calls if start <= index < (end or start)]
    return inside[-1] if inside else "the model's forward"


def trace(model, example_input):
    """(tape, input tensor, outputs as a list, layer calls): the model run once in eval mode."""
    x = example_input.detach()
    if x.dtype.kind == "f":
        x.requires_grad_(True)   # so every op reached from it is recorded
    was_training = model.training
    model.eval()
    try:
        with autograd.enable_grad(), autograd.record() as tape, _layers_seen(model, tape) as calls:
            result = model(x)
    finally:
        model.train(was_training)
    outputs = list(result) if isinstance(result, (tuple, list)) else [result]
    if not all(isinstance(out, Tensor) for out in outputs):
        raise TypeError("onnx.export: the model must return a Tensor or a tuple of Tensors")
    return tape, x, outputs, calls


def _trace_again(model, other, dynamic_batch):
    """The tape of the model run on `other` (constants.varied)."""
    try:
        return trace(model, other)[0]
    except Exception as error:
        fixed = " (dynamic_batch=False keeps the batch size)" if dynamic_batch else ""
        raise RuntimeError(f"onnx.export: the model failed on the example moved one place "
                           f"along, shape {other.shape}, which export runs to tell the values "
                           f"that come from the input from the constants{fixed}: "
                           f"{type(error).__name__}: {error}") from error


class Graph:
    """The ONNX graph being built: names for values, nodes, initializers; what depends on the
    input (`batched`), which is what keeps the batch axis free."""

    def __init__(self, onnx, names, batch_norm, dynamic_batch, opset, x, inputs):
        self.onnx, self.helper = onnx, onnx.helper
        self.names = names               # value_key -> ONNX name
        self.batched = {"input"}         # ONNX names of values computed from the input
        self.nodes, self.initializers, self.used = [], [], set(names.values())
        self.batch_norm, self.dynamic_batch, self.opset = batch_norm, dynamic_batch, opset
        self.initialized = {id(x)}       # ids of the leaves given an initializer (or the input)
        self.input_dtype, self.inputs = x.dtype, inputs   # {id: a constant that is the input}
        self.casts = {}                  # dtype -> the input converted to it

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
        """Whether an op reads the input: through one of `ins`, or as an index array."""
        return (any(name in self.batched for name in ins if name is not None)
                or any(id(array) in self.inputs for array in constants.attribute_arrays(attrs)))

    def fresh(self, stem):
        """A name not used yet, from `stem`."""
        name, k = stem, 1
        while name in self.used:
            name, k = f"{stem}_{k}", k + 1
        self.used.add(name)
        return name

    def constant(self, array, stem="const", exact=False):
        """An initializer holding `array`; its name (`stem` itself when `exact`)."""
        name = stem if exact else self.fresh(stem)
        self.initializers.append(self.onnx.numpy_helper.from_array(numpy.asarray(array), name))
        return name

    def add(self, op_type, inputs, outputs=None, **attrs):
        """One ONNX node; returns its output names (fresh ones unless given)."""
        outputs = outputs or [self.fresh(op_type.lower())]
        self.nodes.append(self.helper.make_node(op_type, list(inputs), list(outputs),
                                                **attrs))
        if any(name in self.batched for name in inputs):
            self.batched.update(outputs)
        return outputs

    def name_of(self, tensor, layer):
        key = autograd.value_key(tensor)
        if key not in self.names:
            source = f"output {tensor._index} of {tensor._node.name}" if tensor._node else "a value"
            raise NotImplementedError(f"onnx.export: {layer} uses {source}, which the export of "
                                      "that op does not write")
        return self.names[key]


def _leaf_names(model, x):
    """value_key -> name for the input, the parameters and buffers (state_dict names)."""
    names = {autograd.value_key(x): "input"}
    for name, tensor in list(model.named_parameters()) + list(model.named_buffers()):
        names.setdefault(id(tensor), name)
    return names


def to_model(model, example_input, batch_norm="fused", dynamic_batch=True, opset=OPSET):
    """The ONNX ModelProto of `model` traced on `example_input` (see the package docstring)."""
    onnx = _onnx()
    if not isinstance(example_input, Tensor):
        raise TypeError(f"onnx.export: example_input must be a Tensor, got "
                        f"{type(example_input).__name__}")
    if batch_norm not in ("fused", "primitives"):
        raise ValueError(f"onnx.export: batch_norm must be 'fused' or 'primitives', not "
                         f"{batch_norm!r}")
    if not OPSET <= opset <= onnx.defs.onnx_opset_version():
        raise ValueError(f"onnx.export: opset must be from {OPSET} to "
                         f"{onnx.defs.onnx_opset_version()} (the installed onnx's newest), "
                         f"not {opset}")
    tape, x, outputs, calls = trace(model, example_input)
    other = constants.varied(x, dynamic_batch)
    inputs = constants.inputs_among(tape, x, _trace_again(model, other, dynamic_batch), other,
                                    lambda index: _layer_of(calls, index))
    graph = Graph(onnx, _leaf_names(model, x), batch_norm, dynamic_batch, opset, x, inputs)
    for index, (node, outs, attrs) in enumerate(tape.entries):
        layer = f"{node.name} (in {_layer_of(calls, index)})"
        _leaves_as_initializers(graph, node)
        ins = [None if t is None else graph.name_of(t, layer) for t in node.inputs]
        if not graph.reads_input(ins, attrs):
            _fold(graph, node, outs, ins)   # a constant: its value is known now
            continue
        converter = ops.CONVERTERS.get(node.name)
        if converter is None:
            raise NotImplementedError(
                f"onnx.export: {layer} has no ONNX export; exportable ops: "
                f"{', '.join(sorted(ops.CONVERTERS))} (see minigrad/onnx/ops.py to add one)")
        names = converter(graph, ops.Call(node, ins, outs, attrs, layer))
        for i, name in enumerate(names):
            if name is not None:
                graph.names[(node, i)] = name
    out_names = [graph.name_of(out, "the output") for out in outputs]
    return _assemble(graph, x, outputs, out_names)


def _leaves_as_initializers(graph, node):
    """Give every leaf input of `node` its name (once): the input where it is the input
    (constants.py), a parameter or buffer its initializer under its state_dict name, any other
    constant an initializer under a fresh name."""
    for t in node.inputs:
        if t is None or t._node is not None or id(t) in graph.initialized:
            continue
        graph.initialized.add(id(t))
        if id(t) in graph.inputs:
            graph.names[id(t)] = graph.input_as(t.dtype)
            continue
        name = graph.names.get(id(t))
        graph.names[id(t)] = graph.constant(t.numpy(force=True), name or "const", exact=name)


def _fold(graph, node, outs, ins):
    stem = next((name for name in ins if name), node.name)
    for i, out in enumerate(outs):
        graph.names[(node, i)] = graph.constant(out.numpy(force=True), f"{stem}.{node.name}")


def _assemble(graph, x, outputs, out_names):
    onnx, helper = graph.onnx, graph.helper
    def info(name, tensor, batched):
        free = batched and tensor.ndim and graph.dynamic_batch
        dims = ["batch"] + list(tensor.shape[1:]) if free else list(tensor.shape)
        return helper.make_tensor_value_info(name, graph.kind(tensor.dtype), dims)

    final = []
    for i, (name, out) in enumerate(zip(out_names, outputs)):
        target = "output" if len(outputs) == 1 else f"output{i}"
        graph.add("Identity", [name], [target])
        final.append(info(target, out, name in graph.batched))
    used = {name for node in graph.nodes for name in node.input}
    initializers = [init for init in graph.initializers if init.name in used]
    onnx_graph = helper.make_graph(graph.nodes, "minigrad", [info("input", x, True)], final,
                                   initializers)
    model = helper.make_model(onnx_graph, producer_name="minigrad",
                              opset_imports=[helper.make_opsetid("", graph.opset)])
    model.ir_version = helper.find_min_ir_version_for(model.opset_import)
    onnx.checker.check_model(model, full_check=True)
    return model


def export(model, example_input, path, batch_norm="fused", dynamic_batch=True, opset=OPSET):
    """Write `model` as an ONNX file at `path` (traced on `example_input`; see the package
    docstring) and return the path. Nothing is written when an op cannot be exported."""
    proto = to_model(model, example_input, batch_norm, dynamic_batch, opset)
    atomic_write(path, lambda file: file.write(proto.SerializeToString()))
    return path
