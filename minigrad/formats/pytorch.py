"""PyTorch's checkpoint file (.pt / .pth, `torch.save` since 1.6), read and written without
PyTorch and without running any pickle code.

The file is a zip archive of stored (uncompressed) records under one folder:

    archive/data.pkl          the object, pickled; each tensor a call
                              torch._utils._rebuild_tensor_v2(storage, offset, size, stride,
                              requires_grad, OrderedDict()) whose storage is a persistent id
                              ("storage", torch.FloatStorage, key, location, numel)
    archive/data/<key>        the storage's raw little-endian bytes (aligned to 64 in the file)
    archive/version           "3", and byteorder, .format_version, .storage_alignment

Reading: the pickle machine of weights_pickle.py (a stack, a dict memo and the opcodes
`torch.save` writes, nothing that recurses), with the names a weights-only file needs mapped to
minigrad's own functions (`_rebuild_tensor_v2`, `_rebuild_parameter`, `collections.OrderedDict`
and the storage dtypes); every other name (`os.system`, `builtins.eval`, ...) is refused with a
CheckpointError naming it before anything is called, which is what makes reading safe. The
object is built as it is read (tensors, containers shared as the pickle shares them), and
everything built (storages, copies of views, the objects themselves) is charged against
`max_bytes`. Each storage is read from its record only after its size is checked against the
dtype and element count the pickle claims, and each tensor's offset, sizes and strides against
the elements they address (any stride on an axis of size 1, as torch). A tensor the pickle
refers to twice, and tensors that are the same view of one storage (tied weights), load as one
tensor; a view that is all of its storage, in order, is the storage itself (no copy); other
views load as copies of their elements (they no longer share memory), and a view larger than
its storage (an `expand`ed tensor) is refused. BFloat16Storage holds ml_dtypes' bfloat16.

Writing: every stored array becomes a tensor with its own storage, pickled once and memoized,
so an array the structure names twice is one tensor object in `torch.load`; the pickle
(protocol 2, what `torch.save` writes) is emitted opcode by opcode, so
`torch.load(path, weights_only=True)` reads it. Storages are streamed into their records 16 MiB
at a time, never copied whole.
"""
import collections
import math
import os
import pickle
import struct
import zipfile
import zlib

import numpy

from ..dtypes import as_dtype
from . import CheckpointError, fail
from .weights_pickle import TENSOR, WeightsPickle

EXTENSIONS = (".pt", ".pth")
PREFIX = "archive"
_ALIGNMENT = 64
_DATE = (1980, 1, 1, 0, 0, 0)
_STORAGES = {"FloatStorage": "float32", "DoubleStorage": "float64", "HalfStorage": "float16",
             "BFloat16Storage": "bfloat16", "LongStorage": "int64", "IntStorage": "int32",
             "ShortStorage": "int16", "CharStorage": "int8", "ByteStorage": "uint8",
             "BoolStorage": "bool", "ComplexFloatStorage": "complex64",
             "ComplexDoubleStorage": "complex128"}
_STORAGE_OF = {dtype: name for name, dtype in _STORAGES.items()}
_CHUNK = 16 << 20   # bytes of a storage written at a time
_BIG = 1 << 62     # no size, stride or offset in a real file comes near this
_COPY_RATIO, _COPY_SLACK = 4, 1 << 20   # loaded tensors take at most 4x the file (+ 1 MiB)
_DAMAGE = (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, OSError, ValueError,
           TypeError, KeyError, IndexError, AttributeError, OverflowError, RuntimeError,
           MemoryError, RecursionError, struct.error, pickle.UnpicklingError)


def check(array, where):
    if array.dtype.name not in _STORAGE_OF:
        raise TypeError(f"save: {where} has dtype {array.dtype}, which a PyTorch file cannot "
                        f"hold; PyTorch's storages are {', '.join(sorted(_STORAGE_OF))}")


