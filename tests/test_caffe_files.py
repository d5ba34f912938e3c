"""Caffe files: read_caffemodel / write_caffemodel / read_prototxt, load_caffe / save_caffe.

The readers are tested against bytes written here by hand, with a tiny protobuf wire encoder
(varints, tags, length-delimited records) and the field numbers of Caffe's caffe.proto, not
with minigrad's schema. The numbers loaded into minigrad are compared with a PyTorch twin
filled straight from the raw blobs.
"""
import numpy as np
import pytest
import torch

import minigrad as mg
from minigrad import nn
from minigrad.nn import caffe
from minigrad.nn.module import StateDictError

pytest.importorskip("google.protobuf", reason="the Caffe file readers need protobuf "
                                              "(pip install 'minigrad[caffe]')")


# ------------------------------------------------------------------ a hand-written wire encoder
def snapshot(model):
    """NumPy copies of the state dict (whose tensors share the model's memory)."""
    return {key: value.numpy().copy() for key, value in model.state_dict().items()}


def varint(n):
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def tag(field, wire):           # wire types: 0 varint, 1 64-bit, 2 length-delimited, 5 32-bit
    return varint(field << 3 | wire)


def record(field, payload):
    return tag(field, 2) + varint(len(payload)) + payload


def text(field, value):
    return record(field, value.encode())


def number(field, value):
    return tag(field, 0) + varint(value)


def blob(values, shape=None, legacy=None, double=False, packed=True):
    """BlobProto: num/channels/height/width 1-4, data 5 (float), shape 7 (BlobShape: dim 1,
    packed int64), double_data 8, in field-number order (as protobuf writes them)."""
    field, wire, dtype = (8, 1, "<f8") if double else (5, 5, "<f4")
    values = np.asarray(values).astype(dtype).ravel()
    if packed:
        data = record(field, values.tobytes())
    else:
        data = b"".join(tag(field, wire) + value.tobytes() for value in values)
    out = b"".join(number(f, n) for f, n in zip((1, 2, 3, 4), legacy or (), strict=False))
    out += b"" if double else data
    if shape is not None:
        out += shape_record(shape)
    return out + (data if double else b"")


def raw_blob(values, kind, shape):
    """NVIDIA Caffe's raw blob: shape 7, raw_data_type 10 (DOUBLE 0, FLOAT 1, FLOAT16 2),
    raw_data 12 (little-endian bytes)."""
    dtype = {0: "<f8", 1: "<f4", 2: "<f2"}[kind]
    return shape_record(shape) + number(10, kind) + record(12, np.asarray(values, dtype).tobytes())


def shape_record(shape):
    return record(7, record(1, b"".join(varint(n) for n in shape)))


def layer(name, kind, blobs=(), bottom=(), top=()):
    """LayerParameter: name 1, type 2, bottom 3, top 4, blobs 7."""
    return (text(1, name) + text(2, kind) + b"".join(text(3, b) for b in bottom)
            + b"".join(text(4, t) for t in top) + b"".join(record(7, b) for b in blobs))


def v1_layer(name, kind, blobs=(), bottom=(), top=()):
    """V1LayerParameter: bottom 2, top 3, name 4, type 5 (an enum), blobs 6."""
    return (b"".join(text(2, b) for b in bottom) + b"".join(text(3, t) for t in top)
            + text(4, name) + number(5, kind) + b"".join(record(6, b) for b in blobs))


def net(layers, v1=False, name=None):
    """NetParameter: name 1, V1 layers 2, layer 100. Returns (bytes, top-level boundaries)."""
    parts = ([text(1, name)] if name else []) + [record(2 if v1 else 100, p) for p in layers]
    return b"".join(parts), [sum(map(len, parts[:i])) for i in range(len(parts) + 1)]


