"""`save(state, path)` and `load(path)`: checkpoints of arrays and nested state, never pickle.

The format follows the file's extension (see `minigrad.formats`):

    .safetensors   a JSON header, then raw little-endian bytes; SHA-256 digests verified on load
    .npz           NumPy's zip of .npy files (allow_pickle=False) with a manifest of its members
    .pt / .pth     PyTorch's zip (torch.save's layout), its pickle read by a restricted
                   unpickler that runs no pickle code (minigrad/formats/pytorch.py)

`state` is a flat dict of name -> array (e.g. `model.state_dict()`), stored as exactly those
named arrays so other tools read the file, or nested state: dicts (str or int keys), lists and
tuples of arrays, Tensors, Python numbers, strings, bools and None, e.g.

    mg.save({"model": model.state_dict(), "optim": opt.state_dict(), "epoch": 3}, path)

Nested state is stored as its arrays, named by their dotted key paths ("model.0.weight"), plus
a JSON description of the structure, which `load` uses to give back the same structure.

Saving is atomic (see `minigrad.atomic`): a crash or an exception mid-write leaves any earlier
file under `path` as it was.

Saving while another thread trains: each tensor is stored as it was before or after each of
minigrad's own in-place changes (optimizer steps, in-place ops, batch norm's running statistics),
never a mix of two steps within one tensor: `state_dict()` and `save` copy each tensor holding
the lock those changes hold (minigrad/version.py). Different tensors may come from different
steps; for a checkpoint of one step, save between steps (in the training thread, or while it
waits). NumPy arrays in `state` are written as they are: changing them meanwhile is a race.
"""
import json
import math
import os

import numpy

from .atomic import atomic_write
from .formats import CheckpointError, fail, npz, pytorch, safetensors
from .tensor import Tensor, as_tensor
from .version import IN_PLACE_LOCK

__all__ = ["CheckpointError", "load", "save"]

_FORMATS = {safetensors.EXTENSION: safetensors, npz.EXTENSION: npz,
            **dict.fromkeys(pytorch.EXTENSIONS, pytorch)}
_RESERVED_NAMES = {safetensors.METADATA}   # names a flat dict cannot use as array names
_DEFAULT_EXPANSION, _DEFAULT_ALLOWANCE = 8, 64 << 20   # load's default max_bytes (see load)


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


def _as_array(value, where, check):
    """`value` as a C-contiguous NumPy array the format can hold, or a TypeError naming it."""
    if isinstance(value, Tensor):
        with IN_PLACE_LOCK:     # a copy between minigrad's in-place changes: never a mix
            array = value.numpy(force=True)
            value = array.copy() if value.device == "cpu" else array
    try:
        array = numpy.asarray(value, order="C")
    except Exception as error:  # a foreign array type that refuses conversion
        raise TypeError(f"save: {where} ({type(value).__name__}) cannot be read as a NumPy "
                        f"array: {error}") from error
    check(array, where)
    return array


class _Flattener:
    """Nested state -> ({dotted name: array}, JSON structure that refers to the arrays by name).

    Structure nodes: {"tensor"|"array"|"scalar": name} for a Tensor, a NumPy array or a NumPy
    scalar; {"dict": [[key, node], ...]} (key order and int keys kept), {"list": [...]},
    {"tuple": [...]}; {"float": "nan"|"inf"|"-inf"}; JSON null, bools, numbers and strings as
    themselves."""

    def __init__(self, check):
        self.check, self.arrays = check, {}

    def node(self, value, keys):
        where = "state" + "".join(f"[{k!r}]" for k in keys)
        if _is_array(value):
            kind = ("tensor" if isinstance(value, Tensor) else
                    "scalar" if isinstance(value, numpy.generic) else "array")
            return {kind: self._add(".".join(map(str, keys)) or "value",
                                    _as_array(value, where, self.check))}
        if value is None or isinstance(value, (bool, int, str)):
            return value
        if isinstance(value, float):
            return value if math.isfinite(value) else {"float": repr(value)}
        if isinstance(value, dict):
            for key in value:
                if isinstance(key, bool) or not isinstance(key, (str, int)):
                    raise TypeError(f"save: {where} has the key {key!r} "
                                    f"({type(key).__name__}); keys must be str or int")
            return {"dict": [[k, self.node(v, keys + [k])] for k, v in value.items()]}
        if isinstance(value, (list, tuple)):
            return {type(value).__name__: [self.node(v, keys + [i]) for i, v in enumerate(value)]}
        raise TypeError(f"save: {where} is a {type(value).__name__}; state may hold arrays, "
                        "Tensors, dicts, lists, tuples, numbers, strings, bools and None")

    def _add(self, name, array):
        unique, count = name, 1
        while unique in self.arrays or unique in _RESERVED_NAMES:
            count += 1
            unique = f"{name}#{count}"
        self.arrays[unique] = array
        return unique


