"""minigrad op -> ONNX nodes, one converter per op name (opset 18 and later).

A converter gets the Graph being built and a Call (the tape's node, its inputs' ONNX names,
its output tensors, the op's attributes, and `layer`, where it ran, for errors) and returns
one ONNX name per output of the op (None for an output it does not write, such as batch
norm's statistics). Adding an op is adding a function here and a line to CONVERTERS.
"""
from collections import namedtuple

import numpy

from .sizes import BatchSize

Call = namedtuple("Call", "node ins outs attrs layer")


def _refuse(call, why):
    raise NotImplementedError(f"onnx.export: {call.layer}: {why}")


def _scalar(graph, call, value):
    """`value` as a 0-d initializer of the op's input dtype."""
    return graph.constant(numpy.asarray(value, dtype=call.node.inputs[0].dtype), "scalar")


def _pads(padding):
    """minigrad's per-axis padding (ints or (before, after) pairs) as ONNX's begins + ends."""
    pairs = [(p, p) if isinstance(p, int) else tuple(p) for p in padding]
    return [b for b, _ in pairs] + [a for _, a in pairs]


def same(onnx_op, **fixed):
    """A converter for an op that is one ONNX node with the same inputs."""
    def convert(graph, call):
        return graph.add(onnx_op, [name for name in call.ins if name is not None], **fixed)
    return convert


def conv2d(graph, call):
    a, weight = call.attrs, call.node.inputs[1]
    return graph.add("Conv", [name for name in call.ins if name is not None],
                     kernel_shape=list(weight.shape[2:]), strides=list(a["stride"]),
                     pads=_pads(a["padding"]), dilations=list(a.get("dilation", (1, 1))),
                     group=a.get("groups", 1))


def linear(graph, call):
    """x W^T + b: Gemm for a matrix x, MatMul with the transposed W (+ Add) otherwise."""
    x, w, b = call.ins
    if call.node.inputs[0].ndim == 2:
        return graph.add("Gemm", [x, w] + ([b] if b else []), transB=1)
    (y,) = graph.add("MatMul", [x, graph.add("Transpose", [w], perm=[1, 0])[0]])
    return graph.add("Add", [y, b]) if b else [y]


def _pool(onnx_op, extra):
    def convert(graph, call):
        a = call.attrs
        if a.get("return_indices"):
            _refuse(call, "max pooling with return_indices=True has no ONNX export (without "
                          "it, MaxPool)")
        if a.get("divisor_override") is not None:
            _refuse(call, "average pooling with divisor_override has no ONNX export (without "
                          "it, AveragePool)")
        return graph.add(onnx_op, [call.ins[0]], kernel_shape=list(a["kernel"]),
                         strides=list(a["stride"]), pads=_pads(a["padding"]),
                         ceil_mode=int(a.get("ceil_mode", False)), **extra(a))
    return convert


def reshape(graph, call):
    """Reshape to the target; a target with one size that follows the batch (sizes.py) writes
    -1 there, which ONNX infers, and one with several computes them."""
    shape = list(call.attrs["shape"])
    follow = [i for i, size in enumerate(shape) if isinstance(size, BatchSize)]
    if len(follow) == 1 and -1 not in shape:
        shape[follow[0]] = -1
    return graph.add("Reshape", [call.ins[0], graph.ints(shape)])


def transpose(graph, call):
    axes = call.attrs.get("axes")
    ndim = call.node.inputs[0].ndim
    return graph.add("Transpose", [call.ins[0]],
                     perm=list(reversed(range(ndim))) if axes is None else list(axes))


def _reduce(onnx_op):
    def convert(graph, call):
        ndim, axis = call.node.inputs[0].ndim, call.attrs.get("axis")
        axes = range(ndim) if axis is None else [axis] if isinstance(axis, int) else axis
        return graph.add(onnx_op, [call.ins[0], graph.ints([a % ndim for a in axes])],
                         keepdims=int(call.attrs.get("keepdims", False)))
    return convert


