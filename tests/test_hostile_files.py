"""Hostile checkpoint, .caffemodel and .prototxt files: what rejecting or loading one costs in
memory stays a small multiple of the file's size, every message is short, and every oddity is
the reader's error naming the file. Memory is measured in a fresh process (peak resident memory,
VmHWM: ru_maxrss would start at the parent's) over the file's size, at sizes proportional to the
attacks' and small enough to stay fast.

Peak memory over the file's size, at the attacks' scale (1,000,000 entries; before -> after):
1M zero-size .safetensors tensors 17.6x -> 10x, 1M empty dicts saved by mg.save 21.7x ->
12.8x, a .caffemodel of 1M empty layers 101x -> 38x (what the loaded layers themselves take:
~37x), a 40 MB file of zeros as a prototxt 4x and a 40-million-character message -> 0.2x, at
once. The bounds asserted below are those after, with room for allocator noise."""
import io
import json
import math
import os
import struct
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import minigrad as mg
from minigrad.formats import caffe as caffe_format
from minigrad.formats.caffe_schema import messages
from minigrad.nn import caffe

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PEAK = """
import contextlib, os, sys
import minigrad as mg
from minigrad.formats import caffe as caffe_format
from minigrad.nn import caffe
path = sys.argv[1]
max_bytes = int(sys.argv[2]) if len(sys.argv) > 2 else None   # None: each reader's default
if path.endswith((".caffemodel", ".prototxt")):
    caffe_format.messages()   # protobuf's import, so that it is not counted below

def status(key):   # resident memory now (VmRSS) or at its peak (VmHWM), in bytes
    return int(open("/proc/self/status").read().split(key + ":")[1].split()[0]) * 1024

with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as file:
    file.write("5")     # the peak so far (imports) becomes the present
before = status("VmRSS")
try:
    if path.endswith((".safetensors", ".npz", ".pt")):
        mg.load(path, max_bytes=max_bytes)
    elif path.endswith(".caffemodel"):
        caffe.read_caffemodel(path, max_bytes)
    else:
        caffe.read_prototxt(path, max_bytes)
    message = ""
except ValueError as error:
    message = str(error)
print(max(status("VmHWM") - before, 0) / os.path.getsize(path), len(message))
print(message)
"""


