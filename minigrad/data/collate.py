"""`default_collate`: a list of samples -> one batch, field by field, as PyTorch's does."""
import numbers
from collections.abc import Mapping, Sequence

import numpy as np

from ..tensor import Tensor, as_tensor


def default_collate(samples, device=None):
    """Merge a list of samples into a batch, keeping the samples' structure:

        tensors, NumPy arrays and NumPy scalars -> one tensor, stacked along a new first axis
        Python ints / floats / bools            -> an int64 / float32 / bool tensor
        strings (and bytes)                      -> the list of them
        dicts                                    -> a dict of batches, key by key
        tuples and lists                         -> a tuple (list) of batches, field by field

    As in PyTorch, except that Python floats become float32 (minigrad's default float, as in
    `mg.tensor`) where PyTorch makes float64, and tuples stay tuples. Tensors go to `device`.
    """
    if not samples:
        raise ValueError("default_collate: got no samples")
    first = samples[0]
    if isinstance(first, (str, bytes)):
        return list(samples)
    if isinstance(first, Mapping):
        missing = [i for i, s in enumerate(samples) if not isinstance(s, Mapping)
                   or s.keys() != first.keys()]
        if missing:
            raise ValueError(f"default_collate: sample {missing[0]} does not have the keys "
                             f"{sorted(first)} of sample 0")
        return {key: default_collate([s[key] for s in samples], device) for key in first}
    if isinstance(first, Sequence) and not isinstance(first, np.ndarray):
        if any(len(s) != len(first) for s in samples):
            raise ValueError("default_collate: the samples have different numbers of fields: "
                             f"{sorted({len(s) for s in samples})}")
        fields = [default_collate(list(field), device) for field in zip(*samples, strict=True)]
        return type(first)(fields) if isinstance(first, (tuple, list)) else fields
    array = _stack(samples)
    return as_tensor(array, device=device)


def _stack(values):
    """One array from per-sample values: tensors and arrays of one shape, or Python numbers
    (a batch with any float is float32, else with any int int64, else bool)."""
    first = values[0]
    if isinstance(first, (Tensor, np.ndarray, np.generic)):
        shapes = {tuple(getattr(v, "shape", ())) for v in values}
        if len(shapes) > 1:
            raise ValueError(f"default_collate: cannot stack samples of different shapes "
                             f"{sorted(shapes)}")
        return np.stack([v.numpy(force=True) if isinstance(v, Tensor) else v for v in values])
    for kind, dtype in ((bool, np.bool_), (numbers.Integral, np.int64),
                        (numbers.Real, np.float32)):
        if all(isinstance(v, kind) for v in values):
            return np.asarray(values, dtype=dtype)
    raise TypeError(f"default_collate: cannot batch samples of types "
                    f"{sorted({type(v).__name__ for v in values})}; expected tensors, NumPy "
                    "arrays, numbers, strings, or dicts, tuples and lists of them (or pass "
                    "collate_fn=)")
