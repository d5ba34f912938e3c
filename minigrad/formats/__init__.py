"""File formats. Caffe's .caffemodel and .prototxt (caffe.py, caffe_schema.py) are read and
written for `nn.caffe`, which maps them to models. The two checkpoint formats behind `mg.save` /
`mg.load` (safetensors.py, npz.py, pytorch.py) share the one error type below; each checkpoint
module has `check(array, where)` (raise TypeError before writing when the format cannot hold the
array), `write(file, arrays, structure, flat)` and `read(path, max_bytes) -> (arrays,
structure)`, where `arrays` is {name: NumPy array} in file order (together at most `max_bytes`
bytes) and `structure` describes the saved object (serialization.py's nodes, which refer to the
arrays by name): written as a dict, read as JSON text, None for a flat dict of arrays (`flat`
on writing: the structure is a dict of every array under its own name). pytorch.py reads with
`load_state(path, max_bytes, loaded, values)` instead: its pickle is the structure, built as it
is read (weights_pickle.py), each array `loaded(array)`. Readers charge what they build against
`max_bytes` (Budget) and
validate every size and offset against the file before allocating, so a damaged or hostile file
is a CheckpointError, never a wrong load.
"""
import os


class CheckpointError(ValueError):
    """A file could not be read as the checkpoint format its extension names: it is truncated,
    corrupt, or another format. The message names the file and the cause."""


def fail(path, extension, cause):
    """The CheckpointError for the file `path`, read as `extension`, because of `cause`."""
    return CheckpointError(f"load: {path!r} is not a valid {extension} checkpoint: {cause}")


DEFAULT_EXPANSION, DEFAULT_ALLOWANCE = 8, 64 << 20   # max_bytes by default: 8x the file + 64 MiB


def default_max_bytes(path):
    """What a reader may build from the file `path` unless told otherwise: 8 times its size plus
    64 MiB (mg.load, the Caffe readers)."""
    return DEFAULT_EXPANSION * os.path.getsize(path) + DEFAULT_ALLOWANCE


class Budget:
    """The bytes a reader may still build from a file: `charge(nbytes, what)` takes from them
    and raises `refuse(message)` once they are spent, so a small file describing many tiny
    objects is refused instead of taking many times its size."""

    def __init__(self, max_bytes, refuse):
        self.max_bytes, self.left, self.refuse = max_bytes, max_bytes, refuse

    def charge(self, nbytes, what):
        self.left -= nbytes
        if self.left < 0:
            raise self.refuse(f"its {what} would take more memory than max_bytes="
                              f"{self.max_bytes} (by default 8 times the file's size + 64 MiB): "
                              "pass a larger max_bytes to read a file you trust")


MAX_DIMS = 64                  # NumPy's limit on an array's number of dimensions
_MAX_ELEMENTS = (1 << 63) - 1  # an array's element count must fit in int64 (NumPy's intp)


def check_shape(path, extension, name, shape):
    """A CheckpointError unless `shape` (non-negative ints) is one NumPy can hold: at most 64
    dimensions, whose product (zeros aside) fits in int64."""
    size = 1
    for dim in shape:
        size *= max(dim, 1)
    if len(shape) > MAX_DIMS or size > _MAX_ELEMENTS:
        raise fail(path, extension, f"array {name!r:.100}: shape {str(shape):.100} has "
                                    f"{len(shape)} dimensions and {size:.3g} elements; arrays "
                                    f"hold at most {MAX_DIMS} dimensions and 2**63 - 1 elements")


def unique_pairs(path, extension):
    """A json object_pairs_hook that refuses an object with a key twice (JSON allows it, and
    readers then disagree on which value counts: the reference safetensors reader refuses it)."""
    def pairs_to_dict(pairs):
        result = dict(pairs)
        if len(result) != len(pairs):
            seen = set()
            twice = next(key for key, _ in pairs if key in seen or seen.add(key))
            raise fail(path, extension, f"the key {twice!r:.100} appears twice in one JSON "
                                        "object")
        return result
    return pairs_to_dict