def _peak_ratio(path, max_bytes=None):
    """(peak memory of reading `path` in a fresh process / the file's size, length of the
    error message, 0 if it loaded); with `max_bytes`, also the message."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [ROOT] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    limit = [] if max_bytes is None else [str(max_bytes)]
    out = subprocess.run([sys.executable, "-c", PEAK, str(path), *limit], env=env, check=True,
                         capture_output=True, text=True).stdout.split("\n", 1)
    ratio, length = out[0].split()
    if max_bytes is None:
        return float(ratio), int(length)
    return float(ratio), int(length), out[1].strip()


memory = pytest.mark.skipif(not sys.platform.startswith("linux"),
                            reason="reads /proc for resident memory")
try:
    messages()
    needs_protobuf = pytest.mark.skipif(False, reason="")
except ImportError:
    needs_protobuf = pytest.mark.skip(reason="the Caffe readers need protobuf")


def _safetensors_file(header, payload=b""):
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + payload


# ---------------------------------------------------------------- memory amplification
@memory
def test_many_zero_size_safetensors_tensors(tmp_path):
    path = tmp_path / "zeros.safetensors"
    header = {f"t{i}": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}
              for i in range(150_000)}
    path.write_bytes(_safetensors_file(header))
    ratio, _ = _peak_ratio(path)
    assert ratio < 13             # was 17.6


@memory
@pytest.mark.parametrize("extension", [".safetensors", ".npz"])
def test_many_empty_dicts_saved_by_mg_save(tmp_path, extension):
    path = tmp_path / f"dicts{extension}"
    mg.save({i: {} for i in range(250_000)}, path)
    ratio, _ = _peak_ratio(path)
    assert ratio < 16             # was 21.7 (.safetensors) and 23.6 (.npz)


@memory
@needs_protobuf
def test_a_caffemodel_of_many_empty_layers(tmp_path):
    path = tmp_path / "layers.caffemodel"
    net = messages()["NetParameter"]()
    for i in range(200_000):
        net.layer.add(name=f"l{i}")
    path.write_bytes(net.SerializeToString())
    ratio, _ = _peak_ratio(path)
    assert ratio < 50             # was 101; the layers read back take ~37


@memory
@needs_protobuf
def test_a_caffemodel_layer_with_many_bottoms(tmp_path):
    path = tmp_path / "bottoms.caffemodel"
    net = messages()["NetParameter"]()
    net.layer.add(name="x", type="ReLU").bottom.extend(f"b{i}" for i in range(600_000))
    path.write_bytes(net.SerializeToString())
    ratio, _ = _peak_ratio(path)
    assert ratio < 20             # was 16-22; the names read back take ~9


@memory
@needs_protobuf
def test_a_prototxt_of_many_layers(tmp_path):
    path = tmp_path / "layers.prototxt"
    path.write_text("".join(f'layer {{ name: "l{i}" type: "ReLU" }}\n' for i in range(60_000)))
    ratio, _ = _peak_ratio(path)
    assert ratio < 40             # was 31-43; the layers read back take ~19


def _many_empty(path):
    """A file of many empty things: 150,000 zero-size tensors, 200,000 layers without blobs,
    or 60,000 prototxt layers (about 10, 2.4 and 2.3 MB)."""
    if path.suffix == ".safetensors":
        path.write_bytes(_safetensors_file({
            f"t{i}": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}
            for i in range(150_000)}))
    elif path.suffix == ".caffemodel":
        net = messages()["NetParameter"]()
        for i in range(200_000):
            net.layer.add(name=f"l{i}")
        path.write_bytes(net.SerializeToString())
    else:
        path.write_text("".join(f'layer {{ name: "l{i}" type: "ReLU" }}\n'
                                for i in range(60_000)))
    return path


@memory
@pytest.mark.parametrize("extension", [
    ".safetensors",
    pytest.param(".caffemodel", marks=needs_protobuf),
    pytest.param(".prototxt", marks=needs_protobuf)])
def test_what_a_reader_builds_is_charged_against_max_bytes(tmp_path, extension):
    """Each entry, layer or blob is charged as it is built (formats.Budget), as the .pt reader's
    objects are: past max_bytes the read stops with a message naming it, having taken about
    max_bytes (plus the file's text: its JSON, or protobuf's parse of a prototxt). Before, these
    files read to the end whatever the limit: 10x, 34x and 30x their size (1M zero-size tensors
    in a safetensors header, 1M empty layers, 300,000 prototxt layers). A larger max_bytes
    reads them."""
    path = _many_empty(tmp_path / f"many{extension}")
    size = os.path.getsize(path)
    ratio, _, message = _peak_ratio(path, 4 * size)
    assert f"more memory than max_bytes={4 * size}" in message, message
    assert ratio < 4 + 3, ratio
    assert _peak_ratio(path, 100 * size)[1:] == (0, "")


@memory
@needs_protobuf
def test_a_file_of_zeros_given_as_a_prototxt_is_refused_at_once(tmp_path):
    path = tmp_path / "zeros.prototxt"
    with open(path, "wb") as file:
        file.truncate(64 << 20)   # 64 MiB of zeros (sparse: nothing written)
    ratio, length = _peak_ratio(path)
    assert ratio < 0.5 and 0 < length < 300     # was 3x its size, a 64-million-character message
    with pytest.raises(caffe.CaffeFormatError, match=r"zeros.prototxt: .*control character"):
        caffe.read_prototxt(path)


# ---------------------------------------------------------------- hostile .pt pickles
def _pt_file(path, pickled):
    """A .pt-shaped zip (formats/pytorch.py) holding the pickle `pickled` and one empty
    float storage "0"."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", pickled)
        archive.writestr("archive/data/0", b"")
        archive.writestr("archive/version", "3\n")
    return path


def _listed(items, head=b""):
    """A protocol-2 pickle of a list of the pickled `items`, appended 1,000 at a time."""
    out = bytearray(b"\x80\x02" + head + b"]")
    for start in range(0, len(items), 1000):
        out += b"(" + b"".join(items[start:start + 1000]) + b"e"
    return bytes(out + b".")


_EMPTY_TENSOR = (b"ctorch._utils\n_rebuild_tensor_v2\nq\x01((X\x07\x00\x00\x00storage"
                 b"ctorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x00tq\x06Q"
                 b"K\x00K\x00\x85K\x01\x85\x89ccollections\nOrderedDict\nq\x07)RtR")


def _empty_tensor_at(offset):   # a zero-size view of storage "0" (memo 1, 6, 7: see above)
    return b"h\x01(h\x06QJ" + struct.pack("<i", offset) + b"K\x00\x85K\x01\x85\x89h\x07)RtR"


