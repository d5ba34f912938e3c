"""`save(state, path)` and `load(path)`: flat name -> array checkpoints, never pickle.

The format follows the file's extension:

    .safetensors   the safetensors format (a JSON header, then raw little-endian bytes)
    .npz           NumPy's zip of .npy files, read with allow_pickle=False

Saving is atomic (see `minigrad.atomic`): a crash or an exception mid-write leaves any earlier
file under `path` as it was, and no temporary behind.
"""
import os
import zipfile

import numpy
import safetensors
import safetensors.numpy

from .atomic import atomic_write
from .tensor import Tensor


class CheckpointError(ValueError):
    """A file could not be read as the checkpoint format its extension names."""


def _write_safetensors(arrays, file):
    file.write(safetensors.numpy.save(arrays))


def _read_safetensors(path):
    return safetensors.numpy.load_file(path)


def _write_npz(arrays, file):
    numpy.savez(file, **arrays)


def _read_npz(path):
    with open(path, "rb") as file:
        if file.read(2) != b"PK":  # every zip archive starts with a "PK" record
            raise CheckpointError("it is not a zip archive")
    archive = numpy.load(path, allow_pickle=False)
    try:
        return {name: archive[name] for name in archive.files}
    finally:
        archive.close()


_FORMATS = {
    ".safetensors": (_write_safetensors, _read_safetensors),
    ".npz": (_write_npz, _read_npz),
}


def _format(path, action):
    extension = os.path.splitext(path)[1].lower()
    if extension not in _FORMATS:
        raise ValueError(f"{action}: cannot tell the format of {path!r} from its extension "
                         f"{extension or '(none)'!r}; supported extensions: "
                         f"{', '.join(_FORMATS)}")
    return extension


def _as_arrays(state):
    """`state` as {name: C-contiguous NumPy array}, rejecting anything that is not flat data."""
    if not isinstance(state, dict):
        hint = " (pass model.state_dict())" if hasattr(state, "state_dict") else ""
        raise TypeError(f"save: state must be a dict of name -> array, not "
                        f"{type(state).__name__}{hint}")
    arrays = {}
    for name, value in state.items():
        if not isinstance(name, str):
            raise TypeError(f"save: key {name!r} is a {type(name).__name__}; keys must be str")
        if isinstance(value, Tensor):
            value = value.numpy()
        elif not (isinstance(value, (numpy.ndarray, numpy.generic)) or hasattr(value, "__array__")):
            raise TypeError(f"save: state[{name!r}] is a {type(value).__name__}; values must be "
                            "arrays or Tensors (nested dicts are not supported: flatten them "
                            "with dotted names)")
        try:
            array = numpy.asarray(value, order="C")
        except Exception as error:  # a foreign array type that refuses conversion
            raise TypeError(f"save: state[{name!r}] ({type(value).__name__}) cannot be read as "
                            f"a NumPy array: {error}") from error
        if array.dtype.hasobject:
            raise TypeError(f"save: state[{name!r}] has dtype object, which could only be "
                            "stored with pickle; store numeric arrays")
        arrays[name] = array
    return arrays


def save(state, path):
    """Write `state` (a flat dict of name -> NumPy array or Tensor, e.g. `model.state_dict()`)
    to `path` as .safetensors or .npz, by its extension, atomically."""
    path = os.fspath(path)
    write, _ = _FORMATS[_format(path, "save")]
    arrays = _as_arrays(state)
    atomic_write(path, lambda file: write(arrays, file))


def load(path):
    """Read a checkpoint written by `save` (or any .safetensors / .npz file of plain arrays):
    a dict of name -> NumPy array. A truncated, corrupt or foreign file raises CheckpointError
    naming the file and the format."""
    path = os.fspath(path)
    extension = _format(path, "load")
    _, read = _FORMATS[extension]
    if not os.path.isfile(path):
        raise FileNotFoundError(f"load: no checkpoint file {path!r}")
    try:
        return read(path)
    except (safetensors.SafetensorError, zipfile.BadZipFile, ValueError, OSError, EOFError,
            KeyError) as error:
        raise CheckpointError(f"load: {path!r} is not a valid {extension} checkpoint "
                              f"(truncated, corrupt or another format): {error}") from error
