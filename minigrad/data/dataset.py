"""Datasets: anything with `len()` and `dataset[i]`; optionally whole-split arrays for fast batching."""
import numpy as np

from ..tensor import Tensor


class Dataset:
    """Base class: subclasses define `__len__` and `__getitem__(i) -> item` (a tuple of fields).

    A dataset that holds all its samples as arrays also overrides `arrays()`; DataLoader then
    builds each batch with one vectorized take per array instead of collating items one by one.
    """

    def __len__(self):
        raise NotImplementedError(f"{type(self).__name__} must define __len__")

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__")

    def arrays(self):
        """The whole dataset as a tuple of arrays whose first axis is the sample index, or None
        when the dataset is not held as arrays."""
        return None


class TensorDataset(Dataset):
    """Samples are the rows of equally long arrays: `TensorDataset(x, y)[i] == (x[i], y[i])`.

    `i` may also be a slice or an index array, giving a batch of rows in one vectorized step.
    Tensors are stored as NumPy arrays (DataLoader puts batches on the device it is asked for).
    """

    def __init__(self, *arrays):
        if not arrays:
            raise ValueError("TensorDataset: needs at least one array")
        self._arrays = tuple(a.numpy() if isinstance(a, Tensor) else np.asarray(a)
                             for a in arrays)
        lengths = [a.shape[0] if a.ndim else None for a in self._arrays]
        if None in lengths or len(set(lengths)) != 1:
            shapes = ", ".join(str(a.shape) for a in self._arrays)
            raise ValueError(f"TensorDataset: arrays must have the same length along their first "
                             f"axis, got shapes {shapes}")

    def __len__(self):
        return self._arrays[0].shape[0]

    def __getitem__(self, index):
        return tuple(a[index] for a in self._arrays)

    def arrays(self):
        return self._arrays

    def __repr__(self):
        return f"TensorDataset({', '.join(f'{a.dtype}{list(a.shape)}' for a in self._arrays)})"
