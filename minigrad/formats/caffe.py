"""Caffe's files: the binary `.caffemodel` (a NetParameter protobuf) and the text `.prototxt`.

    read_caffemodel(path)          -> {layer name: CaffeLayer(type, blobs, bottom, top)}
    write_caffemodel(path, layers)    the same mapping back to a .caffemodel, atomically
    read_prototxt(path)            -> [PrototxtLayer(name, type, bottom, top, params)]

Both layer lists are read: the current `layer` (field 100) and the deprecated V1 `layers`
(field 2, whose type is an enum: V1's CONVOLUTION comes back as "Convolution", as Caffe's own
upgrade names it). A blob's shape is its `shape` field, or the legacy num/channels/height/width
(then 4-D, as Caffe reads it); its values are NVIDIA Caffe's `raw_data` when present (float16,
float32 or float64, as `raw_data_type` says), else `double_data` when present (float64), else
`data` (float32). Writing uses the current layout: `layer`, `shape`, packed `data` (float32) or
`double_data` (float64); float16 blobs go to `raw_data`, which only NVIDIA Caffe reads.

A file that is truncated inside a layer, or is not a NetParameter at all, raises
`CaffeFormatError` naming the file. (A cut exactly between two top-level layers leaves a valid,
shorter NetParameter: protobuf has no end marker. `load_caffe` then reports the missing layers.)
"""
import itertools
import math
import os
import re
from collections import OrderedDict, namedtuple

import numpy

from ..atomic import atomic_write
from . import Budget, default_max_bytes
from .caffe_schema import PARAMS, RAW_DTYPES, V1_LAYER_TYPES, messages

CaffeLayer = namedtuple("CaffeLayer", ["type", "blobs", "bottom", "top"])
CaffeLayer.__doc__ = """One layer of a .caffemodel: its type string ("Convolution"), its blobs
(NumPy arrays, in file order), and the names of its bottom (input) and top (output) blobs."""

PrototxtLayer = namedtuple("PrototxtLayer", ["name", "type", "bottom", "top", "params"])
PrototxtLayer.__doc__ = """One layer of a .prototxt: name, type, bottom and top lists, and
`params`: {"convolution_param": {"num_output": 6, "kernel_size": [5], ...}, ...} for each of
batch_norm_param, scale_param, convolution_param, inner_product_param, pooling_param the layer
sets, every field of it with Caffe's default where the file leaves it out."""

_V1_TYPE_NAMES = {number: name for number, name in V1_LAYER_TYPES.values()}
_MAX_DIMS = 64   # NumPy's limit on an array's dimensions


class CaffeFormatError(ValueError):
    """A Caffe file could not be read (or written): the message names the file and why."""


# ------------------------------------------------------------------------------------ reading
def read_caffemodel(path, max_bytes=None):
    """The layers of a binary .caffemodel as an OrderedDict, in file order: layer name ->
    CaffeLayer(type, blobs, bottom, top). Layers without blobs (ReLU, Pooling...) are included
    with an empty blob list.

    max_bytes: the most memory the file and what is read from it may take (default 8 times the
    file's size + 64 MiB, as `mg.load`); each layer is charged as it is read (a CaffeFormatError
    naming max_bytes past it), so a small file of very many layers is refused instead of taking
    ~40 times its size. protobuf's parse of one layer at a time adds little besides."""
    budget = _budget(path, max_bytes)
    with open(path, "rb") as file:
        data = file.read()
    budget.charge(len(data), "bytes")
    layers = OrderedDict()
    for message, v1 in _binary_layers(path, data):
        name, type_, bottom, top = _names(path, message, v1)
        if name in layers:
            raise CaffeFormatError(f"{path}: two layers are named {name!r}")
        budget.charge(_layer_bytes(name, bottom, top), "layers")
        blobs = [_blob_array(path, name, index, blob) for index, blob in enumerate(message.blobs)]
        budget.charge(sum(_BLOB_BYTES + blob.nbytes for blob in blobs), "blobs")
        layers[name] = CaffeLayer(type_, blobs, bottom, top)
    return layers


# Bytes charged for a layer read back (its record, lists and dict entry: a million empty layers
# took 41 times their file), for each of its names, and for a blob besides its values
_LAYER_BYTES, _NAME_BYTES, _BLOB_BYTES = 400, 64, 128
_PARAM_BYTES = 200   # a field of a layer's params read back (its dict entry, value, list)
_TREE_EXPANSION = 4  # protobuf's message tree of a prototxt over the text's size (measured 3.8)