# ---------------------------------------------------------------------------------- writing
def write(file, arrays, structure, flat):
    """The structure is always pickled: a flat dict as a dict of tensors, as torch.save writes a
    state dict. Storages are streamed into the archive a chunk at a time (no copy of the data)."""
    pickler = _Pickler(arrays)
    data = pickler.dump(structure)
    with zipfile.ZipFile(file, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        records = [("data.pkl", data), (".format_version", b"1"),
                   (".storage_alignment", str(_ALIGNMENT).encode()), ("byteorder", b"little")]
        records += [(f"data/{key}", array) for key, array in enumerate(pickler.storages)]
        records.append(("version", b"3\n"))
        for name, content in records:
            _write_aligned(file, archive, f"{PREFIX}/{name}", content)


def _write_aligned(file, archive, name, content):
    """A stored record (bytes, or an array's little-endian elements, read with numpy.asarray
    only now: a tensor's copy) whose bytes start at a multiple of 64 in the file (padding in the
    local header's extra field, as PyTorch pads), so a reader can map storages in place."""
    info = zipfile.ZipInfo(name, _DATE)
    start = file.tell() + 30 + len(name.encode()) + 4   # local header, name, extra header
    info.extra = b"FB" + struct.pack("<H", -start % _ALIGNMENT) + b"Z" * (-start % _ALIGNMENT)
    info.file_size = len(content) if isinstance(content, bytes) else content.nbytes
    with archive.open(info, "w") as record:
        if isinstance(content, bytes):
            record.write(content)
            return
        flat = numpy.asarray(content).reshape(-1)
        step = _CHUNK // flat.itemsize
        for begin in range(0, flat.size, step):
            chunk = flat[begin:begin + step].astype(flat.dtype.newbyteorder("<"), copy=False)
            record.write(chunk.view(numpy.uint8))


class _Pickler:
    """The structure (serialization.py's nodes) as pickle opcodes, protocol 2; arrays become
    tensors over storages "0", "1", ... (collected in `storages`), each put in the pickle's memo
    under its storage's number, and fetched from it when named again."""

    def __init__(self, arrays):
        self.arrays, self.storages, self.out = arrays, [], bytearray()
        self.memo = {}   # array name -> memo index of its tensor

    def dump(self, structure):
        self.out += pickle.PROTO + b"\x02"
        self.node(structure)
        self.out += pickle.STOP
        return bytes(self.out)

    def node(self, node):
        out = self.out
        if node is None or isinstance(node, bool):
            out += {None: pickle.NONE, True: pickle.NEWTRUE, False: pickle.NEWFALSE}[node]
        elif isinstance(node, int):
            self.integer(node)
        elif isinstance(node, float):
            out += pickle.BINFLOAT + struct.pack(">d", node)
        elif isinstance(node, str):
            self.string(node)
        else:
            (kind, content), = node.items()
            if kind == "tensor":
                self.tensor(content)
            elif kind == "float":
                out += pickle.BINFLOAT + struct.pack(">d", float(content))
            elif kind in ("dict", "ordered_dict"):
                if kind == "dict":
                    out += pickle.EMPTY_DICT
                else:   # OrderedDict(), then its items (as pickle writes one)
                    self.glob("collections", "OrderedDict")
                    out += pickle.EMPTY_TUPLE + pickle.REDUCE
                if content:
                    out += pickle.MARK
                    for key, value in content:
                        self.node(key)
                        self.node(value)
                    out += pickle.SETITEMS
            elif kind == "list":
                out += pickle.EMPTY_LIST
                if content:
                    out += pickle.MARK
                    for value in content:
                        self.node(value)
                    out += pickle.APPENDS
            else:   # tuple
                self.tuple(content)

    def integer(self, value):
        if 0 <= value < 256:
            self.out += pickle.BININT1 + bytes([value])
        elif -(1 << 31) <= value < (1 << 31):
            self.out += pickle.BININT + struct.pack("<i", value)
        else:
            encoded = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
            self.out += pickle.LONG1 + bytes([len(encoded)]) + encoded

    def string(self, value):
        encoded = value.encode("utf-8", "surrogatepass")
        self.out += pickle.BINUNICODE + struct.pack("<I", len(encoded)) + encoded

    def tuple(self, items):
        self.out += pickle.MARK
        for item in items:
            self.node(item)
        self.out += pickle.TUPLE

    def glob(self, module, name):
        self.out += pickle.GLOBAL + f"{module}\n{name}\n".encode()

    def tensor(self, name):
        if name in self.memo:
            self.out += pickle.LONG_BINGET + struct.pack("<I", self.memo[name])
            return
        array = self.arrays[name]
        self.memo[name] = len(self.storages)
        key = str(len(self.storages))
        self.storages.append(array)
        strides = [math.prod(array.shape[i + 1:]) for i in range(array.ndim)]
        self.glob("torch._utils", "_rebuild_tensor_v2")
        self.out += pickle.MARK
        self.out += pickle.MARK
        self.string("storage")
        self.glob("torch", _STORAGE_OF[array.dtype.name])
        self.string(key)
        self.string("cpu")
        self.integer(array.size)
        self.out += pickle.TUPLE + pickle.BINPERSID
        self.integer(0)
        self.tuple(list(array.shape))
        self.tuple(strides)
        self.out += pickle.NEWFALSE
        self.glob("collections", "OrderedDict")
        self.out += pickle.EMPTY_TUPLE + pickle.REDUCE
        self.out += pickle.TUPLE + pickle.REDUCE
        self.out += pickle.LONG_BINPUT + struct.pack("<I", self.memo[name])


# ---------------------------------------------------------------------------------- reading
def load_state(path, max_bytes, loaded, values):
    """The object `torch.save` pickled into `path`, each tensor `loaded(array)` (an instance of
    one of `values`): its storages, the copies of their views and every object the pickle
    builds together within `max_bytes` bytes (a CheckpointError before going past it)."""
    extension = os.path.splitext(path)[1].lower()

    def bad(cause):
        return fail(path, extension, cause)

    with open(path, "rb") as file:
        if file.read(2) != b"PK":
            raise bad("it is not a zip archive (PyTorch's format since 1.6; files saved with "
                      "_use_new_zipfile_serialization=False are not supported)")
    size = os.path.getsize(path)
    try:
        with zipfile.ZipFile(path) as archive:
            records = _records(archive, size, bad)
            total = sum(info.file_size for info in records.values())
            if total > max_bytes:
                raise bad(f"its records take {total} bytes, more than max_bytes={max_bytes}")
            if records.get("byteorder", None) is not None and \
                    archive.read(records["byteorder"]) != b"little":
                raise bad("its storages are big-endian, which minigrad does not read")
            data = archive.read(records["data.pkl"])
            torch_file = _TorchFile(archive, records, bad, loaded, values,
                                    _COPY_RATIO * size + _COPY_SLACK)
            torch_file.machine = WeightsPickle(
                data, torch_file.find_class, torch_file.persistent_load, values,
                max_bytes - len(data), bad)
            return torch_file.machine.load()
    except CheckpointError:
        raise
    except _DAMAGE as error:
        raise bad(f"damaged archive or pickle ({type(error).__name__}: {error})") from None


def _records(archive, size, bad):
    """{name under the archive's folder: ZipInfo}, each checked against the file's size."""
    infos = archive.infolist()
    pickles = [i.filename for i in infos if i.filename.endswith("/data.pkl")
               and i.filename.count("/") == 1]
    if len(pickles) != 1:
        raise bad(f"expected one <folder>/data.pkl record, found {len(pickles)}")
    folder = pickles[0][:-len("data.pkl")]
    records = {}
    for info in infos:
        if not info.filename.startswith(folder):
            raise bad(f"record {info.filename!r} is outside the archive's folder {folder!r}")
        if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
            raise bad(f"record {info.filename!r} is compressed or encrypted; PyTorch stores "
                      "its records as they are")
        if info.header_offset + info.compress_size > size or info.file_size != info.compress_size:
            raise bad(f"record {info.filename!r} claims {info.file_size} bytes, more than the "
                      f"{size}-byte file holds")
        name = info.filename[len(folder):]
        if name in records:
            raise bad(f"record {info.filename!r} appears twice")
        records[name] = info
    return records


class _StorageType:
    """What `torch.FloatStorage` (and the other storage names) stand for: a dtype."""

    def __init__(self, name):
        self.name, self.dtype = name, as_dtype(_STORAGES[name])


class _Storage:
    def __init__(self, array):
        self.array = array


class _TorchFile:
    """The names a weights-only file's pickle may use (see the module docstring), for the
    pickle machine (weights_pickle.py, set as `machine`), which charges what they build."""

    def __init__(self, archive, records, bad, loaded, values, copies):
        self.archive, self.records, self.bad, self.storages = archive, records, bad, {}
        self.loaded, self.values = loaded, values
        self.views = {}        # (storage, offset, size, stride) -> its tensor
        self.copies = copies   # bytes the copies of views may still take
        self.allowed = {("torch._utils", "_rebuild_tensor_v2"): self.rebuild_tensor,
                        ("torch._utils", "_rebuild_parameter"): self.rebuild_parameter,
                        ("collections", "OrderedDict"): _ordered_dict}

    def find_class(self, module, name):
        if module == "torch" and name in _STORAGES:
            return _StorageType(name)
        if (module, name) in self.allowed:
            return self.allowed[module, name]
        raise self.bad(f"its pickle asks for {module[:100]}.{name[:100]}, which a weights-only "
                       f"file never needs (refused: loading it could run code)")

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
                and isinstance(pid[1], _StorageType) and isinstance(pid[2], str)
                and isinstance(pid[3], str) and _index(pid[4])):
            raise self.bad(f"unexpected persistent id {pid!r:.200} (expected ('storage', "
                           f"<dtype>Storage, key, location, numel))")
        _, kind, key, _, numel = pid
        if key in self.storages:
            storage = self.storages[key]
            if storage.array.dtype != kind.dtype or storage.array.size != numel:
                raise self.bad(f"storage {key!r} is claimed as two different dtypes or sizes")
            return storage
        info = self.records.get(f"data/{key}")
        if info is None:
            raise self.bad(f"storage {key!r} has no data/{key[:100]} record")
        if info.file_size != numel * kind.dtype.itemsize:
            raise self.bad(f"storage {key!r} claims {numel} elements of {kind.dtype} "
                           f"({numel * kind.dtype.itemsize} bytes) but its record holds "
                           f"{info.file_size} bytes")
        self.machine.charge(info.file_size, "storages")
        self.storages[key] = _Storage(_read_record(self.archive, info, numel, kind.dtype))
        return self.storages[key]

    def rebuild_tensor(self, storage, offset, size, stride, requires_grad, hooks,
                       metadata=None):
        """`storage[offset + sum(i_k * stride_k)]` at each index i of `size`, checked first by
        the elements it addresses: any stride on an axis of size 1 (it addresses nothing more),
        as torch loads it."""
        if not (isinstance(storage, _Storage) and _index(offset)
                and isinstance(size, tuple) and all(map(_index, size))
                and isinstance(stride, tuple) and all(map(_stride, stride))
                and len(size) == len(stride) <= 64 and isinstance(requires_grad, bool)
                and isinstance(hooks, dict) and not hooks
                and (metadata is None or isinstance(metadata, dict))):
            raise self.bad("a tensor's rebuild arguments are not (storage, offset, size, "
                           "stride, requires_grad, empty hooks)")
        available, numel = storage.array.size, math.prod(size)
        if numel and offset + sum((n - 1) * s for n, s in zip(size, stride, strict=True)) \
                >= available:
            raise self.bad(f"a tensor of size {size}, stride {stride} at offset {offset} reaches "
                           f"past its storage of {available} elements")
        if numel > available:
            raise self.bad(f"a tensor of size {size} has more elements than its storage "
                           f"({available}; an expanded view): save a .contiguous() copy")
        view_key = (id(storage), offset, size, stride)   # (storages live in self.storages)
        if view_key not in self.views:
            self.machine.charge(TENSOR, "tensors")
            self.views[view_key] = self.loaded(self.elements(storage.array, offset, size,
                                                             stride))
        return self.views[view_key]

    def elements(self, array, offset, size, stride):
        """The view's elements: the storage itself when the view is all of it in order (most
        tensors), else a copy (charged)."""
        strides = [0 if n == 1 else s for n, s in zip(size, stride, strict=True)]
        if offset == 0 and math.prod(size) == array.size and strides == [
                0 if n == 1 else math.prod(size[i + 1:]) for i, n in enumerate(size)]:
            return array.reshape(size)
        nbytes = math.prod(size) * array.itemsize
        self.copies -= nbytes
        if self.copies < 0:
            raise self.bad(f"its tensors would take more than {_COPY_RATIO} times the file's "
                           f"size (many views of one storage)")
        self.machine.charge(nbytes, "tensors")
        view = numpy.lib.stride_tricks.as_strided(
            array[offset:] if math.prod(size) else array[:0], size,
            [s * array.itemsize for s in strides], writeable=False)
        return numpy.array(view, order="C")

    def rebuild_parameter(self, data, requires_grad, hooks):
        if not isinstance(data, self.values):
            raise self.bad("a parameter's data is not a tensor")
        return data


def _read_record(archive, info, numel, dtype):
    """A storage's little-endian elements, read into their array a MiB at a time (never the
    whole record twice in memory); the zip's CRC is checked as it is read."""
    array = numpy.empty(numel, dtype.newbyteorder("<"))
    raw = array.view(numpy.uint8)
    with archive.open(info) as record:
        for start in range(0, raw.size, 1 << 20):
            chunk = record.read(min(1 << 20, raw.size - start))
            if len(chunk) < min(1 << 20, raw.size - start):
                raise EOFError("a storage record is shorter than it claims")
            raw[start:start + len(chunk)] = numpy.frombuffer(chunk, numpy.uint8)
    return array.astype(dtype, copy=False)


def _ordered_dict(*args):
    """collections.OrderedDict(), for a pickle; it takes the attributes PyTorch pickles with a
    state dict (`_metadata`) by BUILD, which the pickle machine drops."""
    if args:
        raise pickle.UnpicklingError("OrderedDict is only rebuilt empty in a weights-only file")
    return collections.OrderedDict()


def _index(value):
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < _BIG


def _stride(value):
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 63
