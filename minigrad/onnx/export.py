"""The exporter: trace the model on the tape (three times: constants.py, sizes.py), convert op by
op (ops.py) into a Graph (graph.py), check, and write (write.py)."""
import contextlib
import itertools
from collections import namedtuple

import numpy

from .. import autograd
from ..dtypes import is_floating
from ..tensor import Tensor
from . import constants, ops, sizes, write
from .graph import Graph

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


Trace = namedtuple("Trace", "tape x outputs calls")


def trace(model, example_input):
    """A Trace: the tape of the model run once in eval mode, its input, its outputs as a list
    and its layer calls."""
    x = example_input.detach()
    if is_floating(x.dtype):
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
    return Trace(tape, x, outputs, calls)


def _trace_again(model, other, dynamic_batch):
    """The Trace of the model run on `other` (constants.varied)."""
    try:
        return trace(model, other)
    except Exception as error:
        fixed = " (dynamic_batch=False keeps the batch size)" if dynamic_batch else ""
        raise RuntimeError(f"onnx.export: the model failed on the example moved along, shape "
                           f"{other.shape}, which export runs to tell the values that come from "
                           f"the input from the constants and the sizes that follow the batch"
                           f"{fixed}: {type(error).__name__}: {error}") from error


def _leaf_names(model, x):
    """value_key -> name for the input, the parameters and buffers (state_dict names)."""
    names = {autograd.value_key(x): "input"}
    for name, tensor in list(model.named_parameters()) + list(model.named_buffers()):
        names.setdefault(id(tensor), name)
    return names


def _check_arguments(onnx, example_input, batch_norm, opset, batch_axis):
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
    if not (isinstance(batch_axis, int) and 0 <= batch_axis < max(example_input.ndim, 1)):
        raise ValueError(f"onnx.export: batch_axis must be an axis of the example input "
                         f"(shape {example_input.shape}), not {batch_axis!r}")


def build(model, example_input, batch_norm="fused", dynamic_batch=True, opset=OPSET,
          batch_axis=0):
    """(the ModelProto without its weights, the weights as [(name, array)]): the model traced
    at three batch sizes (constants.py, sizes.py), converted from the first run and, as a check,
    from the third; the two graphs must be the same."""
    onnx = _onnx()
    _check_arguments(onnx, example_input, batch_norm, opset, batch_axis)
    first = trace(model, example_input)
    traces = [first] + [_trace_again(model, constants.varied(first.x, moved, dynamic_batch,
                                                             batch_axis), dynamic_batch)
                        for moved in (1, 2)]
    batches = [t.x.shape[batch_axis] if t.x.ndim else 1 for t in traces]
    runs = constants.read([t.tape for t in traces], [t.x for t in traces], batches,
                          lambda index: _layer_of(first.calls, index))
    shapes = sizes.follow([[tuple(out.shape) for out in t.outputs] for t in traces], batches,
                          "the output")
    options = (batch_norm, opset, batch_axis)
    built = [_convert(onnx, model, traces[k], runs[k], options) for k in (0, 2)]
    _same(built[0], built[1], batches)
    return _assemble(built[0], first.x, first.outputs, shapes[0], dynamic_batch)


def _convert(onnx, model, traced, run, options):
    """The Graph of one traced run, ending in an Identity node per output."""
    graph = Graph(onnx, _leaf_names(model, traced.x), options, traced.x, run)
    for index, ((node, outs, _), attrs) in enumerate(zip(traced.tape.entries, run.attrs)):
        layer = graph.layer = f"{node.name} (in {_layer_of(traced.calls, index)})"
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
    graph.layer = "the output"
    for i, out in enumerate(traced.outputs):
        target = "output" if len(traced.outputs) == 1 else f"output{i}"
        graph.add("Identity", [graph.name_of(out, "the output")], [target])
    return graph