@memory
@pytest.mark.parametrize("name, pickled", [
    ("memo", b"\x80\x02K\x07r\x00\x00\x00\x01."),           # LONG_BINPUT 2**24: was 256 MiB
    ("dicts", _listed([b"}"] * 300_000)),                     # was 367x its size
    ("shared", _listed([b"h\x00"] * 300_000, head=b"}q\x00")),  # one dict, 300,000 times: 152x
    ("tensors", _listed([_EMPTY_TENSOR] + [_empty_tensor_at(i) for i in range(1, 120_000)])),
])   # (zero-size tensors: 40x)
def test_a_pt_pickle_takes_at_most_the_documented_budget(tmp_path, name, pickled):
    """mg.load's documented bound, 8 times the file's size + 64 MiB, for pickles that build
    many objects from few bytes (formats/weights_pickle.py charges each one)."""
    path = _pt_file(tmp_path / f"{name}.pt", pickled)
    ratio, length = _peak_ratio(path)
    size = os.path.getsize(path)
    assert ratio * size < 8 * size + (64 << 20) and length < 400


def test_a_pt_pickle_past_max_bytes_is_refused_and_a_larger_one_loads_it(tmp_path):
    path = _pt_file(tmp_path / "dicts.pt", _listed([b"}"] * 20_000))
    with pytest.raises(mg.CheckpointError, match="objects would take more memory .*max_bytes"):
        mg.load(path, max_bytes=1 << 20)
    assert mg.load(path) == [{}] * 20_000


# ---------------------------------------------------------------- deflate bomb: max_bytes
def test_a_deflate_bomb_is_refused_by_default_and_loads_with_a_larger_max_bytes(tmp_path):
    path = tmp_path / "bomb.npz"
    np.savez_compressed(path, x=np.zeros(128 << 20, np.uint8))    # 128 MiB in ~130 KB
    assert os.path.getsize(path) < 1 << 20
    with pytest.raises(mg.CheckpointError, match=r"bomb.npz.*max_bytes=\d+") as info:
        mg.load(path)
    assert "expand to 134217856 bytes" in str(info.value)
    with pytest.raises(mg.CheckpointError, match="max_bytes=1000"):
        mg.load(path, max_bytes=1000)
    assert mg.load(path, max_bytes=math.inf)["x"].shape == (128 << 20,)


def test_max_bytes_caps_safetensors_too_and_the_default_passes_uncompressed_files(tmp_path):
    for extension in (".safetensors", ".npz"):
        path = tmp_path / f"big{extension}"
        mg.save({"x": np.ones(3 << 20, np.float32)}, path)     # 12 MiB
        assert mg.load(path)["x"].shape == (3 << 20,)
        with pytest.raises(mg.CheckpointError, match="max_bytes=1048576"):
            mg.load(path, max_bytes=1 << 20)


# ---------------------------------------------------------------- odd headers and shapes
@pytest.mark.parametrize("raw", [
    b'{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},'
    b' "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}',
    b'{"a": {"dtype": "F32", "dtype": "I32", "shape": [1], "data_offsets": [0, 4]}}',
    b'{"__metadata__": {"k": "1", "k": "2"},'
    b' "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}',
])
def test_a_duplicate_json_key_in_a_safetensors_header_is_refused(tmp_path, raw):
    path = tmp_path / "twice.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(4))
    with pytest.raises(mg.CheckpointError, match=r"twice.safetensors.*appears twice"):
        mg.load(path)


def test_a_duplicate_json_key_in_an_npz_manifest_is_refused(tmp_path):
    path = tmp_path / "twice.npz"
    mg.save({"x": np.ones(2)}, path)
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    members["__minigrad__.json"] = (b'{"format": "minigrad.npz/1", "arrays": ["x"], '
                                    b'"structure": null, "structure": null}')
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    with pytest.raises(mg.CheckpointError, match=r"twice.npz.*'structure' appears twice"):
        mg.load(path)


def _npy_with_header(shape, data):
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": "<f4", "fortran_order": False,
                                                  "shape": shape})
    return buffer.getvalue() + data


@pytest.mark.parametrize("shape, nbytes", [((1,) * 65, 4), ((1 << 63, 0), 0),
                                           ((1 << 40, 1 << 30, 0), 0)])
def test_shapes_numpy_cannot_hold_are_checkpoint_errors(tmp_path, shape, nbytes):
    path = tmp_path / "shape.safetensors"
    path.write_bytes(_safetensors_file(
        {"x": {"dtype": "F32", "shape": list(shape), "data_offsets": [0, nbytes]}},
        bytes(nbytes)))
    with pytest.raises(mg.CheckpointError, match=r"shape.safetensors.*at most 64 dimensions"):
        mg.load(path)
    path = tmp_path / "shape.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("x.npy", _npy_with_header(shape, bytes(nbytes)))
    with pytest.raises(mg.CheckpointError, match=r"shape.npz.*at most 64 dimensions"):
        mg.load(path)


