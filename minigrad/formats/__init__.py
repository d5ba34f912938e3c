"""The two checkpoint file formats behind `mg.save` / `mg.load`, and their one error type.

Each format module has `check(array, where)` (raise TypeError before writing when the format
cannot hold the array), `write(file, arrays, structure)` and `read(path) -> (arrays, structure)`,
where `arrays` is {name: NumPy array} in file order and `structure` the JSON description of a
nested state (None for a flat dict of arrays). Readers validate every size and offset against the
file before allocating, so a damaged or hostile file is a CheckpointError, never a wrong load.
"""


class CheckpointError(ValueError):
    """A file could not be read as the checkpoint format its extension names: it is truncated,
    corrupt, or another format. The message names the file and the cause."""


def fail(path, extension, cause):
    """The CheckpointError for the file `path`, read as `extension`, because of `cause`."""
    return CheckpointError(f"load: {path!r} is not a valid {extension} checkpoint: {cause}")
