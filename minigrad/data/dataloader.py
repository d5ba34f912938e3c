"""DataLoader: a dataset in batches of tensors, in order or shuffled (reproducibly with a seed)."""
import math
import numbers

import numpy as np

from .. import creation
from ..tensor import Tensor


class DataLoader:
    """Iterate over `dataset` in batches of `batch_size` samples as minigrad tensors.

    Each batch is a tuple with one tensor per field of the items (e.g. (images float32,
    labels int64)), or a single tensor when items are single arrays. Every sample appears exactly
    once per epoch; the last, smaller batch is dropped when `drop_last` is True.

    Fast path: when `dataset.arrays()` gives the whole dataset as arrays (MNIST, TensorDataset),
    a batch is one `np.take` per array, with no Python loop over samples. Other datasets are
    collated item by item. Yielded arrays are fresh: the next batch never overwrites them.

    shuffle: a new permutation each epoch (each `iter(loader)`). With `seed`, the loader owns a
    generator seeded once, so the same seed gives the same sequence of epochs; without one it
    draws from minigrad's global generator (`mg.manual_seed`).
    device: where the batches are put ("cpu" or "cuda"; None is the CPU).
    sampler: an iterable of indices (e.g. `DistributedSampler`) that gives the order instead.
    """

    def __init__(self, dataset, batch_size=1, shuffle=False, drop_last=False, seed=None,
                 device=None, sampler=None):
        if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) \
                or batch_size < 1:
            raise ValueError(f"DataLoader: batch_size must be a positive integer, "
                             f"got {batch_size!r}")
        if sampler is not None and shuffle:
            raise ValueError("DataLoader: sampler and shuffle=True exclude each other (the "
                             "sampler gives the order; DistributedSampler shuffles itself)")
        self.dataset = dataset
        self.sampler = sampler
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.device = device
        self._generator = np.random.default_rng(seed) if seed is not None else None

    def __len__(self):
        """Number of batches per epoch."""
        n = len(self.dataset) if self.sampler is None else len(self.sampler)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def __iter__(self):
        # The order is drawn here, when the epoch starts, not at the first batch.
        n = len(self.dataset)
        if self.sampler is not None:
            order = np.fromiter(self.sampler, dtype=np.int64)
        elif self.shuffle:
            generator = self._generator if self._generator is not None else creation.generator()
            order = generator.permutation(n)
        else:
            order = np.arange(n)
        arrays = getattr(self.dataset, "arrays", lambda: None)()
        return self._batches(order, arrays)

    def _batches(self, order, arrays):
        for start in range(0, len(self) * self.batch_size, self.batch_size):
            indices = order[start:start + self.batch_size]
            if arrays is not None:
                yield tuple(self._tensor(np.take(a, indices, axis=0)) for a in arrays)
            else:
                yield self._collate([self.dataset[int(i)] for i in indices])

    def _collate(self, items):
        """Stack a list of items field by field: tuples of fields -> tuple of tensors."""
        if isinstance(items[0], (tuple, list)):
            return tuple(self._tensor(_stack(field)) for field in zip(*items))
        return self._tensor(_stack(items))

    def _tensor(self, array):
        return Tensor(array, dtype=array.dtype, device=self.device)

    def __repr__(self):
        return (f"DataLoader({self.dataset!r}, batch_size={self.batch_size}, "
                f"shuffle={self.shuffle}, drop_last={self.drop_last}, batches={len(self)})")


def _stack(values):
    """One array from per-sample values: Python ints become int64, Python floats float32 (as in
    `mg.tensor`), arrays and tensors keep their dtype."""
    first = values[0]
    if isinstance(first, Tensor):
        return np.stack([v.numpy() for v in values])
    if isinstance(first, numbers.Integral) and not isinstance(first, np.generic):
        return np.asarray(values, dtype=np.int64)
    if isinstance(first, numbers.Real) and not isinstance(first, np.generic):
        return np.asarray(values, dtype=np.float32)
    return np.stack(values)