# ---------------------------------------------------------------- Caffe oddities
def _caffemodel(path, blob_bytes):
    """A .caffemodel of one Convolution layer whose one blob is `blob_bytes` (a serialized
    BlobProto, possibly with fields the schema does not know)."""
    layer = messages()["LayerParameter"](name="conv", type="Convolution")
    layer.blobs.add().MergeFromString(blob_bytes)
    net = messages()["NetParameter"]()
    net.layer.append(layer)
    path.write_bytes(net.SerializeToString())


@needs_protobuf
@pytest.mark.parametrize("type_field", [b"\x50\x07", b""], ids=["unknown type 7", "no type"])
def test_raw_data_of_an_unknown_or_missing_raw_data_type_is_refused(tmp_path, type_field):
    blob = messages()["BlobProto"]()
    blob.shape.dim.append(2)
    blob.raw_data = np.ones(2, "<f8").tobytes()
    path = tmp_path / "raw.caffemodel"
    _caffemodel(path, blob.SerializeToString() + type_field)   # field 10 (varint) = 7
    with pytest.raises(caffe.CaffeFormatError, match=r"raw.caffemodel: .*raw_data_type"):
        caffe.read_caffemodel(path)


@needs_protobuf
@pytest.mark.parametrize("dims", [[1] * 65, [1 << 62, 4, 0]])
def test_blob_shapes_numpy_cannot_hold_are_refused(tmp_path, dims):
    blob = messages()["BlobProto"]()
    blob.shape.dim.extend(dims)
    blob.data.extend([1.0] * (math.prod(dims) if len(dims) == 65 else 0))
    path = tmp_path / "shape.caffemodel"
    _caffemodel(path, blob.SerializeToString())
    with pytest.raises(caffe.CaffeFormatError, match=r"shape.caffemodel: .*at most 64"):
        caffe.read_caffemodel(path)


@needs_protobuf
def test_the_layer_by_layer_reader_still_refuses_damaged_and_mixed_files(tmp_path):
    good = messages()["NetParameter"]()
    good.layer.add(name="a", type="ReLU")
    good.layer.add(name="b", type="ReLU")
    data = good.SerializeToString()
    path = tmp_path / "net.caffemodel"
    path.write_bytes(data)
    assert list(caffe.read_caffemodel(path)) == ["a", "b"]
    for damaged in (data[:-1], data + b"\x0f", data + b"\xa2\x06\x7f"):   # cut, wire type 7, long
        path.write_bytes(damaged)
        with pytest.raises(caffe.CaffeFormatError, match="net.caffemodel: not a Caffe model"):
            caffe.read_caffemodel(path)
    mixed = messages()["NetParameter"]()
    mixed.layer.add(name="a")
    mixed.layers.add(name="b")
    path.write_bytes(mixed.SerializeToString())
    with pytest.raises(caffe.CaffeFormatError, match="both `layer` and deprecated V1"):
        caffe.read_caffemodel(path)


@needs_protobuf
@pytest.mark.parametrize("depth", [150, 5000])
@pytest.mark.parametrize("field", ["layer { name: \"x\" junk ", "junk "])
def test_deeply_nested_prototxt_is_a_clear_error(tmp_path, depth, field):
    path = tmp_path / "deep.prototxt"
    closing = depth + (1 if field.startswith("layer") else 0)
    path.write_text(field + "{ a " * depth + "}" * closing)
    with pytest.raises(caffe.CaffeFormatError, match="deep.prototxt:") as info:
        caffe.read_prototxt(path)
    assert len(str(info.value)) < 400


@needs_protobuf
def test_prototxt_text_checks(tmp_path, monkeypatch):
    path = tmp_path / "net.prototxt"
    path.write_bytes(b'layer { name: "a" type: "ReLU" }\n\xff\xfe')
    with pytest.raises(caffe.CaffeFormatError, match="net.prototxt: not a text prototxt"):
        caffe.read_prototxt(path)
    monkeypatch.setattr(caffe_format, "_MAX_LINE", 100)
    monkeypatch.setattr(caffe_format, "_PIECE", 64)      # the long line spans pieces
    path.write_text('layer { name: "a" type: "ReLU" }\n' + " " * 150 + "\n")
    with pytest.raises(caffe.CaffeFormatError, match="a line longer than 100 characters"):
        caffe.read_prototxt(path)
    path.write_text('layer { name: "a" type: "ReLU" }\n' + " " * 90 + "\n" + "layer { }\n")
    assert [layer.name for layer in caffe.read_prototxt(path)] == ["a", ""]
    path.write_text("layer { name: " + "x" * 5000 + " }")     # a parse error quoting the file
    with pytest.raises(caffe.CaffeFormatError) as info:
        caffe.read_prototxt(path)
    assert len(str(info.value)) < 400