def _budget(path, max_bytes):
    return Budget(default_max_bytes(path) if max_bytes is None else max_bytes,
                  lambda cause: CaffeFormatError(f"{path}: {cause}"))


def _layer_bytes(name, bottom, top):
    return _LAYER_BYTES + _NAME_BYTES * (1 + len(bottom) + len(top)) + len(name) + sum(
        map(len, bottom)) + sum(map(len, top))


def _binary_layers(path, data):
    """(message, is_v1) for each layer of the NetParameter bytes `data`, parsed one layer at a
    time: the NetParameter's fields are walked here (protobuf's wire format: a varint key =
    field number << 3 | wire type, then the value), so only one layer's message lives at once,
    not a message tree of the whole file. Caffe refuses files that mix `layer` and V1 `layers`,
    so do we."""
    classes = messages()      # first: says what to install without protobuf
    from google.protobuf.message import DecodeError

    if not data:
        raise CaffeFormatError(f"{path}: the file is empty, not a Caffe model")

    def damaged():
        return CaffeFormatError(f"{path}: not a Caffe model file (a binary NetParameter "
                                f"protobuf), or one cut short{_text_hint(data)}")
    kinds, at = set(), 0
    while at < len(data):
        key, at = _read_varint(data, at, damaged)
        number, wire = key >> 3, key & 7
        start = at
        if wire == 0:
            _, at = _read_varint(data, at, damaged)
        elif wire in _FIXED_SIZES:
            at += _FIXED_SIZES[wire]
        elif wire == 2:
            length, start = _read_varint(data, at, damaged)
            at = start + length
        else:
            raise damaged()
        if number == 0 or at > len(data):
            raise damaged()
        if wire == 2 and number in _LAYER_FIELDS:
            v1 = _LAYER_FIELDS[number] == "V1LayerParameter"
            kinds.add(v1)
            if len(kinds) == 2:
                raise CaffeFormatError(f"{path}: the file has both `layer` and deprecated V1 "
                                       "`layers` entries; Caffe accepts only one kind")
            try:
                yield classes[_LAYER_FIELDS[number]].FromString(data[start:at]), v1
            except DecodeError:
                raise damaged() from None
    if not kinds:
        raise CaffeFormatError(f"{path}: no Caffe layers in this file: it is not a .caffemodel"
                               f"{_text_hint(data)}")


_LAYER_FIELDS = {100: "LayerParameter", 2: "V1LayerParameter"}   # NetParameter's layer lists
_FIXED_SIZES = {1: 8, 5: 4}      # wire types of 64-bit and 32-bit values


def _read_varint(data, at, damaged):
    """(value, position after it) of the varint at data[at]; damaged() past the end."""
    value = shift = 0
    while at < len(data) and shift < 70:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if byte < 0x80:
            return value, at
        shift += 7
    raise damaged()


def _text_hint(data):
    head = data[:4096]
    if head.isascii() and re.search(rb"\b(layers?|name)\s*[:{]", head):
        return "; it looks like a text prototxt: read it with read_prototxt"
    return ""


def _layer_messages(path, net):
    """(message, is_v1) for each layer, one at a time (a list of them all held a Python object
    per layer); Caffe refuses files that mix both lists, so do we."""
    if net.layer and net.layers:
        raise CaffeFormatError(f"{path}: the file has both `layer` and deprecated V1 `layers` "
                               "entries; Caffe accepts only one kind")
    yield from ((layer, False) for layer in net.layer)
    yield from ((layer, True) for layer in net.layers)


def _names(path, message, v1):
    """(name, type, bottom, top) of a layer message. protobuf hands back bytes, not str, for
    text fields that are not UTF-8: a sign of a corrupt or foreign file."""
    type_ = _V1_TYPE_NAMES.get(message.type, "") if v1 else message.type
    values = [message.name, type_, list(message.bottom), list(message.top)]
    for text in itertools.chain(values[:2], values[2], values[3]):
        if isinstance(text, bytes):
            raise CaffeFormatError(f"{path}: a layer or blob name is not UTF-8 text "
                                   f"({text[:32]!r}): the file is corrupt or not a .caffemodel")
    return values


