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

bfloat16 and float8 tensors (BF16, F8_E4M3, F8_E5M2, F8_E8M0) are ml_dtypes' dtypes; a code the
installed ml_dtypes lacks (F8_E8M0 before ml_dtypes 0.5) is an "unsupported dtype" error.
"""
import collections
import functools
import hashlib
import json
import os
import sys

import ml_dtypes
import numpy

from . import Budget, CheckpointError, check_shape, fail, unique_pairs

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
_CODES = {code: code for code in (*_NUMPY_CODES, *_ML_DTYPES_CODES)}   # one str per code


@functools.cache
def _dtypes():
    """safetensors dtype code -> NumPy dtype, for the codes this installation can hold."""
    table = {code: numpy.dtype(name) for code, name in _NUMPY_CODES.items()}
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


def _header_digest(tensors, metadata):
    """SHA-256 of what the header digest covers: the canonical JSON (sorted keys, no spaces) of
    {"metadata": every other metadata entry, "tensors": {name: entry}}, from `tensors` = {name:
    (code, shape, begin, end)}, hashed entry by entry (no second copy of a large header)."""
    rest = {key: value for key, value in metadata.items() if key != HEADER_DIGEST}
    digest = hashlib.sha256(b'{"metadata":' + _compact(rest, sort_keys=True) + b',"tensors":{')
    for i, name in enumerate(sorted(tensors)):
        code, shape, begin, end = tensors[name]
        digest.update(f'{"," if i else ""}{json.dumps(name)}:{{"data_offsets":[{begin},{end}],'
                      f'"dtype":{json.dumps(code)},"shape":[{",".join(map(str, shape))}]}}'
                      .encode())
    digest.update(b"}}")
    return digest.hexdigest()


def _compact(value, **options):
    return json.dumps(value, separators=(",", ":"), allow_nan=False, **options).encode()


def write(file, arrays, structure, flat):
    """The header goes first but holds every tensor's digest: it is written with placeholder
    digests of the same length, then each array is read (numpy.asarray: a tensor is copied only
    now, one at a time), hashed and written, and the header written again over the first."""
    tensors, offset = {}, 0
    for name, array in arrays.items():
        tensors[name] = (_code(array.dtype), array.shape, offset, offset + array.nbytes)
        offset += array.nbytes
    digests = dict.fromkeys(arrays, "0" * 64)   # SHA-256 in hex: 64 digits
    header = _header(tensors, digests, structure, flat)
    file.write(len(header).to_bytes(8, "little"))
    file.write(header)
    for name, array in arrays.items():
        data = numpy.asarray(array, dtype=array.dtype.newbyteorder("<"), order="C")
        digests[name] = _sha256(data)
        file.write(data.reshape(-1).view(numpy.uint8))
        del data   # before the next tensor's copy
    final = _header(tensors, digests, structure, flat)
    assert len(final) == len(header), "the digests changed the header's length"
    file.seek(8)
    file.write(final)


def _header(tensors, digests, structure, flat):
    """The header's JSON bytes, padded to a multiple of 8 (the tensors start 8-byte aligned, as
    the spec asks)."""
    metadata = {TENSOR_DIGESTS: json.dumps(digests)}
    if not flat:
        metadata[STRUCTURE] = json.dumps(structure, allow_nan=False)
    metadata[HEADER_DIGEST] = _header_digest(tensors, metadata)
    header = _compact({METADATA: metadata, **{
        name: {"dtype": code, "shape": list(shape), "data_offsets": [begin, end]}
        for name, (code, shape, begin, end) in tensors.items()}})
    return header + b" " * (-len(header) % 8)


def read(path, max_bytes):
    """(arrays, structure): {name: array} in file order, and the JSON text of the nested state's
    structure (None for a flat dict); CheckpointError when the arrays would take more than
    `max_bytes` bytes. Memory: the header is parsed once into one dict, whose entries become the
    checked layout and then the arrays in place."""
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
        if size - 8 - length > max_bytes:
            raise fail(path, EXTENSION, f"its tensors take {size - 8 - length} bytes, more than "
                                        f"max_bytes={max_bytes}")
        budget = Budget(max_bytes, lambda cause: fail(path, EXTENSION, cause))
        budget.charge(size - 8 - length, "tensors")
        header = _parse_header(path, file, length, budget)
        metadata = _metadata(path, header.pop(METADATA, {}))
        _layout(path, header, size - 8 - length)
        digests = _digests(path, header, metadata)
        for name, (code, shape, begin, end) in header.items():
            array = numpy.empty(shape, _dtypes()[code])   # one array object: no views
            if end > begin:
                file.seek(8 + length + begin)
                if file.readinto(memoryview(array.reshape(-1).view(numpy.uint8))) != end - begin:
                    raise fail(path, EXTENSION, f"tensor {name!r} is cut short (the file shrank "
                                                "while being read)")
            if digests is not None and _sha256(array) != digests[name]:
                raise fail(path, EXTENSION, f"tensor {name!r} does not match its SHA-256 digest: "
                                            "its bytes changed after it was saved")
            header[name] = array
    return header, metadata.get(STRUCTURE)


def _json(path, text, what, budget=None):
    try:
        return json.loads(text, object_pairs_hook=_header_object(path, budget))
    except CheckpointError:
        raise
    except (ValueError, RecursionError) as error:   # JSONDecodeError is a ValueError
        raise fail(path, EXTENSION, f"{what} is not valid JSON ({str(error):.200})") from None


_Entry = collections.namedtuple("_Entry", ["dtype", "shape", "data_offsets"])
_ENTRY_KEYS = frozenset(_Entry._fields)


# Bytes charged for what the header's JSON builds: each (key, value) pair the parser holds (a
# tuple and its list slot), and for a tensor's entry its lists and what load makes of it (the
# NumPy array, the Tensor, their places in the result): a million zero-size tensors took 10.3x
# their file, past the budget of 8x + 64 MiB.
_PAIR, _ENTRY_LOADED = 72, 500


def _header_object(path, budget=None):
    """The object_pairs_hook of the header: a tensor's entry becomes an _Entry (a small tuple,
    not a dict), any other object a dict; a key twice in one object is refused. With a `budget`
    each object is charged against it as it is built."""
    unique = unique_pairs(path, EXTENSION)

    def hook(pairs):
        if len(pairs) == 3 and {key for key, _ in pairs} == _ENTRY_KEYS:
            built = _Entry(**dict(pairs))
            cost = _ENTRY_LOADED
        else:
            built = unique(pairs)
            cost = sys.getsizeof(built)
        if budget is not None:
            budget.charge(cost + _PAIR * len(pairs), "header's entries")
        return built
    return hook


def _parse_header(path, file, length, budget):
    try:
        text = file.read(length).decode("utf-8")    # (the bytes are freed at once)
    except UnicodeDecodeError as error:
        raise fail(path, EXTENSION, f"garbage header: not UTF-8 text ({error})") from None
    header = _json(path, text, "the header", budget)
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
    """Check every entry of `header` against the buffer's size and replace it, in place, by
    (dtype code, shape, begin, end)."""
    for name, entry in header.items():
        if not isinstance(entry, _Entry):
            raise fail(path, EXTENSION, f"tensor {name!r:.100}: its entry must have exactly "
                                        f"dtype, shape and data_offsets, found {entry!r:.200}")
        code, shape, offsets = entry
        if not isinstance(code, str):
            raise fail(path, EXTENSION, f"tensor {name!r}: dtype {code!r:.40} is not a string")
        if code not in _dtypes():
            known = code in _ML_DTYPES_CODES or code in _PACKED_CODES
            hint = (f" (ml_dtypes {ml_dtypes.__version__} has no such dtype; a newer one does)"
                    if code in _ML_DTYPES_CODES else "")
            raise fail(path, EXTENSION, f"tensor {name!r}: {'unsupported' if known else 'unknown'}"
                                        f" dtype {code!r:.40}{hint}")
        if not (isinstance(shape, list) and all(_natural(d) for d in shape)):
            raise fail(path, EXTENSION, f"tensor {name!r}: shape {shape!r:.100} is not a list of "
                                        "non-negative integers")
        check_shape(path, EXTENSION, name, shape)
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_natural, offsets))
                and offsets[0] <= offsets[1] <= buffer_size):
            raise fail(path, EXTENSION, f"tensor {name!r}: data_offsets {offsets!r:.100} do not "
                                        f"lie within the {buffer_size}-byte data buffer")
        nbytes = _dtypes()[code].itemsize
        for dim in shape:
            nbytes *= dim
        if nbytes != offsets[1] - offsets[0]:
            raise fail(path, EXTENSION, f"tensor {name!r}: shape {shape} of {code} needs {nbytes}"
                                        f" bytes, its offsets give {offsets[1] - offsets[0]}")
        header[name] = (_CODES[code], tuple(shape), offsets[0], offsets[1])
    end, span = 0, buffer_size + 1
    for name in sorted(header, key=lambda name: header[name][2] * span + header[name][3]):
        _, _, begin, stop = header[name]
        if begin != end:
            raise fail(path, EXTENSION, f"tensor {name!r} starts at byte {begin} of the data, "
                                        f"expected {end}: tensors overlap or leave a hole")
        end = stop
    if end != buffer_size:
        raise fail(path, EXTENSION, f"the tensors cover {end} bytes of data but the file holds "
                                    f"{buffer_size}: trailing bytes or a damaged header")


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
    if _header_digest(header, metadata) != metadata[HEADER_DIGEST]:
        raise fail(path, EXTENSION, "the header does not match its SHA-256 digest: names, "
                                    "dtypes, shapes, offsets or metadata changed after saving")
    digests = _json(path, metadata[TENSOR_DIGESTS], TENSOR_DIGESTS)
    if not (isinstance(digests, dict) and len(digests) == len(header)
            and all(name in digests for name in header)):
        raise fail(path, EXTENSION, f"{TENSOR_DIGESTS} does not list exactly the tensors in the "
                                    "header")
    return digests