def _leaves_as_initializers(graph, node):
    """Give every leaf input of `node` its name (once): the input where it is the input
    (constants.py), a Fill its computation, a parameter or buffer its initializer under its
    state_dict name, any other constant an initializer under a fresh name."""
    for t in node.inputs:
        if t is None or t._node is not None or id(t) in graph.initialized:
            continue
        graph.initialized.add(id(t))
        if id(t) in graph.run.inputs:
            graph.names[id(t)] = graph.input_as(t.dtype)
        elif id(t) in graph.run.fills:
            graph.names[id(t)] = graph.fill(graph.run.fills[id(t)])
        else:
            name = graph.names.get(id(t))
            graph.names[id(t)] = graph.constant(t.numpy(force=True), name or "const",
                                                exact=name)


def _fold(graph, node, outs, ins):
    stem = next((name for name in ins if name), node.name)
    for i, out in enumerate(outs):
        graph.names[(node, i)] = graph.constant(out.numpy(force=True), f"{stem}.{node.name}")


def _same(graph, check, batches):
    """An error naming the op and the layer where the graph converted from the run at batch
    size batches[2] differs from the one at batches[0]: a size the converter read from the
    traced shapes, or a value folded from them."""
    nodes = [k for k, (a, b) in enumerate(itertools.zip_longest(graph.nodes, check.nodes))
             if a != b]
    weights = [name for (name, a), (_, b) in zip(graph.weights, check.weights)
               if a.shape != b.shape or not numpy.array_equal(
                   a, b, equal_nan=is_floating(a.dtype) or a.dtype.kind == "c")]
    if not nodes and not weights:
        return
    if nodes:
        where = (graph.layers if nodes[0] < len(graph.layers) else check.layers)[nodes[0]]
    else:
        where = next(layer for node, layer in zip(graph.nodes, graph.layers)
                     if weights[0] in node.input)
    raise NotImplementedError(
        f"onnx.export: {where} exports differently at batch size {batches[0]} and "
        f"{batches[2]}: its export writes a size or a value of this run's shapes, so the file "
        "would hold the traced batch size; pass dynamic_batch=False to export for one batch "
        "size")


def _assemble(graph, x, outputs, shapes, dynamic_batch):
    """(the ModelProto, without initializers, the weights it uses as [(name, array)])."""
    helper = graph.helper

    def info(name, dtype, dims):
        dims = [d.name() if isinstance(d, sizes.BatchSize) else d for d in dims]
        return helper.make_tensor_value_info(name, graph.kind(dtype), dims)

    dims = list(x.shape)
    if dynamic_batch and dims:
        dims[graph.batch_axis] = "batch"
    final = [info(node.output[0], out.dtype, shape)
             for node, out, shape in zip(graph.nodes[-len(outputs):], outputs, shapes)]
    onnx_graph = helper.make_graph(graph.nodes, "minigrad", [info("input", x.dtype, dims)],
                                   final)
    model = helper.make_model(onnx_graph, producer_name="minigrad",
                              opset_imports=[helper.make_opsetid("", graph.opset)])
    model.ir_version = helper.find_min_ir_version_for(model.opset_import)
    used = {name for node in graph.nodes for name in node.input}
    return model, [(name, array) for name, array in graph.weights if name in used]


def to_model(model, example_input, batch_norm="fused", dynamic_batch=True, opset=OPSET,
             batch_axis=0):
    """The ONNX ModelProto of `model` traced on `example_input`, its weights inside (see the
    package docstring), checked by onnx.checker."""
    onnx = _onnx()
    proto, weights = build(model, example_input, batch_norm, dynamic_batch, opset, batch_axis)
    proto.graph.initializer.extend(onnx.numpy_helper.from_array(array, name)
                                   for name, array in weights)
    onnx.checker.check_model(proto, full_check=True)
    return proto


def export(model, example_input, path, batch_norm="fused", dynamic_batch=True, opset=OPSET,
           batch_axis=0, external_data=None):
    """Write `model` as an ONNX file at `path` (traced on `example_input`; see the package
    docstring) and return the path. Nothing is written when an op cannot be exported. The
    weights go to `<path>.data` (ONNX external data) with `external_data=True`, or when the
    file would pass protobuf's 2 GiB limit and `external_data` is None (write.py)."""
    proto, weights = build(model, example_input, batch_norm, dynamic_batch, opset, batch_axis)
    onnx = _onnx()
    write.check(onnx, proto, weights)
    write.save(onnx, proto, weights, path, external_data)
    return path