def _flatten(state, check):
    """(arrays, structure): structure is None for a flat dict of str -> array, which is stored
    as exactly those named arrays."""
    if not isinstance(state, (dict, list, tuple)):
        hint = " (pass model.state_dict())" if hasattr(state, "state_dict") else ""
        raise TypeError(f"save: state must be a dict (e.g. model.state_dict()), a list or a "
                        f"tuple, not {type(state).__name__}{hint}")
    if isinstance(state, dict) and all(isinstance(k, str) and k not in _RESERVED_NAMES
                                       and _is_array(v) for k, v in state.items()):
        return {k: _as_array(v, f"state[{k!r}]", check) for k, v in state.items()}, None
    flattener = _Flattener(check)
    structure = flattener.node(state, [])
    return flattener.arrays, structure


class _Builder:
    """The json object_pairs_hook that turns the stored structure back into the state while it
    is parsed: each node (a one-key object) becomes its value at once, innermost first, so no
    second tree of the structure is held next to the state. Every array may be used once."""

    def __init__(self, arrays, device, path, extension):
        self.arrays, self.device, self.path, self.extension = arrays, device, path, extension
        self.used = set()

    def bad(self, what):
        return fail(self.path, self.extension, f"the stored structure is damaged ({what})")

    def __call__(self, pairs):
        if len(pairs) != 1:
            raise self.bad(f"unexpected node {dict(pairs)!r:.80}")
        (kind, content), = pairs
        if kind in ("tensor", "array", "scalar"):
            if not isinstance(content, str) or content not in self.arrays or content in self.used:
                raise self.bad(f"{kind} {content!r:.80} is not one of the stored arrays")
            self.used.add(content)
            array = self.arrays[content]
            if kind == "tensor":
                return as_tensor(array, device=self.device)
            return array[()] if kind == "scalar" else array
        if kind == "float" and content in ("nan", "inf", "-inf"):
            return float(content)
        if kind in ("list", "tuple") and isinstance(content, list):
            return content if kind == "list" else tuple(content)
        if kind == "dict" and isinstance(content, list) and all(
                isinstance(item, list) and len(item) == 2 and isinstance(item[0], (str, int))
                for item in content):
            return dict(content)
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
    if len(builder.used) != len(arrays):
        unused = [name for name in arrays if name not in builder.used]
        raise fail(path, extension, f"the stored structure does not use the arrays "
                                    f"{unused[:5]}")
    return state


def save(state, path):
    """Write `state` to `path` as .safetensors, .npz or .pt/.pth, by its extension, atomically.

    state: a flat dict of name -> NumPy array or Tensor (e.g. `model.state_dict()`), stored as
    those named arrays; or nested dicts (str or int keys), lists and tuples of arrays, Tensors,
    NumPy scalars, Python numbers, strings, bools and None. Anything else is a TypeError raised
    before the file is touched. Raises PermissionError where open(path, "w") would."""
    path = os.fspath(path)
    extension = _format(path, "save")
    file_format = _FORMATS[extension]
    try:
        arrays, structure = _flatten(state, file_format.check)
        atomic_write(path, lambda file: file_format.write(file, arrays, structure))
    except RecursionError:
        raise ValueError("save: state is nested too deeply to store, or contains itself") from None


def load(path, device=None, max_bytes=None):
    """Read a checkpoint written by `save`, any .safetensors / .npz file of plain arrays, or a
    .pt / .pth file written by `torch.save` (weights only: tensors in dicts, lists, tuples,
    numbers and strings; anything else is refused before it could run). From a .pt file tensors
    come back as Tensors (NumPy arrays and scalars were saved as tensors).

    A flat dict comes back as a dict of name -> NumPy array, or of Tensors on `device` when a
    device is given. Nested state comes back with the same structure: NumPy arrays and scalars
    as they were saved, Tensors as Tensors on `device` (default the CPU).

    max_bytes: the most bytes the file's arrays may take in memory, checked before any is read.
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
        max_bytes = _DEFAULT_EXPANSION * os.path.getsize(path) + _DEFAULT_ALLOWANCE
    arrays, structure = _FORMATS[extension].read(path, max_bytes)
    if structure is None:
        if device is None:
            return arrays
        return {name: as_tensor(a, device=device) for name, a in arrays.items()}
    return _unflatten(structure, arrays, device, path, extension)