def _axis(onnx_op):
    def convert(graph, call):
        return graph.add(onnx_op, [name for name in call.ins if name is not None],
                         axis=call.attrs.get("axis", -1 if onnx_op != "Concat" else 0))
    return convert


def split(graph, call):
    """One Split node, one output per piece (axis and sizes as minigrad's Split got them)."""
    sizes = list(call.attrs["sizes"])
    outputs = [graph.fresh("split") for _ in sizes]
    return graph.add("Split", [call.ins[0], graph.ints(sizes)], outputs, axis=call.attrs["axis"])


def stack(graph, call):
    axis = call.attrs.get("axis", 0) % (call.node.inputs[0].ndim + 1)
    rows = [graph.add("Unsqueeze", [name, graph.ints([axis])])[0] for name in call.ins]
    return graph.add("Concat", rows, axis=axis)


def _channel_stats(graph, names, axis, ndim):
    """gamma, beta, mean, var (C,) reshaped to broadcast against x along `axis`."""
    shape = graph.ints([-1] + [1] * (ndim - axis - 1))
    return [graph.add("Reshape", [name, shape])[0] for name in names]


def _bn_parts(graph, call, *, activation=None):
    x, gamma, beta, mean, var = call.ins
    inputs = call.node.inputs
    if mean is None:
        _refuse(call, "batch norm with batch statistics (training mode, or "
                      "track_running_stats=False) has no ONNX export; export in eval mode")
    channels = inputs[3].shape[0]
    dtype = inputs[0].dtype
    gamma = gamma or graph.constant(numpy.ones(channels, dtype), "gamma")
    beta = beta or graph.constant(numpy.zeros(channels, dtype), "beta")
    axis, eps, ndim = call.attrs["axis"] % inputs[0].ndim, call.attrs["eps"], inputs[0].ndim
    if graph.batch_norm == "fused":
        if axis != 1:
            _refuse(call, f"BatchNormalization needs the channels on axis 1, not {axis}; pass "
                          "batch_norm='primitives'")
        (y,) = graph.add("BatchNormalization", [x, gamma, beta, mean, var], epsilon=eps)
    else:   # normalize, multiply, add: minigrad's own separation
        gamma, beta, mean, var = _channel_stats(graph, [gamma, beta, mean, var], axis, ndim)
        (xhat,) = _normalized(graph, call, x, mean, var, eps)
        (y,) = graph.add("Add", [graph.add("Mul", [xhat, gamma])[0], beta])
    if activation is not None:
        (y,) = _activation(graph, y, activation)
    return [y, None, None]


def _normalized(graph, call, x, mean, var, eps, centred=None):
    """(x - mean) / sqrt(var + eps), `centred` x - mean where it is already there."""
    std = graph.add("Sqrt", graph.add("Add", [var, _scalar(graph, call, eps)]))
    return graph.add("Div", [centred or graph.add("Sub", [x, mean])[0], std[0]])


def _activation(graph, y, activation):
    if activation.name == "leaky_relu":
        return graph.add("LeakyRelu", [y], alpha=activation.negative_slope)
    if activation.name == "elu":
        return graph.add("Elu", [y], alpha=activation.alpha)
    return graph.add(activation.name.capitalize() if activation.name != "identity"
                     else "Identity", [y])


def fused_batch_norm(graph, call):
    return _bn_parts(graph, call)


def fused_batch_norm_act(graph, call):
    return _bn_parts(graph, call, activation=call.attrs["activation"])


