"""Writing the file: the weights go from their arrays to the disk, never copied into protobuf.

Building a ModelProto with its initializers and serializing it holds the weights three or four
times (the arrays, the initializers, the graph's copy of them, the bytes). Here the graph is
serialized without its large weights, and each weight follows it as raw bytes:

    inline (one file, under protobuf's 2 GiB limit on a message)
        the model's bytes, then per weight: field 7 (graph) holding field 5 (initializer)
        holding a TensorProto whose raw_data (field 9) is the array's buffer, written as it is.
        A protobuf parser merges a message field that appears more than once, so the file
        reads as one graph with every initializer.
    external data (past 2 GiB, or external_data=True)
        the weights' bytes one after another in `<name>.data` beside the model, each
        initializer naming its location, offset and length (ONNX's external data).

Weights under 1 KiB (shapes, scalars) stay ordinary initializers, as in onnx's own external
data. The writes are atomic (minigrad/atomic.py): the data file first, then the model.
"""
import os

import numpy

from ..atomic import atomic_write

LIMIT = 2 ** 31 - 1   # bytes: protobuf's limit on one message, the whole file when inline
SMALL = 1024          # bytes: weights below it stay initializers of the model itself


def _little_endian(array):
    """The array's bytes in ONNX's order (little-endian, C order), shared where possible."""
    return numpy.asarray(array, array.dtype.newbyteorder("<"), order="C")


def _key(field, length):
    """A protobuf key for a length-delimited `field` and the length (two varints)."""
    out = bytearray()
    for number in (field << 3 | 2, length):
        while number >= 0x80:
            out.append(number & 0x7F | 0x80)
            number >>= 7
        out.append(number)
    return bytes(out)


def _tensor(onnx, name, array, **fields):
    return onnx.TensorProto(name=name, dims=array.shape, data_type=onnx.helper.
                            np_dtype_to_tensor_dtype(array.dtype), **fields)


def _inline_head(onnx, name, array):
    """The bytes before the data of one weight appended to the serialized model."""
    body = _tensor(onnx, name, array).SerializeToString() + _key(9, array.nbytes)
    graph = _key(5, len(body) + array.nbytes)
    return _key(7, len(graph) + len(body) + array.nbytes) + graph + body


def _split(onnx, weights):
    """The small weights as initializers; the large ones as (name, little-endian array)."""
    small = [onnx.numpy_helper.from_array(_little_endian(a), name) for name, a in weights
             if a.nbytes < SMALL]
    return small, [(name, _little_endian(a)) for name, a in weights if a.nbytes >= SMALL]


def check(onnx, proto, weights):
    """onnx.checker (with shape inference) on the graph, the large weights as graph inputs of
    their type and shape: the same nodes, types and shapes without a copy of their bytes,
    which save() writes from the arrays as they are."""
    model = onnx.ModelProto()
    model.CopyFrom(proto)
    small, large = _split(onnx, weights)
    model.graph.initializer.extend(small)
    model.graph.input.extend(onnx.helper.make_tensor_value_info(
        name, onnx.helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for name, a in large)
    onnx.checker.check_model(model, full_check=True)


def save(onnx, proto, weights, path, external_data=None):
    """Write the model `proto` (without initializers) and its `weights` at `path`: inline, or
    as external data when `external_data` is True, or None and the file would pass LIMIT."""
    small, large = _split(onnx, weights)
    proto.graph.initializer.extend(small)
    heads = [_inline_head(onnx, name, a) for name, a in large]
    size = proto.ByteSize() + sum(len(h) + a.nbytes for h, (_, a) in zip(heads, large))
    if external_data is None:
        external_data = size > LIMIT
    elif size > LIMIT and not external_data:
        raise ValueError(f"onnx.export: the file would be {size / 2 ** 30:.2f} GiB, past "
                         f"protobuf's 2 GiB limit on one message, which ONNX files are; pass "
                         f"external_data=True (or leave it None) to write the weights to "
                         f"{os.path.basename(path)}.data beside the model, as ONNX external "
                         f"data")
    if not external_data:
        def write(file):
            file.write(proto.SerializeToString())
            for head, (_, array) in zip(heads, large):
                file.write(head)
                file.write(array.data)
        atomic_write(path, write)
        return
    location, offset = os.path.basename(os.fspath(path)) + ".data", 0
    for name, array in large:
        tensor = _tensor(onnx, name, array, data_location=onnx.TensorProto.EXTERNAL)
        for key, value in (("location", location), ("offset", offset),
                           ("length", array.nbytes)):
            tensor.external_data.add(key=key, value=str(value))
        proto.graph.initializer.append(tensor)
        offset += array.nbytes
    atomic_write(os.fspath(path) + ".data",
                 lambda file: [file.write(array.data) for _, array in large])
    atomic_write(path, lambda file: file.write(proto.SerializeToString()))
