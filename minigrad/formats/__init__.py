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
is read (weights_pickle.py), each array `loaded(array)`. Readers
validate every size and offset against the file before allocating, so a damaged or hostile file
is a CheckpointError, never a wrong load.
"""


class CheckpointError(ValueError):
    """A file could not be read as the checkpoint format its extension names: it is truncated,
    corrupt, or another format. The message names the file and the cause."""


def fail(path, extension, cause):
    """The CheckpointError for the file `path`, read as `extension`, because of `cause`."""
    return CheckpointError(f"load: {path!r} is not a valid {extension} checkpoint: {cause}")


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