def normalize(graph, call):
    """(x - mean) / sqrt(var + eps). With mean and var given (running statistics, eval mode)
    that formula; with the input's own statistics (layer, group and instance norm: each sample
    over its last axes) LayerNormalization with scale 1, the one ONNX node for it; over other
    axes (the batch axis among them) its definition, mean and variance by ReduceMean (two
    passes, as minigrad's)."""
    x, *given = call.ins
    axes, eps, ndim = call.attrs["axes"], call.attrs["eps"], call.node.inputs[0].ndim
    if given:
        return _normalized(graph, call, x, *given, eps) + given
    if axes[0] > 0 and axes == tuple(range(axes[0], ndim)):
        dtype, shape = call.node.inputs[0].dtype, call.node.inputs[0].shape[axes[0]:]
        return graph.add("LayerNormalization", [x, graph.constant(numpy.ones(shape, dtype),
                                                                  "ones")],
                         axis=axes[0], epsilon=eps) + [None, None]
    axes = graph.ints(axes)
    (mean,) = graph.add("ReduceMean", [x, axes], keepdims=1)
    (centred,) = graph.add("Sub", [x, mean])
    (var,) = graph.add("ReduceMean", [graph.add("Mul", [centred, centred])[0], axes], keepdims=1)
    return _normalized(graph, call, x, mean, var, eps, centred) + [mean, var]


END = numpy.iinfo(numpy.int64).max   # "to the end": ONNX Slice clamps it to the axis


def _slice_bounds(part):
    """(start, stop, step) of a slice as ONNX Slice reads them, free of this run's sizes:
    negative bounds count from the end there too, and a missing bound runs to the end
    (backwards: to before the front, which ONNX writes as a bound below -n)."""
    step = 1 if part.step is None else part.step
    start = part.start if part.start is not None else 0 if step > 0 else END
    stop = part.stop if part.stop is not None else END if step > 0 else -END - 1
    return start, stop, step


def getitem(graph, call):
    """Slices become Slice, ints and an integer array Gather (one axis at a time); the index
    array may be the graph input itself (token ids: an Embedding)."""
    (x,), axis = call.ins[:1], 0
    parts = call.attrs["index"]
    if sum(hasattr(part, "dtype") for part in parts) > 1:
        _refuse(call, "indexing with several arrays at once (NumPy pairs them up) has no ONNX "
                      "export; what exports: ints, slices and one integer array")
    for part in parts:
        if isinstance(part, slice):
            bounds = _slice_bounds(part)
            if bounds != (0, END, 1):
                (x,) = graph.add("Slice", [x] + [graph.ints([v]) for v in
                                                 (bounds[0], bounds[1], axis, bounds[2])])
            axis += 1
        elif numpy.asarray(part).dtype.kind in "iu":
            rows = (graph.input_as(part.dtype) if id(part) in graph.run.inputs
                    else graph.constant(numpy.asarray(part, dtype=numpy.int64), "index"))
            (x,) = graph.add("Gather", [x, rows], axis=axis)
            axis += numpy.ndim(part)
        else:
            _refuse(call, f"indexing with {type(part).__name__} has no ONNX export; what "
                          "exports: ints, slices and one integer array")
    return [x]


def pad(graph, call):
    pairs = call.attrs["pad_width"]
    ndim = call.node.inputs[0].ndim
    pairs = [(p, p) if isinstance(p, int) else tuple(p) for p in pairs] if not isinstance(
        pairs, int) else [(pairs, pairs)] * ndim
    pads = [b for b, _ in pairs] + [a for _, a in pairs]
    return graph.add("Pad", [call.ins[0], graph.ints(pads),
                             _scalar(graph, call, call.attrs.get("value", 0.0))])


def clamp(graph, call):
    low, high = call.attrs.get("low"), call.attrs.get("high")
    bounds = [_scalar(graph, call, v) if v is not None else "" for v in (low, high)]
    return graph.add("Clip", [call.ins[0]] + bounds)


def hardtanh(graph, call):
    return graph.add("Clip", [call.ins[0], _scalar(graph, call, call.attrs["min_val"]),
                              _scalar(graph, call, call.attrs["max_val"])])


def power(graph, call):
    return graph.add("Pow", [call.ins[0], _scalar(graph, call, call.attrs["exponent"])])