def write(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    return path


R = np.random.default_rng(14)
F32 = lambda *shape: R.standard_normal(shape).astype(np.float32)      # noqa: E731


# ------------------------------------------------------------------ reading
def mixed_fixture():
    """Every encoding the reader must handle, in the current `layer` list."""
    w, b = F32(2, 1, 3, 3), F32(2)
    ip_w, ip_b = R.standard_normal((3, 4)), R.standard_normal(3)
    float16 = R.standard_normal((1, 3)).astype(np.float16)
    mean, var, scale, shift = F32(2), R.uniform(0.5, 2, 2).astype(np.float32), F32(2), F32(2)
    raw, half = w.astype("<f4").tobytes(), w.size // 2 * 4
    # a packed field in two records: parsers concatenate them
    two_records = record(5, raw[:half]) + record(5, raw[half:]) + shape_record(w.shape)
    layers = [
        layer("data", "Input", top=["data"]),
        layer("conv1", "Convolution", [two_records, blob(b, shape=b.shape, packed=False)],
              ["data"], ["conv1"]),
        layer("bn1", "BatchNorm", [blob(mean * 3, legacy=(1, 2, 1, 1)),
                                   blob(var * 3, shape=(1, 2, 1, 1)), blob([3.0], shape=(1,))],
              ["conv1"], ["conv1"]),
        layer("scale1", "Scale", [blob(scale, shape=(2,)), blob(shift, shape=(2,))],
              ["conv1"], ["conv1"]),
        layer("relu1", "ReLU", bottom=["conv1"], top=["conv1"]),
        layer("ip", "InnerProduct", [blob(ip_w, legacy=(1, 1, 3, 4), double=True, packed=False),
                                     blob(ip_b, shape=(3,), double=True)], ["conv1"], ["ip"]),
        layer("nv", "Scale", [raw_blob(float16, 2, (1, 3)), raw_blob(ip_b, 1, (3,)),
                              raw_blob(ip_b, 0, (3, 1))], ["ip"], ["ip"]),
    ]
    expected = {"data": ("Input", [], [], ["data"]),
                "conv1": ("Convolution", [w, b], ["data"], ["conv1"]),
                "bn1": ("BatchNorm", [(mean * 3).reshape(1, 2, 1, 1),
                                      (var * 3).reshape(1, 2, 1, 1),
                                      np.array([3.0], np.float32)], ["conv1"], ["conv1"]),
                "scale1": ("Scale", [scale, shift], ["conv1"], ["conv1"]),
                "relu1": ("ReLU", [], ["conv1"], ["conv1"]),
                "ip": ("InnerProduct", [ip_w.reshape(1, 1, 3, 4), ip_b], ["conv1"], ["ip"]),
                "nv": ("Scale", [float16, ip_b.astype(np.float32), ip_b.reshape(3, 1)], ["ip"],
                       ["ip"])}
    return layers, expected


def assert_layers(got, expected):
    assert list(got) == list(expected)
    for name, (kind, blobs, bottom, top) in expected.items():
        assert isinstance(got[name], caffe.CaffeLayer)
        assert (got[name].type, got[name].bottom, got[name].top) == (kind, bottom, top), name
        assert len(got[name].blobs) == len(blobs), name
        for have, want in zip(got[name].blobs, blobs, strict=True):
            assert have.dtype == want.dtype and have.shape == want.shape, name
            assert have.tobytes() == want.tobytes(), name                 # bit for bit


def test_reads_hand_encoded_current_layers(tmp_path):
    layers, expected = mixed_fixture()
    data, _ = net(layers, name="mixed")
    assert_layers(caffe.read_caffemodel(write(tmp_path, "mixed.caffemodel", data)), expected)


def test_reads_hand_encoded_v1_layers(tmp_path):
    w, b = F32(3, 2, 1, 1), F32(3)
    layers = [v1_layer("conv", 4, [blob(w, legacy=(3, 2, 1, 1)), blob(b, legacy=(1, 1, 1, 3))],
                       ["data"], ["conv"]),
              v1_layer("relu", 18, bottom=["conv"], top=["conv"]),
              v1_layer("pool", 17, bottom=["conv"], top=["pool"]),
              v1_layer("fc", 14, [blob(R.standard_normal((2, 3)), shape=(2, 3), double=True,
                                       packed=False)], ["pool"], ["fc"]),
              v1_layer("loss", 21, bottom=["fc", "label"])]
    data, _ = net(layers, v1=True)
    got = caffe.read_caffemodel(write(tmp_path, "v1.caffemodel", data))
    assert [(name, entry.type) for name, entry in got.items()] == [
        ("conv", "Convolution"), ("relu", "ReLU"), ("pool", "Pooling"), ("fc", "InnerProduct"),
        ("loss", "SoftmaxWithLoss")]
    assert got["conv"].blobs[1].shape == (1, 1, 1, 3) and got["fc"].blobs[0].dtype == np.float64
    assert got["conv"].blobs[0].tobytes() == w.tobytes()
    assert got["loss"].bottom == ["fc", "label"] and got["loss"].top == []


def test_writer_bytes_are_caffes_encoding_and_round_trip(tmp_path):
    w, bias, d, h = F32(2, 3, 1, 1), F32(2), R.standard_normal(40), F32(5).astype(np.float16)
    layers = {"c": caffe.CaffeLayer("Convolution", [w, bias], ["x"], ["c"]),
              "r": caffe.CaffeLayer("ReLU", [], ["c"], ["c"]),
              "d": caffe.CaffeLayer("Data64", [d, h], [], [])}
    path = tmp_path / "w.caffemodel"
    caffe.write_caffemodel(path, layers)
    expected, _ = net([layer("c", "Convolution", [blob(w, w.shape), blob(bias, (2,))], ["x"],
                             ["c"]),
                       layer("r", "ReLU", bottom=["c"], top=["c"]),
                       layer("d", "Data64", [blob(d, (40,), double=True), raw_blob(h, 2, (5,))])])
    assert path.read_bytes() == expected
    # and every encoding of the mixed fixture survives read -> write -> read unchanged
    data, _ = net(mixed_fixture()[0])
    first = caffe.read_caffemodel(write(tmp_path, "a.caffemodel", data))
    caffe.write_caffemodel(tmp_path / "b.caffemodel", first)
    again = caffe.read_caffemodel(tmp_path / "b.caffemodel")
    assert_layers(again, {name: tuple(entry) for name, entry in first.items()})
    assert not list(tmp_path.glob(".*.tmp"))                  # the atomic writer's temporary
    with pytest.raises(caffe.CaffeFormatError, match="dtype int64; Caffe blobs hold float16"):
        caffe.write_caffemodel(tmp_path / "b.caffemodel",
                               {"x": caffe.CaffeLayer("X", [np.arange(3)], [], [])})
    assert caffe.read_caffemodel(tmp_path / "b.caffemodel").keys() == first.keys()   # untouched


def test_truncated_at_every_offset_is_a_clear_error_or_a_prefix(tmp_path):
    """Cut inside a record: CaffeFormatError naming the file. Cut exactly between two
    top-level records: protobuf cannot tell; the result is then the first layers, intact."""
    layers, expected = mixed_fixture()
    data, boundaries = net(layers, name="mixed")
    path = tmp_path / "cut.caffemodel"
    prefixes = 0
    for cut in range(len(data)):
        path.write_bytes(data[:cut])
        if cut in boundaries[2:]:                 # after the name record and >= 1 layer
            names = list(expected)[:boundaries.index(cut) - 1]
            assert_layers(caffe.read_caffemodel(path), {n: expected[n] for n in names})
            prefixes += 1
            continue
        with pytest.raises(caffe.CaffeFormatError) as error:
            caffe.read_caffemodel(path)
        assert str(path) in str(error.value), cut
    assert prefixes == len(layers) - 1


def test_corrupted_bytes_never_leak_a_protobuf_error(tmp_path):
    data, _ = net(mixed_fixture()[0])
    path = tmp_path / "bad.caffemodel"
    errors = 0
    for offset in range(0, len(data), 3):
        for value in (0x00, 0xFF, data[offset] ^ 0x5A):
            path.write_bytes(data[:offset] + bytes([value]) + data[offset + 1:])
            try:
                caffe.read_caffemodel(path)   # a changed float value is undetectable: fine
            except caffe.CaffeFormatError as error:
                assert str(path) in str(error)
                errors += 1
    assert errors > 50                        # most corruptions are caught


def test_foreign_and_malformed_files(tmp_path):
    cases = {
        "empty": (b"", "empty"),
        "png": (b"\x89PNG\r\n\x1a\n" + bytes(64), "not a Caffe model file"),
        "text": (b'name: "LeNet"\nlayer {\n  name: "conv1"\n}\n', "read_prototxt"),
        "no layers": (text(1, "just a name") + number(7, 1), "no Caffe layers"),
        "both lists": (record(100, layer("a", "ReLU")) + record(2, v1_layer("b", 18)),
                       "both `layer` and deprecated V1 `layers`"),
        "duplicate": (record(100, layer("a", "ReLU")) * 2, "two layers are named 'a'"),
        "count": (record(100, layer("a", "X", [blob(np.ones(5), shape=(2, 3))])),
                  r"layer 'a' blob 0 has 5 values, but its shape \(2, 3\) holds 6"),
        "legacy": (record(100, layer("a", "X", [blob(np.ones(4), legacy=(4,))])),
                   r"shape \(4, 0, 0, 0\) holds 0"),
        "utf-8": (record(100, text(1, "ok") + record(3, b"\xff\xfe")), "not UTF-8"),
        "raw int": (record(100, layer("a", "X", [shape_record((1,)) + number(10, 3)
                                                 + record(12, bytes(4))])),
                    "holds raw INT values; weights are DOUBLE, FLOAT, FLOAT16"),
        "raw bytes": (record(100, layer("a", "X", [raw_blob([1.0], 1, (1,))[:-1]])), "cut"),
        "raw size": (record(100, layer("a", "X", [shape_record((1,)) + number(10, 1)
                                                  + record(12, bytes(5))])),
                     "5 bytes of raw FLOAT data, not a whole number"),
    }
    for name, (data, message) in cases.items():
        path = write(tmp_path, f"{name}.caffemodel", data)
        with pytest.raises(caffe.CaffeFormatError, match=message) as error:
            caffe.read_caffemodel(path)
        assert str(path) in str(error.value), name


def test_missing_protobuf_is_a_clear_import_error(monkeypatch):
    from minigrad.formats import caffe_schema as schema

    schema.messages.cache_clear()
    monkeypatch.setitem(__import__("sys").modules, "google.protobuf", None)
    try:
        with pytest.raises(ImportError, match=r"minigrad\[caffe\]"):
            caffe.read_caffemodel(__file__)
    finally:
        monkeypatch.undo()
        schema.messages.cache_clear()


PROTOTXT = """\
name: "LeNetBN"   # a comment
input: "data"
layer {
  name: "conv1"  type: "Convolution"  bottom: "data"  top: "conv1"
  param { lr_mult: 1 }
  convolution_param { num_output: 4 kernel_size: 5 pad: 2 stride: 1 bias_term: false
                      weight_filler { type: "xavier" } engine: CUDNN }
}
layer { name: "bn1" type: "BatchNorm" bottom: "conv1" top: "conv1"
        batch_norm_param { eps: 1e-3 moving_average_fraction: 0.9 engine: CUDNN } }
layer { name: "scale1" type: "Scale" bottom: "conv1" top: "conv1"
        scale_param { bias_term: true filler { value: 1 } } }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
        pooling_param { pool: AVE kernel_size: 2 stride: 2 } }
layer { name: "ip1" type: "InnerProduct" bottom: "pool1" top: "ip1"
        inner_product_param { num_output: 10 transpose: true } }
"""


def test_read_prototxt(tmp_path):
    path = tmp_path / "net.prototxt"
    path.write_text(PROTOTXT)
    layers = caffe.read_prototxt(path)
    assert [(entry.name, entry.type) for entry in layers] == [
        ("conv1", "Convolution"), ("bn1", "BatchNorm"), ("scale1", "Scale"), ("pool1", "Pooling"),
        ("ip1", "InnerProduct")]
    assert layers[0].bottom == ["data"] and layers[0].top == ["conv1"]
    conv = layers[0].params["convolution_param"]
    assert (conv["num_output"], conv["kernel_size"], conv["pad"], conv["stride"]) == \
        (4, [5], [2], [1])
    assert conv["bias_term"] is False and conv["group"] == 1      # group: Caffe's default
    assert layers[1].params == {"batch_norm_param": {
        "use_global_stats": False, "moving_average_fraction": 0.9, "eps": 1e-3}}
    assert layers[2].params["scale_param"] == {"axis": 1, "num_axes": 1, "bias_term": True}
    pool = layers[3].params["pooling_param"]
    assert (pool["pool"], pool["kernel_size"], pool["stride"], pool["pad"]) == ("AVE", 2, 2, 0)
    assert layers[4].params["inner_product_param"]["transpose"] is True
    assert list(layers[3].params) == ["pooling_param"]

    v1 = tmp_path / "v1.prototxt"
    v1.write_text('layers { name: "c" type: CONVOLUTION convolution_param { kernel_size: 3 } }\n'
                  'layers { name: "r" type: RELU bottom: "c" top: "c" }\n')
    assert [(e.name, e.type, e.params.get("convolution_param", {}).get("kernel_size"))
            for e in caffe.read_prototxt(v1)] == [("c", "Convolution", [3]), ("r", "ReLU", None)]

    bad = tmp_path / "bad.prototxt"
    bad.write_text('layer {\n  name: "c"\n  convolution_param { kernel_size: five }\n}\n')
    with pytest.raises(caffe.CaffeFormatError, match=r"bad\.prototxt:3:\d+ .*kernel_size"):
        caffe.read_prototxt(bad)
    binary = tmp_path / "binary.prototxt"
    binary.write_bytes(b"\x89PNG\xff\xfe")
    with pytest.raises(caffe.CaffeFormatError, match="binary.prototxt: not a text prototxt"):
        caffe.read_prototxt(binary)


# ------------------------------------------------------------------ whole models
def lenet_bn(library, bias=False):
    """LeNet-5 with batch norm, 28x28 input (same constructor names in minigrad and torch)."""
    return library.Sequential(
        library.Conv2d(1, 4, 5, padding=2, bias=bias), library.BatchNorm2d(4), library.ReLU(),
        library.MaxPool2d(2),
        library.Conv2d(4, 6, 5, bias=bias), library.BatchNorm2d(6), library.ReLU(),
        library.MaxPool2d(2), library.Flatten(),
        library.Linear(150, 16, bias=bias), library.BatchNorm1d(16), library.ReLU(),
        library.Linear(16, 10))


def lenet_numbers():
    """Raw Caffe numbers of a LeNet-BN: weights and per-BN (mean, var, gamma, beta)."""
    weights = {"conv1": F32(4, 1, 5, 5) * 0.3, "conv2": F32(6, 4, 5, 5) * 0.2,
               "ip1": F32(16, 150) * 0.1, "ip2": F32(10, 16) * 0.3, "ip2_bias": F32(10)}
    norms = {name: (F32(c) * 0.5, R.uniform(0.3, 3, c).astype(np.float32),
                    R.uniform(0.5, 2, c).astype(np.float32), F32(c))
             for name, c in (("bn1", 4), ("bn2", 6), ("bn3", 16))}
    return weights, norms


def lenet_caffemodel(weights, norms, layout, s=2.5):
    """A LeNet-BN .caffemodel, hand-encoded: "bvlc" (BatchNorm [mean*s, var*s, s] + Scale) or
    "nvcaffe" (5 blobs; bn1 in the cuDNN engine's (1, C, 1, 1) shapes, the others (C,)), or
    "nvcaffe16": that, every blob in NVIDIA's raw float16."""
    def put(values, shape=None, legacy=None):
        if layout == "nvcaffe16":
            return raw_blob(values, 2, shape or legacy)
        return blob(values, shape, legacy)

    def norm(name, bottom):
        mean, var, gamma, beta = norms[name]
        if layout == "bvlc":
            return [layer(name, "BatchNorm", [put(mean * s, mean.shape), put(var * s, var.shape),
                                              put([s], (1,))], [bottom], [bottom]),
                    layer(name + "_scale", "Scale", [put(gamma, gamma.shape),
                                                     put(beta, beta.shape)], [bottom], [bottom])]
        shape = (1, mean.size, 1, 1) if name == "bn1" else mean.shape
        return [layer(name, "BatchNorm", [put(v, shape) for v in (mean, var)]
                      + [put([1.0], (1,))] + [put(v, shape) for v in (gamma, beta)],
                      [bottom], [bottom])]

    w = weights
    layers = ([layer("data", "Input", top=["data"]),
               layer("conv1", "Convolution", [put(w["conv1"], w["conv1"].shape)], ["data"],
                     ["conv1"])] + norm("bn1", "conv1")
              + [layer("relu1", "ReLU", bottom=["conv1"], top=["conv1"]),
                 layer("pool1", "Pooling", bottom=["conv1"], top=["pool1"]),
                 layer("conv2", "Convolution", [put(w["conv2"], w["conv2"].shape)], ["pool1"],
                       ["conv2"])] + norm("bn2", "conv2")
              + [layer("pool2", "Pooling", bottom=["conv2"], top=["pool2"]),
                 layer("ip1", "InnerProduct", [put(w["ip1"], legacy=(1, 1, 16, 150))],
                       ["pool2"], ["ip1"])] + norm("bn3", "ip1")
              + [layer("ip2", "InnerProduct", [put(w["ip2"], w["ip2"].shape),
                                               put(w["ip2_bias"], legacy=(1, 1, 1, 10))],
                       ["ip1"], ["ip2"]),
                 layer("prob", "Softmax", bottom=["ip2"], top=["prob"])])
    return net(layers)[0]


def torch_twin(weights, norms):
    """The same network in PyTorch, filled straight from the raw numbers."""
    model = lenet_bn(torch.nn)
    with torch.no_grad():
        for index, key in ((0, "conv1"), (4, "conv2"), (9, "ip1"), (12, "ip2")):
            model[index].weight.copy_(torch.tensor(weights[key]))
        model[12].bias.copy_(torch.tensor(weights["ip2_bias"]))
        for index, key in ((1, "bn1"), (5, "bn2"), (10, "bn3")):
            mean, var, gamma, beta = (torch.tensor(v) for v in norms[key])
            bn = model[index]
            bn.running_mean.copy_(mean), bn.running_var.copy_(var)
            bn.weight.copy_(gamma), bn.bias.copy_(beta)
    return model.eval()


@pytest.mark.parametrize("layout", ["bvlc", "nvcaffe", "nvcaffe16"])
def test_lenet_bn_caffemodel_gives_torchs_logits(tmp_path, layout):
    weights, norms = lenet_numbers()
    if layout == "nvcaffe16":            # the twin gets the numbers the file holds
        to16 = lambda a: a.astype(np.float16).astype(np.float32)         # noqa: E731
        weights = {k: to16(v) for k, v in weights.items()}
        norms = {k: tuple(map(to16, v)) for k, v in norms.items()}
    path = write(tmp_path, f"lenet_{layout}.caffemodel", lenet_caffemodel(weights, norms, layout))
    model = lenet_bn(nn)
    loaded = caffe.load_caffe(model, path)
    assert loaded == {"0": "conv1", "1": "bn1", "4": "conv2", "5": "bn2", "9": "ip1",
                      "10": "bn3", "12": "ip2"}
    x = R.standard_normal((3, 1, 28, 28)).astype(np.float32)
    with mg.no_grad():
        ours = model.eval()(mg.tensor(x)).numpy()
    theirs = torch_twin(weights, norms)(torch.tensor(x)).detach().numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)
    assert np.abs(theirs).max() > 0.5                       # the logits are not all near zero


