"""Reader for the IDX format (the file format of MNIST), gzipped or not.

An IDX file is a 4-byte magic number, one big-endian uint32 per dimension, then the values in
C order, big-endian. The magic is two zero bytes, a type code and the number of dimensions:
0x00000803 is unsigned bytes in 3 dimensions (MNIST images, N x 28 x 28), 0x00000801 unsigned
bytes in 1 dimension (MNIST labels). Every check compares the file against what its own header
promises, so a truncated or padded file is an error, never a silently short array.
"""
import gzip
import pathlib
import zlib

import numpy as np

GZIP_MAGIC = b"\x1f\x8b"
IMAGES_MAGIC = 0x00000803
LABELS_MAGIC = 0x00000801

# IDX type code -> big-endian NumPy dtype.
_DTYPES = {
    0x08: np.dtype("u1"), 0x09: np.dtype("i1"), 0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"), 0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8"),
}


class IDXError(ValueError):
    """A file is not a valid IDX file (bad magic, wrong size, corrupt gzip stream)."""


def decompress(data, name="<bytes>"):
    """`data` decompressed when it starts with the gzip magic bytes, else `data` itself (the
    file name does not matter: `x.gz` may be raw and `x` may be gzipped)."""
    if data[:2] != GZIP_MAGIC:
        return data
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as error:  # BadGzipFile is an OSError
        raise IDXError(f"{name}: corrupt or truncated gzip stream "
                       f"({len(data)} compressed bytes): {error}") from None


def parse_idx(data, name="<bytes>", magic=None):
    """The array held in the IDX bytes `data` (read-only, no copy for unsigned bytes).

    `magic`, when given, is the magic number the caller expects (e.g. IMAGES_MAGIC); `name`
    names the source in error messages.
    """
    if len(data) < 4:
        raise IDXError(f"{name}: truncated IDX file: expected at least a 4-byte header, "
                       f"found {len(data)} bytes")
    found = int.from_bytes(data[:4], "big")
    type_code, ndim = data[2], data[3]
    if magic is not None and found != magic:
        raise IDXError(f"{name}: wrong IDX magic number: expected 0x{magic:08X} "
                       f"({_describe(magic)}), found 0x{found:08X}")
    if data[:2] != b"\0\0" or type_code not in _DTYPES:
        raise IDXError(f"{name}: not an IDX file: magic number 0x{found:08X} should be two zero "
                       f"bytes, a type code in {{{', '.join(f'0x{c:02X}' for c in _DTYPES)}}} "
                       f"and the number of dimensions")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise IDXError(f"{name}: truncated IDX header: expected {header} bytes for {ndim} "
                       f"dimensions, found {len(data)} bytes in the whole file")
    shape = tuple(int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    dtype = _DTYPES[type_code]
    expected = header + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(data) != expected:
        problem = "truncated" if len(data) < expected else "trailing bytes after the data"
        raise IDXError(f"{name}: wrong IDX file size ({problem}): the header promises shape "
                       f"{shape} of {dtype.name}, i.e. {expected} bytes, found {len(data)} bytes")
    return np.frombuffer(data, dtype=dtype, offset=header).reshape(shape)


def read_idx(path, magic=None):
    """The array stored in the IDX file `path` (gzipped or not), checked against its header and,
    when given, the expected `magic` number. Raises IDXError naming the file otherwise."""
    return parse_idx(decompress(pathlib.Path(path).read_bytes(), str(path)), str(path), magic)


def _describe(magic):
    dtype = _DTYPES.get((magic >> 8) & 0xFF)
    return f"{dtype.name if dtype else 'unknown type'}, {magic & 0xFF} dimensions"