def _blob_array(path, layer, index, blob):
    """A blob as a NumPy array of its shape: float64 from double_data, NVIDIA's raw_data in its
    raw_data_type (float16, float32 or float64), else float32 from data."""
    legacy = ("num", "channels", "height", "width")
    if any(blob.HasField(name) for name in legacy):
        shape = tuple(getattr(blob, name) for name in legacy)
    else:
        shape = tuple(blob.shape.dim)
    if len(shape) > _MAX_DIMS or math.prod(max(n, 1) for n in shape) >= 1 << 63:
        raise CaffeFormatError(f"{path}: layer {layer!r} blob {index} has the shape "
                               f"{str(shape):.100} of {len(shape)} dimensions; arrays hold at "
                               f"most {_MAX_DIMS} dimensions and 2**63 - 1 values")
    if blob.HasField("raw_data"):
        values = _raw_values(path, layer, index, blob)
    elif blob.double_data:
        values = numpy.array(blob.double_data, dtype=numpy.float64)
    else:
        values = numpy.array(blob.data, dtype=numpy.float32)
    if min(shape, default=0) < 0 or values.size != math.prod(shape):
        raise CaffeFormatError(f"{path}: layer {layer!r} blob {index} has {values.size} values, "
                               f"but its shape {shape} holds {math.prod(shape)}")
    return values.reshape(shape)


def _raw_values(path, layer, index, blob):
    if not blob.HasField("raw_data_type"):    # absent, or a number the enum does not have
        raise CaffeFormatError(f"{path}: layer {layer!r} blob {index} holds raw_data without a "
                               f"known raw_data_type (one of {', '.join(RAW_DTYPES)}), so its "
                               "values cannot be read")
    kind = blob.Type.Name(blob.raw_data_type)
    if kind not in RAW_DTYPES:
        raise CaffeFormatError(f"{path}: layer {layer!r} blob {index} holds raw {kind} values; "
                               f"weights are {', '.join(RAW_DTYPES)}")
    dtype = numpy.dtype(RAW_DTYPES[kind])
    if len(blob.raw_data) % dtype.itemsize:
        raise CaffeFormatError(f"{path}: layer {layer!r} blob {index} has {len(blob.raw_data)} "
                               f"bytes of raw {kind} data, not a whole number of values")
    return numpy.frombuffer(blob.raw_data, dtype).astype(dtype.newbyteorder("="))


def read_prototxt(path, max_bytes=None):
    """The layers of a text .prototxt (current `layer { ... }` or V1 `layers { ... }`) as a
    list of PrototxtLayer(name, type, bottom, top, params), in file order. Fields this reader
    does not know (param { lr_mult }, fillers, data sources) are skipped.

    The file is checked to be text first, in pieces (UTF-8, no control characters but
    whitespace, no line over 16 MiB), then parsed line by line as it is read: a binary or
    hostile file costs no more memory than a piece, and every message is capped.

    max_bytes (default 8 times the file's size + 64 MiB): the most memory the layers read back
    may take, each charged as it is made (a CaffeFormatError naming max_bytes past it), after
    protobuf's parse of the whole text into its message tree, which is charged as 4 times the
    file (what it took for many small layers; docs/caffe.md) but cannot be stopped midway."""
    net = messages()["NetParameter"]()         # first: says what to install without protobuf
    from google.protobuf import text_format

    _check_text(path)
    budget = _budget(path, max_bytes)
    budget.charge(_TREE_EXPANSION * os.path.getsize(path), "message tree")
    try:
        with open(path, encoding="utf-8") as file:
            text_format.ParseLines(file, net, allow_unknown_field=True,
                                   max_recursion_depth=_MAX_NESTING)
    except text_format.ParseError as error:     # its text starts with "line:column : "
        raise CaffeFormatError(f"{path}:{_clip(str(error))}") from None
    except RecursionError:
        raise CaffeFormatError(f"{path}: blocks nested too deeply (more than {_MAX_NESTING} "
                               "levels of { }): not a Caffe network definition") from None
    layers = []
    for message, v1 in _layer_messages(path, net):
        name, type_, bottom, top = _names(path, message, v1)
        params = _params(message)
        budget.charge(_layer_bytes(name, bottom, top) + _PARAM_BYTES * sum(
            len(fields) for fields in params.values()), "layers")
        layers.append(PrototxtLayer(name, type_, bottom, top, params))
    return layers