def test_v1_caffemodel_loads_a_plain_lenet(tmp_path):
    """A V1 file (no BatchNorm in V1) with legacy 4-D blob shapes, into LeNet without BN."""
    w = {"c1": F32(4, 1, 5, 5), "b1": F32(4), "c2": F32(6, 4, 5, 5) * 0.2, "b2": F32(6),
         "f1": F32(10, 150) * 0.1, "b3": F32(10)}
    legacy = lambda a: blob(a, legacy=(1,) * (4 - a.ndim) + a.shape)        # noqa: E731
    data, _ = net([v1_layer("conv1", 4, [legacy(w["c1"]), legacy(w["b1"])]),
                   v1_layer("relu1", 18), v1_layer("pool1", 17),
                   v1_layer("conv2", 4, [legacy(w["c2"]), legacy(w["b2"])]),
                   v1_layer("pool2", 17), v1_layer("ip1", 14, [legacy(w["f1"]), legacy(w["b3"])])],
                  v1=True)
    path = write(tmp_path, "v1.caffemodel", data)

    def plain(library):
        return library.Sequential(library.Conv2d(1, 4, 5, padding=2), library.ReLU(),
                                  library.MaxPool2d(2), library.Conv2d(4, 6, 5),
                                  library.MaxPool2d(2), library.Flatten(), library.Linear(150, 10))

    model, twin = plain(nn), plain(torch.nn)
    caffe.load_caffe(model, path)
    with torch.no_grad():
        for index, (kw, kb) in ((0, ("c1", "b1")), (3, ("c2", "b2")), (6, ("f1", "b3"))):
            twin[index].weight.copy_(torch.tensor(w[kw]))
            twin[index].bias.copy_(torch.tensor(w[kb]))
    x = R.standard_normal((2, 1, 28, 28)).astype(np.float32)
    np.testing.assert_allclose(model(mg.tensor(x)).detach().numpy(),
                               twin(torch.tensor(x)).detach().numpy(),
                               rtol=1e-4, atol=1e-4)