def silu(graph, call):
    return graph.add("Mul", [call.ins[0], graph.add("Sigmoid", [call.ins[0]])[0]])


def gelu(graph, call):
    """ONNX Gelu from opset 20; before it, spelled out as minigrad computes it:
    x (1 + erf(x / sqrt 2)) / 2, or with approximate="tanh" x (1 + tanh(u)) / 2,
    u = sqrt(2 / pi) (x + 0.044715 x^3)."""
    x, approximate = call.ins[0], call.attrs.get("approximate", "none")
    if graph.opset >= 20:
        return graph.add("Gelu", [x], approximate=approximate)
    if approximate == "tanh":
        (cube,) = graph.add("Mul", [graph.add("Mul", [x, x])[0], x])
        (inner,) = graph.add("Add", [x, graph.add("Mul", [cube, _scalar(graph, call,
                                                                        0.044715)])[0]])
        (u,) = graph.add("Mul", [inner, _scalar(graph, call, numpy.sqrt(2 / numpy.pi))])
        (phi,) = graph.add("Tanh", [u])
    else:
        (phi,) = graph.add("Erf", [graph.add("Mul", [x, _scalar(graph, call,
                                                                numpy.sqrt(0.5))])[0]])
    (y,) = graph.add("Mul", [x, graph.add("Add", [phi, _scalar(graph, call, 1.0)])[0]])
    return graph.add("Mul", [y, _scalar(graph, call, 0.5)])


def cast(graph, call):
    return graph.add("Cast", [call.ins[0]], to=graph.kind(call.outs[0].dtype))


def broadcast_to(graph, call):
    """Expand; a size the input already has is written 1, which Expand keeps as the input's
    (so it follows the batch without a computation)."""
    shape, source = list(call.attrs["shape"]), call.node.inputs[0].shape
    offset = len(shape) - len(source)
    shape = [1 if i >= offset and size == source[i - offset] else size
             for i, size in enumerate(shape)]
    return graph.add("Expand", [call.ins[0], graph.ints(shape)])


CONVERTERS = {
    "conv2d": conv2d, "linear": linear, "matmul": same("MatMul"),
    "add": same("Add"), "sub": same("Sub"), "mul": same("Mul"), "div": same("Div"),
    "maximum": same("Max"), "minimum": same("Min"), "neg": same("Neg"), "abs": same("Abs"),
    "exp": same("Exp"), "log": same("Log"), "sqrt": same("Sqrt"), "erf": same("Erf"),
    "relu": same("Relu"), "sigmoid": same("Sigmoid"), "tanh": same("Tanh"),
    "leaky_relu": lambda graph, call: graph.add(
        "LeakyRelu", [call.ins[0]], alpha=float(call.attrs["negative_slope"])),
    "elu": lambda graph, call: graph.add("Elu", [call.ins[0]], alpha=float(call.attrs["alpha"])),
    "silu": silu, "gelu": gelu, "hardtanh": hardtanh, "clamp": clamp, "pow": power,
    "softmax": _axis("Softmax"), "log_softmax": _axis("LogSoftmax"),
    "concatenate": _axis("Concat"), "stack": stack, "split": split,
    "max_pool2d": _pool("MaxPool", lambda a: {"dilations": list(a.get("dilation", (1, 1)))}),
    "avg_pool2d": _pool("AveragePool", lambda a: {
        "count_include_pad": int(a.get("count_include_pad", True))}),
    "reshape": reshape, "transpose": transpose, "broadcast_to": broadcast_to,
    "getitem": getitem, "where": same("Where"), "pad": pad, "clone": same("Identity"),
    "cast": cast,
    "sum": _reduce("ReduceSum"), "mean": _reduce("ReduceMean"), "max": _reduce("ReduceMax"),
    "min": _reduce("ReduceMin"),
    "fused_batch_norm": fused_batch_norm, "fused_batch_norm_act": fused_batch_norm_act,
    "normalize": normalize,
}
