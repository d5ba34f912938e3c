"""`save(obj, path)` and `load(path)`: torch.save / torch.load for tensors and nested state.

The format follows the file's extension (see `minigrad.formats`):

    .safetensors   a JSON header, then raw little-endian bytes; SHA-256 digests verified on load
    .npz           NumPy's zip of .npy files (allow_pickle=False) with a manifest of its members
    .pt / .pth     PyTorch's zip (torch.save's layout), its pickle read by a restricted
                   unpickler that runs no pickle code (minigrad/formats/pytorch.py)

`obj` is what torch.save takes in a weights-only file: a tensor, or dicts (str or int keys),
OrderedDicts, lists and tuples of tensors, NumPy arrays and scalars, Python numbers, strings,
bools and None, nested to any depth, e.g.

    mg.save({"model": model.state_dict(), "optim": opt.state_dict(), "epoch": 3}, path)

Every format loads the same values: each array comes back as a Tensor (on `load`'s device),
bfloat16 ones too, except those of dtypes a Tensor cannot hold (float8: NumPy arrays of
`ml_dtypes`);
containers, numbers, strings, bools and None as they were saved.

A flat dict of str -> array (a state dict) is stored as exactly those named arrays, so other
tools read the file. Anything else is stored as its arrays, named by their dotted key paths
("model.0.weight"), plus a JSON description of the structure (in a .pt file, the pickle).
Memory saved twice (the same tensor under two keys, tied weights: equal address, shape, strides
and dtype) is stored once and loads as one tensor in every place; in .safetensors and .npz under
its first name, which is what other tools see (safetensors' own `save_file` refuses such
tensors, its `save_model` keeps the first name too). Tensors that overlap only in part are
stored apart.

Saving is atomic (see `minigrad.atomic`): a crash or an exception mid-write leaves any earlier
file under `path` as it was.

Saving while another thread trains: each tensor is stored as it was before or after each of
minigrad's own in-place changes (optimizer steps, in-place ops, batch norm's running statistics),
never a mix of two steps within one tensor: `state_dict()` and `save` copy each tensor holding
the lock those changes hold (minigrad/version.py). Different tensors may come from different
steps; for a checkpoint of one step, save between steps (in the training thread, or while it
waits). NumPy arrays in `obj` are written as they are: changing them meanwhile is a race.

Memory: `save` copies each tensor just before its bytes are written (a `_Snapshot` until then),
so one tensor's copy is alive at a time: the peak is about the largest tensor, not the data.
"""
import collections
import json
import math
import os

import numpy

from .atomic import atomic_write
from .dtypes import bfloat16
from .formats import CheckpointError, default_max_bytes, fail, npz, pytorch, safetensors
from .tensor import Tensor, as_tensor
from .version import IN_PLACE_LOCK

__all__ = ["CheckpointError", "load", "save"]

_FORMATS = {safetensors.EXTENSION: safetensors, npz.EXTENSION: npz,
            **dict.fromkeys(pytorch.EXTENSIONS, pytorch)}
_RESERVED_NAMES = {safetensors.METADATA}   # names a flat dict cannot use as array names
_SUPPORTED = ("Tensors, NumPy arrays and scalars, dicts and OrderedDicts (str or int keys), "
              "lists, tuples, int, float, bool, str and None")


def _format(path, action):
    extension = os.path.splitext(path)[1].lower()
    if extension not in _FORMATS:
        raise ValueError(f"{action}: cannot tell the format of {path!r} from its extension "
                         f"{extension or '(none)'!r}; supported extensions: "
                         f"{', '.join(_FORMATS)}")
    return extension


def _is_array(value):
    return isinstance(value, (Tensor, numpy.ndarray, numpy.generic)) or (
        hasattr(value, "__array__") and not isinstance(value, (dict, list, tuple, str)))


class _Snapshot:
    """A tensor to be saved: its dtype, shape and size now, its values copied (between
    minigrad's in-place changes: never a mix) only when a format reads it with numpy.asarray,
    just before writing them, so one tensor's copy is alive at a time."""

    def __init__(self, tensor):
        self.tensor, self.dtype, self.shape = tensor, tensor.array.dtype, tuple(tensor.shape)
        self.ndim, self.size = len(self.shape), math.prod(self.shape)
        self.nbytes = self.size * self.dtype.itemsize

    def __array__(self, dtype=None, copy=None):
        with IN_PLACE_LOCK:
            array = self.tensor.numpy(force=True)   # the CPU array itself, or a GPU's host copy
            array = numpy.array(array, order="C") if self.tensor.device == "cpu" else \
                numpy.ascontiguousarray(array)
        return array if dtype is None else array.astype(dtype, copy=False)


def _as_array(value, where, check):
    """`value` as a C-contiguous NumPy array the format can hold (a _Snapshot for a Tensor),
    or a TypeError naming it."""
    if isinstance(value, Tensor):
        snapshot = _Snapshot(value)
        check(snapshot, where)
        return snapshot
    try:
        array = numpy.asarray(value, order="C")
    except Exception as error:  # a foreign array type that refuses conversion
        raise TypeError(f"save: {where} ({type(value).__name__}) cannot be read as a NumPy "
                        f"array: {error}") from error
    check(array, where)
    return array