def randomized(model, seed):
    r = np.random.default_rng(seed)
    for _, module in model.named_modules():
        if isinstance(module, nn.BatchNorm2d | nn.BatchNorm1d):
            module.running_mean.array[...] = r.standard_normal(module.num_features)
            module.running_var.array[...] = r.uniform(0.2, 3, module.num_features)
            module.num_batches_tracked.array[...] = 7
    for param in model.parameters():
        param.array[...] = r.standard_normal(param.shape)
    return model


@pytest.mark.parametrize("layout", ["bvlc", "nvcaffe"])
def test_save_caffe_loads_back_bit_identically(tmp_path, layout):
    source = randomized(lenet_bn(nn, bias=True), 1)
    path = tmp_path / f"saved_{layout}.caffemodel"
    caffe.save_caffe(source, path, layout=layout)
    layers = caffe.read_caffemodel(path)
    assert [entry.type for entry in layers.values()].count("Scale") == (3 if layout == "bvlc"
                                                                        else 0)
    assert [len(layers[n].blobs) for n in ("1", "5", "10")] == ([3] * 3 if layout == "bvlc"
                                                                 else [5] * 3)
    target = randomized(lenet_bn(nn, bias=True), 2)
    caffe.load_caffe(target, path)
    before, after = snapshot(source), snapshot(target)
    for key, value in before.items():
        if key.endswith("num_batches_tracked"):
            assert after[key] == 0                        # Caffe keeps no batch counter
        else:
            assert after[key].tobytes() == value.tobytes(), key
    x = mg.randn(2, 1, 28, 28)
    with mg.no_grad():
        np.testing.assert_array_equal(source.eval()(x).numpy(), target.eval()(x).numpy())
    with pytest.raises(ValueError, match="layout must be 'bvlc' or 'nvcaffe'"):
        caffe.save_caffe(source, path, layout="caffe2")
    with pytest.raises(ValueError, match="GroupNorm .* no Caffe counterpart"):
        caffe.save_caffe(nn.Sequential(nn.GroupNorm(2, 4)), path)


