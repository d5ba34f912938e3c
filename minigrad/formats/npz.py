"""NumPy's .npz: a zip archive with one .npy member per array, read and written with
allow_pickle=False, so NumPy's `np.load` reads minigrad's files and the other way round.

minigrad writes a manifest member first, `__minigrad__.json`:

    {"format": "minigrad.npz/1", "arrays": [names in order], "structure": null | "{...}"}

(the structure as JSON text, as in a .safetensors header; files written before hold it as a JSON
object, and load the same).

The zip CRC of every member catches flipped bytes; the manifest catches a damaged zip directory
that silently drops members (it lists what must be there). Archives written by other tools have
no manifest: they load with that check skipped. Every member's declared size is checked against
the archive before anything is allocated or decompressed, and the sizes together against
`max_bytes` (a deflated member may expand 1032-fold: a 1 MB file can hold a valid 1 GiB array).
"""
import json
import os
import struct
import tokenize
import zipfile
import zlib

import numpy
import numpy.lib.format as npy

from . import CheckpointError, check_shape, fail, unique_pairs

EXTENSION = ".npz"
MANIFEST = "__minigrad__.json"
FORMAT = "minigrad.npz/1"
_DEFLATE_MAX_RATIO = 1032   # deflate cannot expand a byte stream by more than this
_PIECE = 1 << 20
_HEADER_READERS = {(1, 0): npy.read_array_header_1_0, (2, 0): npy.read_array_header_2_0}
# What zipfile and NumPy's .npy parser raise on damaged bytes (zlib.error comes from deflate
# streams, TokenError from NumPy's filtering of old .npy headers).
_DAMAGE = (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, OSError, ValueError,
           TypeError, KeyError, IndexError, OverflowError, SyntaxError, RuntimeError,
           MemoryError, tokenize.TokenError, struct.error)


def check(array, where):
    if array.dtype.hasobject:
        raise TypeError(f"save: {where} has dtype object, which could only be stored with "
                        "pickle; store numeric arrays")
    if npy.descr_to_dtype(npy.dtype_to_descr(array.dtype)) != array.dtype:
        raise TypeError(f"save: {where} has dtype {array.dtype}, which a .npy header cannot "
                        f"name (NumPy would read raw bytes back); save it to .safetensors")


