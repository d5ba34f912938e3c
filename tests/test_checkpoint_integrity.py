"""Damaged and hostile checkpoint files: every one is a CheckpointError naming the file and the
cause (or, for a missing file, an OSError), never a silent wrong load or another exception."""
import io
import json
import struct
import time
import tracemalloc
import zipfile

import numpy as np
import pytest
import safetensors.numpy

import minigrad as mg

FORMATS = [".safetensors", ".npz"]


def _state(nested):
    flat = {"weight": np.arange(40, dtype=np.float32).reshape(8, 5),
            "bias": np.linspace(-1, 1, 7), "count": np.array(9, np.int64),
            "mask": np.array([True, False, True])}
    if not nested:
        return flat
    return {"model": flat, "epoch": 3, "lr": 0.05, "groups": [{"betas": (0.9, 0.99)}]}


def _equal(a, b):
    if isinstance(b, dict):
        return type(a) is dict and list(a) == list(b) and all(_equal(a[k], b[k]) for k in b)
    if isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_equal, a, b))
    if isinstance(b, np.ndarray):   # arrays load as tensors
        return isinstance(a, mg.Tensor) and a.dtype == b.dtype and np.array_equal(a.numpy(), b)
    return type(a) is type(b) and a == b


def _abuse(path, original, expected, damaged_copies):
    """Load every damaged copy; return (errors, intact loads); fail on any other outcome."""
    errors = intact = 0
    for label, data in damaged_copies:
        path.write_bytes(data)
        try:
            loaded = mg.load(path)
        except mg.CheckpointError as error:
            assert str(path) in str(error), (label, error)
            errors += 1
            continue
        except OSError:
            errors += 1
            continue
        # Loading is fine only when what came back is exactly what was saved.
        assert _equal(loaded, expected), f"silent wrong load after {label}"
        intact += 1
    return errors, intact


def _flips(data, rng, count):
    for offset in rng.choice(len(data), size=min(count, len(data)), replace=False):
        new = int(rng.integers(1, 256)) ^ data[offset]    # always a different byte
        yield f"byte {offset} set to {new:#04x}", data[:offset] + bytes([new]) + data[offset + 1:]


def _truncations(data, rng, count):
    lengths = set(rng.choice(len(data), size=min(count, len(data)), replace=False).tolist())
    lengths |= {0, 1, 7, 8, 9, len(data) - 1}
    for length in sorted(lengths):
        yield f"truncated to {length} bytes", data[:length]


@pytest.mark.parametrize("extension", FORMATS)
@pytest.mark.parametrize("nested", [False, True], ids=["flat", "nested"])
def test_byte_flips_never_load_silently(tmp_path, extension, nested):
    path = tmp_path / ("state" + extension)
    state = _state(nested)
    mg.save(state, path)
    original = path.read_bytes()
    rng = np.random.default_rng(12)
    errors, intact = _abuse(path, original, state, _flips(original, rng, 400))
    print(f"{extension} {len(original)} bytes: {errors} errors, {intact} harmless flips")
    # The digests (safetensors) and CRCs (npz) catch all but the flips of bytes whose value
    # does not matter (JSON whitespace; zip time stamps, attributes, version fields).
    assert errors > intact


@pytest.mark.parametrize("extension", FORMATS)
@pytest.mark.parametrize("nested", [False, True], ids=["flat", "nested"])
def test_truncations_never_load(tmp_path, extension, nested):
    path = tmp_path / ("state" + extension)
    mg.save(_state(nested), path)
    original = path.read_bytes()
    errors, intact = _abuse(path, original, _state(nested),
                            _truncations(original, np.random.default_rng(3), 200))
    assert intact == 0 and errors > 100


def test_a_flipped_payload_byte_names_the_tensor(tmp_path):
    path = tmp_path / "s.safetensors"
    mg.save({"first": np.zeros(4, np.float32), "second": np.ones(4, np.float32)}, path)
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x01                       # inside "second", the last tensor
    path.write_bytes(bytes(data))
    with pytest.raises(mg.CheckpointError, match="tensor 'second' does not match its SHA-256"):
        mg.load(path)


def test_a_changed_dtype_in_the_header_is_caught(tmp_path):
    """F32 -> I32 keeps every size and offset valid; only the header digest sees it."""
    path = tmp_path / "s.safetensors"
    mg.save({"x": np.ones(4, np.float32)}, path)
    path.write_bytes(path.read_bytes().replace(b'"F32"', b'"I32"'))
    with pytest.raises(mg.CheckpointError, match="header does not match its SHA-256"):
        mg.load(path)


def test_a_changed_number_in_nested_state_is_caught(tmp_path):
    for extension in FORMATS:
        path = tmp_path / ("s" + extension)
        mg.save({"w": np.ones(2), "epoch": 3}, path)
        data = path.read_bytes()
        at = data.index(b"3", data.index(b"epoch"))     # the 3 after "epoch" in the structure
        path.write_bytes(data[:at] + b"4" + data[at + 1:])
        with pytest.raises(mg.CheckpointError):   # header digest / zip CRC
            mg.load(path)