def test_loading_is_all_or_nothing_and_lists_every_problem(tmp_path):
    weights, norms = lenet_numbers()
    weights["ip2"] = F32(9, 16)                                    # one class short
    mean, var, gamma, beta = norms["bn2"]
    norms["bn2"] = (mean, var[:5], gamma, beta)                  # a variance with 5 of 6 values
    path = write(tmp_path, "broken.caffemodel", lenet_caffemodel(weights, norms, "bvlc"))
    model = randomized(lenet_bn(nn), 3)
    before = snapshot(model)
    with pytest.raises(StateDictError) as error:
        caffe.load_caffe(model, path)
    message = str(error.value)
    assert "broken.caffemodel" in message and "nothing was changed" in message
    assert "InnerProduct 'ip2': blob weight has shape (9, 16), but Linear '12' has weight of " \
           "shape (10, 16)" in message
    assert "BatchNorm 'bn2' + Scale 'bn2_scale': blob 1 (BVLC variance) has 5 values, but the " \
           "layer has 6 channels" in message
    for key, value in snapshot(model).items():
        assert value.tobytes() == before[key].tobytes(), key          # nothing changed


def test_mismatched_models_and_mappings(tmp_path):
    weights, norms = lenet_numbers()
    path = write(tmp_path, "lenet.caffemodel", lenet_caffemodel(weights, norms, "nvcaffe"))
    with pytest.raises(StateDictError, match=r"the model has 6 modules to fill .* but the Caffe "
                                             r"file has 7 weighted layers .*pass mapping"):
        caffe.load_caffe(lenet_bn(nn)[:-1], path)
    modules = list(lenet_bn(nn))
    modules[1], modules[4] = modules[4], modules[1]
    with pytest.raises(StateDictError, match="Conv2d '1' cannot take BatchNorm 'bn1'"):
        caffe.load_caffe(nn.Sequential(*modules), path)
    modules = list(lenet_bn(nn))
    modules[1] = nn.BatchNorm2d(4, affine=False)
    with pytest.raises(StateDictError, match="BatchNorm 'bn1': a weight in the Caffe blobs, but "
                                             "BatchNorm2d '1' has none"):
        caffe.load_caffe(nn.Sequential(*modules), path)
    with pytest.raises(StateDictError, match="Conv2d '0' cannot take"):
        caffe.load_caffe(lenet_bn(nn), path, mapping={"0": "ip1"})
    with pytest.raises(StateDictError, match=r"no module 'nope'.*\n.*no weighted Caffe layer is "
                                             r"named 'relu1'"):
        caffe.load_caffe(lenet_bn(nn), path, mapping={"nope": "conv1", "0": "relu1"})
    with pytest.raises(StateDictError, match=r"Convolution 'conv1' has 1 blobs, but Conv2d '0' "
                                             r"\(bias=True\) takes 2"):
        caffe.load_caffe(lenet_bn(nn, bias=True), path, mapping={"0": "conv1"})

    # a mapping fills only what it names; the rest of the model stays as it was
    model = randomized(lenet_bn(nn), 4)
    before = snapshot(model)
    assert caffe.load_caffe(model, path, mapping={"4": "conv2", "5": "bn2"}) == {
        "4": "conv2", "5": "bn2"}
    after = snapshot(model)
    np.testing.assert_array_equal(after["4.weight"], weights["conv2"])
    np.testing.assert_array_equal(after["5.running_var"], norms["bn2"][1])
    assert after["0.weight"].tobytes() == before["0.weight"].tobytes()