def write(file, arrays, structure, flat):
    manifest = {"format": FORMAT, "arrays": list(arrays),
                "structure": None if flat else json.dumps(structure, allow_nan=False)}
    with zipfile.ZipFile(file, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        archive.writestr(MANIFEST, json.dumps(manifest, allow_nan=False))
        for name, array in arrays.items():
            with archive.open(name + ".npy", "w", force_zip64=True) as member:
                npy.write_array(member, numpy.asarray(array), allow_pickle=False)


def read(path, max_bytes):
    """(arrays, structure): {name: array} in manifest order, and the JSON text of the nested
    state's structure (None for a flat dict). CheckpointError when the arrays would take more
    than `max_bytes` bytes, before any is read."""
    with open(path, "rb") as file:
        if file.read(2) != b"PK":  # every zip archive starts with a "PK" record
            raise fail(path, EXTENSION, "it is not a zip archive")
    size = os.path.getsize(path)
    try:
        with zipfile.ZipFile(path) as archive:
            members = _members(path, archive, size)
            _check_total(path, members, max_bytes)
            manifest = _manifest(path, archive, members)
            names = manifest["arrays"] if manifest else list(members)
            arrays = {name: _array(path, archive, members[name], name) for name in names}
    except CheckpointError:
        raise
    except _DAMAGE as error:
        raise fail(path, EXTENSION, f"damaged zip archive or .npy member ({type(error).__name__}:"
                                    f" {error})") from None
    structure = manifest["structure"] if manifest else None
    if structure is not None and not isinstance(structure, str):   # written before: an object
        structure = json.dumps(structure)
    return arrays, structure


def _check_total(path, members, max_bytes):
    total = sum(info.file_size for info in members.values())
    if total > max_bytes:
        raise fail(path, EXTENSION, f"its members expand to {total} bytes, more than "
                                    f"max_bytes={max_bytes} (a compressed file can expand "
                                    "1032-fold; pass load(..., max_bytes=) a larger limit to "
                                    "load a file you trust)")


def _members(path, archive, size):
    """{array name: ZipInfo} (the manifest under its own name), each checked before reading."""
    members = {}
    for info in archive.infolist():
        name = info.filename
        if name != MANIFEST and not name.endswith(".npy"):
            raise fail(path, EXTENSION, f"member {name!r} is not an array (.npy)")
        if info.flag_bits & 0x1:
            raise fail(path, EXTENSION, f"member {name!r} is encrypted, which NumPy cannot read")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise fail(path, EXTENSION, f"member {name!r} uses zip compression method "
                                        f"{info.compress_type}; NumPy reads only stored or "
                                        "deflated members")
        limit = info.compress_size * (1 if info.compress_type == zipfile.ZIP_STORED
                                      else _DEFLATE_MAX_RATIO) + 64
        if info.header_offset + info.compress_size > size or info.file_size > limit:
            raise fail(path, EXTENSION, f"member {name!r} claims {info.file_size} bytes "
                                        f"({info.compress_size} stored), more than the "
                                        f"{size}-byte archive can hold")
        key = name if name == MANIFEST else name[:-len(".npy")]
        if key in members:
            raise fail(path, EXTENSION, f"member {name!r} appears twice")
        members[key] = info
    return members


def _manifest(path, archive, members):
    """The manifest, its list of arrays checked against the members; None if there is none."""
    info = members.pop(MANIFEST, None)
    if info is None:
        return None
    manifest = json.loads(archive.read(info).decode("utf-8"),
                          object_pairs_hook=unique_pairs(path, EXTENSION))
    if not (isinstance(manifest, dict) and manifest.get("format") == FORMAT
            and isinstance(manifest.get("arrays"), list)
            and all(isinstance(name, str) for name in manifest["arrays"])):
        raise fail(path, EXTENSION, f"the manifest {MANIFEST} is not a {FORMAT} manifest")
    missing = [name for name in manifest["arrays"] if name not in members]
    extra = [name for name in members if name not in manifest["arrays"]]
    if missing or extra or len(set(manifest["arrays"])) != len(manifest["arrays"]):
        raise fail(path, EXTENSION, f"the members do not match the manifest (missing "
                                    f"{missing[:5]}, unexpected {extra[:5]}): the zip directory "
                                    "is damaged")
    return manifest


def _array(path, archive, info, name):
    """The array in the .npy member `info`, its header checked against the member's size."""
    with archive.open(info) as member:
        version = npy.read_magic(member)
        if version not in _HEADER_READERS:
            raise fail(path, EXTENSION, f"array {name!r}: .npy format version {version} is not "
                                        "supported")
        shape, fortran_order, dtype = _HEADER_READERS[version](member)
        if dtype.hasobject:
            raise fail(path, EXTENSION, f"array {name!r} holds Python objects, which can only "
                                        "be read with pickle (refused)")
        check_shape(path, EXTENSION, name, shape)
        nbytes = dtype.itemsize
        for dim in shape:
            nbytes *= dim
        if member.tell() + nbytes != info.file_size:
            raise fail(path, EXTENSION, f"array {name!r}: its header promises shape {shape} of "
                                        f"{dtype} ({nbytes} bytes) but the member holds "
                                        f"{info.file_size - member.tell()} bytes of data")
        array = numpy.empty(shape, dtype, order="F" if fortran_order else "C")
        view, filled = memoryview(array.ravel(order="A").view(numpy.uint8)), 0
        while filled < nbytes:      # in pieces: zipfile copies each read once more
            piece = member.read(min(_PIECE, nbytes - filled))
            if not piece:
                raise fail(path, EXTENSION, f"array {name!r} is cut short")
            view[filled:filled + len(piece)] = piece
            filled += len(piece)
        if member.read(1):          # (reading to the end is what makes zipfile check the CRC)
            raise fail(path, EXTENSION, f"array {name!r} has bytes past its data")
    return array
