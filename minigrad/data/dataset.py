"""Datasets: anything with `len()` and `dataset[i]`; optionally whole-split arrays for fast
batching. Subsets, concatenations and random splits of them."""
import math
import numbers

import numpy as np

from .. import random
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
        self._arrays = tuple(a.numpy(force=True) if isinstance(a, Tensor) else np.asarray(a)
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


class Subset(Dataset):
    """The samples of `dataset` at `indices`, in that order: `Subset(d, idx)[i] == d[idx[i]]`.

    Over a dataset held as arrays, `arrays()` is the selected rows, copied out once on first use
    (so the DataLoader keeps its vectorized path)."""

    def __init__(self, dataset, indices):
        self.dataset = dataset
        self.indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        n = len(dataset)
        if self.indices.size and not (-n <= self.indices.min() and self.indices.max() < n):
            raise IndexError(f"Subset: indices must be in [-{n}, {n}) for a dataset of {n} "
                             f"samples, got {self.indices.min()}..{self.indices.max()}")
        self._arrays = None

    def __len__(self):
        return self.indices.shape[0]

    def __getitem__(self, index):
        picked = self.indices[index]      # an index array or slice passes on as an index array
        return self.dataset[int(picked) if picked.ndim == 0 else picked]

    def arrays(self):
        if self._arrays is None:
            whole = getattr(self.dataset, "arrays", lambda: None)()
            if whole is None:
                return None
            self._arrays = tuple(np.take(a, self.indices, axis=0) for a in whole)
        return self._arrays

    def __repr__(self):
        return f"Subset({self.dataset!r}, {len(self)} samples)"


class ConcatDataset(Dataset):
    """Datasets one after another: indices 0..len(a)-1 are `a`'s, the next ones `b`'s, ...

    When every part is held as arrays with the same fields, `arrays()` is their concatenation,
    made once on first use."""

    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("ConcatDataset: needs at least one dataset")
        self.cumulative_sizes = np.cumsum([len(d) for d in self.datasets]).tolist()
        self._arrays = None

    def __len__(self):
        return self.cumulative_sizes[-1]

    def __getitem__(self, index):
        n = len(self)
        if not -n <= index < n:
            raise IndexError(f"ConcatDataset: index {index} is out of range for {n} samples")
        index = index + n if index < 0 else index
        part = int(np.searchsorted(self.cumulative_sizes, index, side="right"))
        offset = self.cumulative_sizes[part - 1] if part else 0
        return self.datasets[part][index - offset]

    def arrays(self):
        if self._arrays is None:
            parts = [getattr(d, "arrays", lambda: None)() for d in self.datasets]
            if any(p is None for p in parts) or len({len(p) for p in parts}) != 1 or any(
                    a.shape[1:] != b.shape[1:] or a.dtype != b.dtype
                    for p in parts for a, b in zip(p, parts[0], strict=True)):
                return None
            self._arrays = tuple(np.concatenate(fields) for fields in zip(*parts, strict=True))
        return self._arrays

    def __repr__(self):
        return f"ConcatDataset({len(self.datasets)} datasets, {len(self)} samples)"


def random_split(dataset, lengths, generator=None):
    """Split `dataset` into non-overlapping random `Subset`s of the given `lengths`, or of the
    given fractions of it (summing to 1: each gets floor(fraction * n), and the samples left
    over go one each to the first subsets, as in PyTorch). The permutation comes from
    `generator` (a `mg.Generator`, or a NumPy Generator), else from the default one."""
    n = len(dataset)
    lengths = list(lengths)
    if lengths and all(isinstance(x, float) for x in lengths) and math.isclose(sum(lengths), 1) \
            and sum(lengths) <= 1:
        if any(not 0 <= x <= 1 for x in lengths):
            raise ValueError(f"random_split: fractions must be in [0, 1], got {lengths}")
        counts = [int(math.floor(n * x)) for x in lengths]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        lengths = counts
    if any(isinstance(x, bool) or not isinstance(x, numbers.Integral) or x < 0
           for x in lengths) or sum(lengths) != n:
        raise ValueError(f"random_split: lengths must be non-negative integers summing to the "
                         f"dataset's {n} samples, or fractions summing to 1; got {lengths}")
    order = random.numpy_generator(generator, "random_split").permutation(n)
    offsets = np.cumsum([0] + lengths)
    return [Subset(dataset, order[start:stop]) for start, stop in zip(offsets[:-1], offsets[1:],
                                                                    strict=True)]
