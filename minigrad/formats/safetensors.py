"""The safetensors format, read and written here (no dependency): an 8-byte little-endian header
length N, N bytes of JSON, then the tensors' raw little-endian bytes, back to back.

    {"__metadata__": {str: str}, "<name>": {"dtype": "F32", "shape": [3, 4],
                                            "data_offsets": [begin, end]}, ...}

Offsets count from the end of the header; the tensors must tile the byte buffer exactly (no
holes, no overlaps, nothing past the end). minigrad adds three metadata entries, which other
tools ignore:

    minigrad.tensor_sha256   JSON {name: SHA-256 of the tensor's bytes}
    minigrad.structure       JSON description of a nested state (absent for a flat dict)
    minigrad.header_sha256   SHA-256 of everything else in the header, in canonical JSON

so a flipped byte anywhere in the file is caught: in a tensor by its digest, in the header by
the header digest (or by the JSON and layout checks). Files written by other tools carry no
digests: they load with the digest check skipped.

bfloat16 and float8 tensors (BF16, F8_E4M3, F8_E5M2, F8_E8M0) need the `ml_dtypes` package
(`pip install minigrad[bf16]`); without it they are an "unsupported dtype" error.
"""
import functools
import hashlib
import json
import os

import numpy

from . import fail

EXTENSION = ".safetensors"
TENSOR_DIGESTS = "minigrad.tensor_sha256"
STRUCTURE = "minigrad.structure"
HEADER_DIGEST = "minigrad.header_sha256"
METADATA = "__metadata__"

_NUMPY_CODES = {"BOOL": "bool", "U8": "uint8", "I8": "int8", "U16": "uint16", "I16": "int16",
                "U32": "uint32", "I32": "int32", "U64": "uint64", "I64": "int64",
                "F16": "float16", "F32": "float32", "F64": "float64"}
_ML_DTYPES_CODES = {"BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
                    "F8_E8M0": "float8_e8m0fnu"}
_PACKED_CODES = ("F4", "F6_E2M3", "F6_E3M2")   # sub-byte formats: no NumPy dtype holds them


@functools.cache
def _dtypes():
    """safetensors dtype code -> NumPy dtype, for the codes this installation can hold."""
    table = {code: numpy.dtype(name) for code, name in _NUMPY_CODES.items()}
    try:
        import ml_dtypes
    except ImportError:
        return table
    table.update({code: numpy.dtype(getattr(ml_dtypes, name))
                  for code, name in _ML_DTYPES_CODES.items() if hasattr(ml_dtypes, name)})
    return table


def _code(dtype):
    """The safetensors code of `dtype` (any byte order), or None."""
    little = dtype.newbyteorder("<")
    return next((code for code, known in _dtypes().items() if known == little), None)


def check(array, where):
    if _code(array.dtype) is None:
        raise TypeError(f"save: {where} has dtype {array.dtype}, which {EXTENSION} cannot hold "
                        f"(it holds {', '.join(str(d) for d in _dtypes().values())}); "
                        f"use .npz for it")


def _sha256(array):
    return hashlib.sha256(array.reshape(-1).view(numpy.uint8)).hexdigest()


def _canonical(entries, metadata):
    """The bytes the header digest covers: every tensor entry and every other metadata entry."""
    rest = {key: value for key, value in metadata.items() if key != HEADER_DIGEST}
    return json.dumps({"tensors": entries, "metadata": rest}, sort_keys=True,
                      separators=(",", ":")).encode()