# --------------------------------------------------------------------------- crafted safetensors
def _safetensors_file(header, payload=b""):
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + payload


def test_a_64_byte_file_asking_for_terabytes_fails_at_once(tmp_path):
    path = tmp_path / "huge.safetensors"
    shape = [1 << 20, 1 << 20, 1 << 3]            # 8 Ti float32 elements = 32 TiB
    data = _safetensors_file({"x": {"dtype": "U8", "shape": shape,
                                    "data_offsets": [0, 8 << 40]}})
    path.write_bytes(data)
    tracemalloc.start()
    start = time.perf_counter()
    with pytest.raises(mg.CheckpointError, match="do not lie within"):
        mg.load(path)
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert seconds < 1.0 and peak < 1 << 20
    # The header length itself asking for 7.28 TiB, in a 64-byte file:
    path.write_bytes(struct.pack("<Q", 8 << 40) + b"{" * 56)
    with pytest.raises(mg.CheckpointError, match="header length 8796093022208 runs past"):
        mg.load(path)


@pytest.mark.parametrize("header, payload, message", [
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, bytes(12), "overlap"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, bytes(4), "do not lie"),
    ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, bytes(8), "hole"),
    ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, bytes(9), "trailing"),
    ({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, bytes(8), "needs 12 bytes"),
    ({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, bytes(8), "non-negative"),
    ({"a": {"dtype": "F32", "shape": [2.0], "data_offsets": [0, 8]}}, bytes(8), "non-negative"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}}, bytes(8), "do not lie"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0]}}, bytes(8), "do not lie"),
    ({"a": {"dtype": "Q9", "shape": [2], "data_offsets": [0, 8]}}, bytes(8), "unknown dtype"),
    ({"a": {"dtype": "F4", "shape": [2], "data_offsets": [0, 1]}}, bytes(1), "unsupported"),
    ({"a": {"dtype": ["F32"], "shape": [2], "data_offsets": [0, 8]}}, bytes(8), "dtype"),
    ({"a": {"dtype": "F32", "shape": [2]}}, bytes(8), "exactly dtype, shape and data_offsets"),
    ({"a": [1, 2, 3]}, b"", "exactly dtype"),
    ([1, 2], b"", "not an object"),
    ({"__metadata__": {"k": 1}}, b"", "strings to strings"),
    ({"__metadata__": {"minigrad.tensor_sha256": "{}"}}, b"", "no minigrad.header_sha256"),
])
def test_crafted_safetensors_headers(tmp_path, header, payload, message):
    path = tmp_path / "crafted.safetensors"
    path.write_bytes(_safetensors_file(header, payload))
    with pytest.raises(mg.CheckpointError, match=message) as info:
        mg.load(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("raw", [b"\xff\xfe not utf-8", b"{not json", b"[" * 100000, b"",
                                 b'{"a": NaN}'], ids=["binary", "syntax", "deep", "empty", "nan"])
def test_garbage_safetensors_headers(tmp_path, raw):
    path = tmp_path / "garbage.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)
    with pytest.raises(mg.CheckpointError):
        mg.load(path)


def test_a_file_from_another_tool_with_a_flipped_byte_is_still_checked_for_layout(tmp_path):
    """Without digests, payload flips cannot be seen; header damage still is."""
    path = tmp_path / "theirs.safetensors"
    safetensors.numpy.save_file({"x": np.ones(4, np.float32)}, path)
    data = path.read_bytes()
    path.write_bytes(data.replace(b'"shape":[4]', b'"shape":[5]'))
    with pytest.raises(mg.CheckpointError, match="needs 20 bytes"):
        mg.load(path)


# --------------------------------------------------------------------------- crafted .npz
def _zip(members, compression=zipfile.ZIP_STORED):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def _npy(array):
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array)
    return buffer.getvalue()


def _manifest(names, structure=None):
    return json.dumps({"format": "minigrad.npz/1", "arrays": names, "structure": structure})