def test_prototxt_drives_the_load_and_its_settings_are_checked(tmp_path):
    """With a prototxt its layer list is the network (blobs by name), as in Caffe; settings that
    change the numbers must match; InnerProduct transpose: true is undone."""
    w, wt = F32(4, 1, 5, 5), F32(8, 3)                        # wt stored (I, O): transposed
    mean, var, gamma, beta = F32(4), R.uniform(0.5, 2, 4).astype(np.float32), F32(4), F32(4)
    data, _ = net([layer("ip1", "InnerProduct", [blob(wt, wt.shape)]),    # order differs
                   layer("extra", "Convolution", [blob(F32(2, 2, 1, 1), (2, 2, 1, 1))]),
                   layer("scale1", "Scale", [blob(gamma, (4,)), blob(beta, (4,))]),
                   layer("bn1", "BatchNorm", [blob(mean, (4,)), blob(var, (4,)),
                                              blob([1.0], (1,))]),
                   layer("conv1", "Convolution", [blob(w, w.shape)])])
    path = write(tmp_path, "weights.caffemodel", data)
    prototxt = tmp_path / "net.prototxt"
    prototxt.write_text(PROTOTXT.replace("num_output: 10", "num_output: 3"))

    def model(stride=1, eps=1e-3):
        return nn.Sequential(nn.Conv2d(1, 4, 5, stride=stride, padding=2, bias=False),
                             nn.BatchNorm2d(4, eps=eps), nn.AvgPool2d(2), nn.Flatten(),
                             nn.Linear(8, 3, bias=False))

    good = model()
    assert caffe.load_caffe(good, path, prototxt) == {"0": "conv1", "1": "bn1", "4": "ip1"}
    np.testing.assert_array_equal(good[4].weight.detach().numpy(), wt.T)
    np.testing.assert_array_equal(good[1].weight.detach().numpy(), gamma)
    np.testing.assert_array_equal(good[0].weight.detach().numpy(), w)
    with pytest.raises(StateDictError, match=r"stride is \(1, 1\) in the prototxt, but \(2, 2\) "
                                             r"in Conv2d '0'(.|\n)*eps is 0.001 in the prototxt, "
                                             "but 1e-05"):
        caffe.load_caffe(model(stride=2, eps=1e-5), path, prototxt)
    prototxt.write_text(PROTOTXT.replace('name: "ip1"', 'name: "ip9"'))
    with pytest.raises(StateDictError, match="InnerProduct 'ip9' has 0 blobs"):
        caffe.load_caffe(model(), path, prototxt)