def _memory(array):
    """What tells the memory of a NumPy or CuPy array apart: (address, shape, strides, dtype)
    are equal for two arrays only when they hold the same elements (while both are alive). None
    for other values and for empty arrays (whose address means nothing)."""
    if isinstance(array, numpy.ndarray):
        address = array.__array_interface__["data"][0]
    elif hasattr(array, "__cuda_array_interface__"):   # a CuPy array (a GPU tensor's)
        address = array.__cuda_array_interface__["data"][0]
    else:
        return None
    if array.size == 0:
        return None
    return type(array), address, array.shape, array.strides, array.dtype


class _Flattener:
    """The state -> ({dotted name: array}, JSON structure that refers to the arrays by name).

    Structure nodes: {"tensor": name} for an array (a Tensor, a NumPy array or scalar; one name
    for memory saved twice); {"dict" | "ordered_dict": [[key, node], ...]} (key order and int
    keys kept), {"list": [...]}, {"tuple": [...]}; {"float": "nan"|"inf"|"-inf"}; JSON null,
    bools, numbers and strings as themselves."""

    def __init__(self, check):
        self.check, self.arrays = check, {}
        self.names = {}   # _memory(array) -> (name, array): the array kept alive while saving

    def node(self, value, keys):
        where = "state" + "".join(f"[{k!r}]" for k in keys)
        if _is_array(value):
            return {"tensor": self._add(value, keys, where)}
        if value is None or isinstance(value, (bool, int, str)):
            return value
        if isinstance(value, float):
            return value if math.isfinite(value) else {"float": repr(value)}
        if isinstance(value, dict):
            for key in value:
                if isinstance(key, bool) or not isinstance(key, (str, int)):
                    raise TypeError(f"save: {where} has the key {key!r} "
                                    f"({type(key).__name__}); keys must be str or int")
            kind = "ordered_dict" if isinstance(value, collections.OrderedDict) else "dict"
            return {kind: [[k, self.node(v, keys + [k])] for k, v in value.items()]}
        if isinstance(value, (list, tuple)):
            return {type(value).__name__: [self.node(v, keys + [i]) for i, v in enumerate(value)]}
        hint = " (save its .state_dict())" if hasattr(value, "state_dict") else ""
        raise TypeError(f"save: {where} ({type(value).__name__}) cannot be saved{hint}; "
                        f"supported: {_SUPPORTED}")

    def _add(self, value, keys, where):
        """The name `value` is stored under: that of the same memory stored before, else its
        dotted key path (made unique)."""
        array = value.array if isinstance(value, Tensor) else value
        memory = _memory(array)
        if memory in self.names:
            return self.names[memory][0]
        name, count = ".".join(map(str, keys)) or "value", 1
        unique = name
        while unique in self.arrays or unique in _RESERVED_NAMES:
            count += 1
            unique = f"{name}#{count}"
        self.arrays[unique] = _as_array(value, where, self.check)
        if memory is not None:
            self.names[memory] = unique, array
        return unique


def _flatten(state, check):
    """(arrays, structure, flat): `flat` when `state` is a dict of str -> array, every value
    stored under its own key (none renamed, none shared), which formats store as just those
    named arrays."""
    flattener = _Flattener(check)
    structure = flattener.node(state, [])
    flat = isinstance(state, dict) and list(flattener.arrays) == list(state)
    return flattener.arrays, structure, flat


def _loaded(array, device):
    """A stored array as `load` gives it, in this machine's byte order (an .npz may hold
    big-endian arrays): a Tensor on `device`, or the NumPy array itself where a Tensor cannot
    hold its dtype (float8, from ml_dtypes)."""
    array = array.astype(array.dtype.newbyteorder("="), copy=False)
    if array.dtype.kind not in "biufc" and array.dtype != bfloat16:
        return array
    return as_tensor(array, device=device)


class _Builder:
    """The json object_pairs_hook that turns the stored structure back into the state while it
    is parsed: each node (a one-key object) becomes its value at once, innermost first, so no
    second tree of the structure is held next to the state. Each stored array is loaded once,
    and is the same value wherever the structure refers to it."""

    def __init__(self, arrays, device, path, extension):
        self.arrays, self.device, self.path, self.extension = arrays, device, path, extension
        self.loaded = {}   # name -> its loaded value

    def bad(self, what):
        return fail(self.path, self.extension, f"the stored structure is damaged ({what})")

    def __call__(self, pairs):
        if len(pairs) != 1:
            raise self.bad(f"unexpected node {dict(pairs)!r:.80}")
        (kind, content), = pairs
        # (files written before this version name NumPy arrays "array", NumPy scalars "scalar")
        if kind in ("tensor", "array", "scalar"):
            if not isinstance(content, str) or content not in self.arrays:
                raise self.bad(f"{kind} {content!r:.80} is not one of the stored arrays")
            if content not in self.loaded:
                self.loaded[content] = _loaded(self.arrays[content], self.device)
            return self.loaded[content]
        if kind == "float" and content in ("nan", "inf", "-inf"):
            return float(content)
        if kind in ("list", "tuple") and isinstance(content, list):
            return content if kind == "list" else tuple(content)
        if kind in ("dict", "ordered_dict") and isinstance(content, list) and all(
                isinstance(item, list) and len(item) == 2 and isinstance(item[0], (str, int))
                for item in content):
            return dict(content) if kind == "dict" else collections.OrderedDict(content)
        raise self.bad(f"unexpected node {dict(pairs)!r:.80}")