_MAX_NESTING = 100          # levels of { } a prototxt may nest (Caffe's use about 4)
_MAX_LINE = 1 << 24         # characters a prototxt line may hold
_PIECE = 1 << 20
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")     # control characters but whitespace


def _check_text(path):
    """CaffeFormatError unless the file at `path` is UTF-8 text with lines of at most
    _MAX_LINE characters and no control characters but whitespace, read a piece at a time."""
    line = at = 0
    with open(path, encoding="utf-8", newline="") as file:
        try:
            for piece in iter(lambda: file.read(_PIECE), ""):
                bad = _CONTROL.search(piece)
                if bad:
                    raise CaffeFormatError(
                        f"{path}: not a text prototxt: character {at + bad.start()} is the "
                        f"control character {bad.group()!r} (binary data?)")
                lines = piece.split("\n")
                longest = max([line + len(lines[0]), *map(len, lines[1:])])
                line = line + len(lines[0]) if len(lines) == 1 else len(lines[-1])
                if longest > _MAX_LINE:
                    raise CaffeFormatError(f"{path}: a line longer than {_MAX_LINE} "
                                           "characters: not a Caffe network definition")
                at += len(piece)
        except UnicodeDecodeError as error:
            raise CaffeFormatError(f"{path}: not a text prototxt ({_clip(str(error))})") from None


def _clip(text, limit=300):
    """`text` cut to `limit` characters (a message quoting a hostile file stays short)."""
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


def _params(layer):
    """{param message name: {field: value}} for the PARAMS the layer sets."""
    present = [name for name in PARAMS
               if name in layer.DESCRIPTOR.fields_by_name and layer.HasField(name)]
    return {name: _fields(getattr(layer, name)) for name in present}


def _fields(message):
    values = {}
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        repeated = getattr(field, "is_repeated", None)     # protobuf 7; before, only label
        if repeated is None:
            repeated = field.label == field.LABEL_REPEATED
        if repeated:
            value = list(value)
        elif field.enum_type is not None:
            value = field.enum_type.values_by_number[value].name
        elif field.type == field.TYPE_FLOAT:
            value = float(str(numpy.float32(value)))      # 1e-05, not 9.99999974e-06
        values[field.name] = value
    return values


# ------------------------------------------------------------------------------------ writing
def write_caffemodel(path, layers):
    """Write `layers` ({name: CaffeLayer}, or (name, CaffeLayer) pairs) as a binary
    .caffemodel, atomically: the current `layer` list, each blob with its `shape`, float32
    blobs as `data`, float64 as `double_data`, float16 as NVIDIA's `raw_data`. Readers get the
    arrays back bit for bit."""
    classes = messages()
    net = classes["NetParameter"]()
    items = layers.items() if hasattr(layers, "items") else layers
    for name, layer in items:
        message = net.layer.add(name=name, type=layer.type, bottom=layer.bottom, top=layer.top)
        for index, blob in enumerate(layer.blobs):
            _fill_blob(path, name, index, message.blobs.add(), blob)
    data = net.SerializeToString()
    atomic_write(os.fspath(path), lambda file: file.write(data))


def _fill_blob(path, layer, index, message, blob):
    array = numpy.asarray(blob)
    if array.dtype not in (numpy.float16, numpy.float32, numpy.float64):
        raise CaffeFormatError(f"{path}: layer {layer!r} blob {index} has dtype {array.dtype}; "
                               "Caffe blobs hold float16, float32 or float64 values")
    message.shape.dim.extend(array.shape)
    if array.dtype == numpy.float16:        # only NVIDIA Caffe reads these
        message.raw_data_type = message.FLOAT16
        message.raw_data = array.astype("<f2").tobytes()
        return
    field, dtype = ("double_data", "<f8") if array.dtype == numpy.float64 else ("data", "<f4")
    message.MergeFromString(_packed(message.DESCRIPTOR.fields_by_name[field].number,
                                    array.astype(dtype).tobytes()))


def _packed(number, payload):
    """A packed repeated field as protobuf encodes it: the key (field number, wire type 2:
    length-delimited), the length, the little-endian values. Handing protobuf these bytes is
    ~10x faster than extending the field from a list, and gives the same file."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _varint(value):
    """protobuf's base-128 varint: 7 bits a byte, low bits first, high bit = more follow."""
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)