def test_nvcaffe_three_blob_batch_norm_and_a_scale_too_many(tmp_path):
    """NVIDIA's BatchNorm without scale_bias: [mean * c, var * c, c], shapes (1, C, 1, 1)."""
    mean, var = F32(3), R.uniform(0.5, 2, 3).astype(np.float32)
    c = 4.0
    data, _ = net([layer("bn", "BatchNorm", [blob(mean * c, (1, 3, 1, 1)),
                                             blob(var * c, (1, 3, 1, 1)), blob([c], (1,))])])
    layers = caffe.read_caffemodel(write(tmp_path, "bn3.caffemodel", data))
    model = nn.Sequential(nn.BatchNorm2d(3, affine=False))
    assert caffe.load_caffe(model, layers) == {"0": "bn"}       # a read mapping works too
    twin = torch.nn.BatchNorm2d(3, affine=False).eval()
    twin.running_mean.copy_(torch.tensor(mean)), twin.running_var.copy_(torch.tensor(var))
    x = F32(2, 3, 4, 4)
    np.testing.assert_allclose(model.eval()(mg.tensor(x)).numpy(),
                               twin(torch.tensor(x)).numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(StateDictError, match=r"Caffe layers into .*\n.*BatchNorm 'bn': no weight "
                                             "in the Caffe blobs, but BatchNorm2d '0' has one"):
        caffe.load_caffe(nn.Sequential(nn.BatchNorm2d(3)), layers)

    five = [blob(v, np.shape(v)) for v in (mean, var, [1.0], F32(3), F32(3))]
    data, _ = net([layer("bn", "BatchNorm", five, ["x"], ["x"]),
                   layer("sc", "Scale", [blob(F32(3), (3,))], ["x"], ["x"])])
    with pytest.raises(StateDictError, match="Scale layer 'sc' after it would apply twice"):
        caffe.load_caffe(nn.Sequential(nn.BatchNorm2d(3)),
                         write(tmp_path, "bn5.caffemodel", data))


def test_a_model_that_is_one_layer_round_trips(tmp_path):
    """The model itself (module name "") as the only Caffe layer."""
    for make in (lambda: nn.Linear(4, 3), lambda: nn.BatchNorm1d(3)):
        source, target = randomized(make(), 5), randomized(make(), 6)
        caffe.save_caffe(source, tmp_path / "one.caffemodel", layout="nvcaffe")
        assert caffe.load_caffe(target, tmp_path / "one.caffemodel") == {"": ""}
        for key, value in snapshot(source).items():
            if not key.endswith("num_batches_tracked"):
                assert snapshot(target)[key].tobytes() == value.tobytes(), key