def write(file, arrays, structure):
    arrays = {name: numpy.asarray(a, dtype=a.dtype.newbyteorder("<"), order="C")
              for name, a in arrays.items()}
    entries, offset = {}, 0
    for name, array in arrays.items():
        entries[name] = {"dtype": _code(array.dtype), "shape": list(array.shape),
                         "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
    metadata = {TENSOR_DIGESTS: json.dumps({name: _sha256(a) for name, a in arrays.items()})}
    if structure is not None:
        metadata[STRUCTURE] = json.dumps(structure, allow_nan=False)
    metadata[HEADER_DIGEST] = hashlib.sha256(_canonical(entries, metadata)).hexdigest()
    header = json.dumps({METADATA: metadata, **entries}, separators=(",", ":")).encode()
    header += b" " * (-len(header) % 8)   # the tensors start 8-byte aligned, as the spec asks
    file.write(len(header).to_bytes(8, "little"))
    file.write(header)
    for array in arrays.values():
        file.write(array.reshape(-1).view(numpy.uint8))


def read(path):
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        prefix = file.read(8)
        if len(prefix) < 8:
            raise fail(path, EXTENSION, f"truncated: {size} bytes, fewer than the 8-byte header "
                                        "length")
        length = int.from_bytes(prefix, "little")
        if length > size - 8:
            raise fail(path, EXTENSION, f"the header length {length} runs past the end of the "
                                        f"file ({size} bytes): truncated or not safetensors")
        header = _parse_header(path, file.read(length))
        metadata = _metadata(path, header.pop(METADATA, {}))
        layout = _layout(path, header, size - 8 - length)
        digests = _digests(path, header, metadata)
        arrays = {}
        for name, (dtype, shape, begin, end) in layout.items():
            file.seek(8 + length + begin)
            data = numpy.empty(end - begin, numpy.uint8)
            if file.readinto(memoryview(data)) != len(data):
                raise fail(path, EXTENSION, f"tensor {name!r} is cut short (the file shrank "
                                            "while being read)")
            array = data.view(dtype).reshape(shape)
            if digests is not None and _sha256(array) != digests[name]:
                raise fail(path, EXTENSION, f"tensor {name!r} does not match its SHA-256 digest: "
                                            "its bytes changed after it was saved")
            arrays[name] = array
    structure = None
    if STRUCTURE in metadata:
        structure = _json(path, metadata[STRUCTURE], STRUCTURE)
    return arrays, structure


def _json(path, text, what):
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as error:   # JSONDecodeError is a ValueError
        raise fail(path, EXTENSION, f"{what} is not valid JSON ({error})") from None


def _parse_header(path, raw):
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise fail(path, EXTENSION, f"garbage header: not UTF-8 text ({error})") from None
    header = _json(path, text, "the header")
    if not isinstance(header, dict):
        raise fail(path, EXTENSION, f"the header is a JSON {type(header).__name__}, not an "
                                    "object of tensors")
    return header


def _metadata(path, metadata):
    if not isinstance(metadata, dict) or not all(
            isinstance(v, str) for v in metadata.values()):
        raise fail(path, EXTENSION, "__metadata__ must map strings to strings")
    return metadata


def _layout(path, header, buffer_size):
    """{name: (dtype, shape, begin, end)}, every entry checked against the buffer's size."""
    layout = {}
    for name, entry in header.items():
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
            raise fail(path, EXTENSION, f"tensor {name!r}: its entry must have exactly dtype, "
                                        f"shape and data_offsets, found {entry!r:.200}")
        code, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        if not isinstance(code, str):
            raise fail(path, EXTENSION, f"tensor {name!r}: dtype {code!r:.40} is not a string")
        if code not in _dtypes():
            known = code in _ML_DTYPES_CODES or code in _PACKED_CODES
            hint = (" (install ml_dtypes to read it: pip install minigrad[bf16])"
                    if code in _ML_DTYPES_CODES else "")
            raise fail(path, EXTENSION, f"tensor {name!r}: {'unsupported' if known else 'unknown'}"
                                        f" dtype {code!r:.40}{hint}")
        if not (isinstance(shape, list) and all(_natural(d) for d in shape)):
            raise fail(path, EXTENSION, f"tensor {name!r}: shape {shape!r:.100} is not a list of "
                                        "non-negative integers")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_natural, offsets))
                and offsets[0] <= offsets[1] <= buffer_size):
            raise fail(path, EXTENSION, f"tensor {name!r}: data_offsets {offsets!r:.100} do not "
                                        f"lie within the {buffer_size}-byte data buffer")
        dtype = _dtypes()[code]
        nbytes = dtype.itemsize
        for dim in shape:
            nbytes *= dim
        if nbytes != offsets[1] - offsets[0]:
            raise fail(path, EXTENSION, f"tensor {name!r}: shape {shape} of {code} needs {nbytes}"
                                        f" bytes, its offsets give {offsets[1] - offsets[0]}")
        layout[name] = (dtype, tuple(shape), offsets[0], offsets[1])
    end = 0
    for name, (_, _, begin, stop) in sorted(layout.items(), key=lambda item: item[1][2:]):
        if begin != end:
            raise fail(path, EXTENSION, f"tensor {name!r} starts at byte {begin} of the data, "
                                        f"expected {end}: tensors overlap or leave a hole")
        end = stop
    if end != buffer_size:
        raise fail(path, EXTENSION, f"the tensors cover {end} bytes of data but the file holds "
                                    f"{buffer_size}: trailing bytes or a damaged header")
    return layout


def _natural(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _digests(path, header, metadata):
    """{name: SHA-256} to verify, after checking the header digest; None for a file without
    minigrad's digests (written by another tool)."""
    if not any(key.startswith("minigrad.") for key in metadata):
        return None
    for key in (HEADER_DIGEST, TENSOR_DIGESTS):
        if key not in metadata:
            raise fail(path, EXTENSION, f"the metadata has minigrad entries but no {key}: "
                                        "damaged header")
    if hashlib.sha256(_canonical(header, metadata)).hexdigest() != metadata[HEADER_DIGEST]:
        raise fail(path, EXTENSION, "the header does not match its SHA-256 digest: names, "
                                    "dtypes, shapes, offsets or metadata changed after saving")
    digests = _json(path, metadata[TENSOR_DIGESTS], TENSOR_DIGESTS)
    if not isinstance(digests, dict) or set(digests) != set(header):
        raise fail(path, EXTENSION, f"{TENSOR_DIGESTS} does not list exactly the tensors in the "
                                    "header")
    return digests