@pytest.mark.parametrize("members, message", [
    ({"notes.txt": b"hello", "x.npy": _npy(np.ones(2))}, "'notes.txt' is not an array"),
    ({"__minigrad__.json": _manifest(["x", "y"]), "x.npy": _npy(np.ones(2))},
     r"missing \['y'\].*zip directory is damaged"),
    ({"__minigrad__.json": _manifest(["x"]), "x.npy": _npy(np.ones(2)),
      "z.npy": _npy(np.ones(1))}, r"unexpected \['z'\]"),
    ({"__minigrad__.json": b"{not json", "x.npy": _npy(np.ones(2))}, "damaged"),
    ({"__minigrad__.json": json.dumps({"format": "other"}), "x.npy": _npy(np.ones(2))},
     "not a minigrad.npz/1 manifest"),
    ({"__minigrad__.json": _manifest(["x"], {"dict": [["k", {"tensor": "nope"}]]}),
      "x.npy": _npy(np.ones(2))}, "structure is damaged"),
    ({"__minigrad__.json": _manifest(["x"], {"dict": []}), "x.npy": _npy(np.ones(2))},
     r"does not use the arrays \['x'\]"),
    ({"x.npy": _npy(np.ones(4))[:-8]}, "promises shape"),
    ({"x.npy": _npy(np.ones(4)).replace(b"(4,)", b"(1099511627776,)")}, "promises shape"),
    ({"x.npy": b"\x93NUMPY\x09\x00garbage"}, r"version \(9, 0\) is not supported"),
    ({"x.npy": _npy(np.ones(2)).replace(b"'descr': '<f8'", b"'descr': 'xx8'")}, "damaged"),
    ({"x.npy": b"\x93NUMPY\x01\x00\x76\x00{'descr': '<f8', 'fortran_order': False, 'shape': (("
      + b" " * 83 + b"\n"}, "damaged"),
])
def test_crafted_npz_members(tmp_path, members, message):
    path = tmp_path / "crafted.npz"
    path.write_bytes(_zip({k: v.encode() if isinstance(v, str) else v
                           for k, v in members.items()}))
    with pytest.raises(mg.CheckpointError, match=message) as info:
        mg.load(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("depth", [100, 480, 5000])
def test_deeply_nested_stored_structures(tmp_path, depth):
    """Any depth a crafted manifest holds loads or is a CheckpointError, never a RecursionError."""
    structure = '{"list": [' * depth + "]}" * depth
    manifest = '{"format": "minigrad.npz/1", "arrays": [], "structure": ' + structure + "}"
    path = tmp_path / "deep.npz"
    path.write_bytes(_zip({"__minigrad__.json": manifest.encode()}))
    try:
        state = mg.load(path)
    except mg.CheckpointError as error:
        assert "deep" in str(error) or "damaged" in str(error)
        return
    for _ in range(depth - 1):
        (state,) = state
    assert state == []


def test_zip_features_numpy_cannot_read(tmp_path):
    path = tmp_path / "bzip.npz"
    path.write_bytes(_zip({"x.npy": _npy(np.ones(100))}, zipfile.ZIP_BZIP2))
    with pytest.raises(mg.CheckpointError, match="compression method 12"):
        mg.load(path)
    data = bytearray(_zip({"x.npy": _npy(np.ones(100))}))
    for signature in (b"PK\x03\x04", b"PK\x01\x02"):     # set the "encrypted" flag bit
        at = data.index(signature) + (6 if signature == b"PK\x03\x04" else 8)
        data[at] |= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(mg.CheckpointError, match="encrypted"):
        mg.load(path)


def test_a_deflate_bomb_member_is_refused_before_decompressing(tmp_path):
    """A member that claims more bytes than deflate could expand its stored bytes to."""
    path = tmp_path / "bomb.npz"
    data = bytearray(_zip({"x.npy": _npy(np.zeros(1 << 20, np.uint8))}, zipfile.ZIP_DEFLATED))
    at = data.index(b"PK\x01\x02") + 24                 # central directory: uncompressed size
    data[at:at + 4] = struct.pack("<I", 0xFFFFFF00)
    path.write_bytes(bytes(data))
    with pytest.raises(mg.CheckpointError, match="more than the"):
        mg.load(path)


def test_a_dropped_zip_directory_entry_is_caught_by_the_manifest(tmp_path):
    """Shorten the central directory by one entry (and fix the end record to agree): zipfile
    alone reads the shorter archive without complaint."""
    path = tmp_path / "s.npz"
    mg.save({"a": np.ones(3), "b": np.zeros(3), "c": np.arange(3)}, path)
    data = bytearray(path.read_bytes())
    end = data.rindex(b"PK\x05\x06")
    entries = [i for i in range(len(data)) if data[i:i + 4] == b"PK\x01\x02"]
    last = entries[-1]
    zip64_end = data.find(b"PK\x06\x06")
    directory_end = zip64_end if zip64_end != -1 else end
    shortened = data[:last] + data[directory_end:]
    count, size = struct.unpack_from("<HI", shortened, len(shortened) - 22 + 10)
    struct.pack_into("<HHI", shortened, len(shortened) - 22 + 8, count - 1, count - 1,
                     size - (directory_end - last))
    if zip64_end != -1:
        pytest.skip("the zip64 end record would need patching too")
    path.write_bytes(bytes(shortened))
    with zipfile.ZipFile(path) as archive:            # the damage zipfile cannot see
        assert len(archive.infolist()) == 3
    with pytest.raises(mg.CheckpointError, match=r"missing \['c'\]"):
        mg.load(path)


def test_a_stored_structure_that_names_an_array_twice_loads_it_as_one_tensor(tmp_path):
    path = tmp_path / "twice.npz"
    structure = {"list": [{"tensor": "x"}, {"tensor": "x"}]}
    path.write_bytes(_zip({"__minigrad__.json": _manifest(["x"], structure).encode(),
                           "x.npy": _npy(np.ones(2))}))
    loaded = mg.load(path)
    assert len(loaded) == 2 and loaded[0] is loaded[1]