def _unflatten(text, arrays, device, path, extension):
    """The state the structure's JSON `text` describes; CheckpointError for one that is not."""
    builder = _Builder(arrays, device, path, extension)
    try:
        state = json.loads(text, object_pairs_hook=builder)
    except RecursionError:
        raise fail(path, extension, "the stored structure is nested too deeply") from None
    except CheckpointError:
        raise
    except ValueError as error:
        raise fail(path, extension, f"the stored structure is not valid JSON "
                                    f"({str(error):.200})") from None
    if len(builder.loaded) != len(arrays):
        unused = [name for name in arrays if name not in builder.loaded]
        raise fail(path, extension, f"the stored structure does not use the arrays "
                                    f"{unused[:5]}")
    return state


def save(obj, path):
    """Write `obj` to `path` as .safetensors, .npz or .pt/.pth, by its extension, atomically.

    obj: a Tensor, a NumPy array, a state dict, or nested dicts (str or int keys),
    OrderedDicts, lists and tuples of Tensors, NumPy arrays and scalars, Python numbers,
    strings, bools and None (an optimizer's state dict, a whole training checkpoint). Anything
    else is a TypeError naming where it sits in `obj` (e.g. state['optim'][2]), raised before
    the file is touched. Raises PermissionError where open(path, "w") would."""
    path = os.fspath(path)
    extension = _format(path, "save")
    file_format = _FORMATS[extension]
    try:
        arrays, structure, flat = _flatten(obj, file_format.check)
        atomic_write(path, lambda file: file_format.write(file, arrays, structure, flat))
    except RecursionError:
        raise ValueError("save: state is nested too deeply to store, or contains itself") from None


def load(path, device=None, max_bytes=None):
    """What `save` wrote to `path`, any .safetensors / .npz file of plain arrays, or a .pt /
    .pth file written by `torch.save` (weights only: tensors in dicts, lists, tuples, numbers and
    strings; anything else is refused before it could run).

    Arrays come back as Tensors on `device` (default the CPU), from every format, except those
    of dtypes a Tensor cannot hold (float8: NumPy arrays of ml_dtypes' dtypes). A file
    of plain named arrays (a flat dict: other tools' files, and state dicts saved to .safetensors
    or .npz) comes back as a dict of name -> Tensor; anything else with the structure it was
    saved with (a .pt file: as `torch.load(path, weights_only=True)` gives it). A tensor saved
    in several places comes back as one tensor in all of them.

    max_bytes: the most bytes the file's arrays may take in memory, checked before any is read
    (for a .pt file: its arrays and every object its pickle builds, charged as they are built;
    for a .safetensors file: its arrays and every entry of its header, charged as the JSON is
    parsed: a 67 MB header of a million zero-size tensors is refused at 7.4x its size, where
    reading it took 10.3x).
    The default (None) is what is safe for a file from anywhere: 8 times the file's size plus
    64 MiB. Every uncompressed file passes it (all .safetensors files, and .npz files written
    by `save` or `numpy.savez`), while a compressed .npz crafted to expand (a 1 MB deflate bomb
    holding a valid 1 GiB array) is refused before anything is decompressed. To load a highly
    compressed file you trust, pass a larger number, or `math.inf`.

    Integrity: in .safetensors files written by minigrad every tensor's SHA-256 and the header's
    are verified; files written by other tools have no digests, so that check is skipped for
    them (their layout is still checked). In .npz files the zip CRC of each member is verified,
    and minigrad's manifest must list exactly the members present (archives from other tools
    have no manifest; that check is skipped). A truncated, corrupt or foreign file raises
    CheckpointError (a ValueError) naming the file and the cause; a missing one
    FileNotFoundError. The memory a load takes, even of a hostile file, is a small multiple of
    the file's size and of what it loads (tests/test_hostile_files.py measures it)."""
    path = os.fspath(path)
    extension = _format(path, "load")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"load: no checkpoint file {path!r}")
    if max_bytes is None:
        max_bytes = default_max_bytes(path)
    if _FORMATS[extension] is pytorch:   # its pickle is the structure: built as it is read
        return pytorch.load_state(path, max_bytes, lambda array: _loaded(array, device),
                                  (Tensor, numpy.ndarray))
    arrays, structure = _FORMATS[extension].read(path, max_bytes)
    if structure is None:
        return {name: _loaded(array, device) for name, array in arrays.items()}
    return _unflatten(structure, arrays, device, path, extension)
