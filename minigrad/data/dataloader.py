"""DataLoader: a dataset in batches of tensors, in order or shuffled, resumable mid-epoch."""
import copy
import math
import numbers

import numpy as np

from .. import creation
from ..tensor import Tensor
from .collate import default_collate


class DataLoader:
    """Iterate over `dataset` in batches of `batch_size` samples as minigrad tensors.

    Each batch has the structure of the samples (see `default_collate`): tuple samples
    (e.g. (image, label)) give a tuple of tensors, dict samples a dict, single arrays a single
    tensor. `collate_fn(list_of_samples)` replaces `default_collate`; its result is returned as
    it is (`device` is then its business). Every sample appears exactly once per epoch; the last,
    smaller batch is dropped when `drop_last` is True.

    Fast path: without a `collate_fn`, when `dataset.arrays()` gives the whole dataset as arrays
    (MNIST, TensorDataset, Subset and ConcatDataset of those), a batch is one `np.take` per
    array, with no Python loop over samples. Yielded arrays are fresh: the next batch never
    overwrites them.

    shuffle: a new permutation each epoch (each `iter(loader)`). With `seed`, the loader owns a
    generator seeded once, so the same seed gives the same sequence of epochs; `generator` (a
    NumPy Generator, as PyTorch's `generator=`) is used as it is; without either it draws from
    minigrad's global generator (`mg.manual_seed`, `mg.set_rng_state`).
    device: where the batches are put ("cpu" or "cuda"; None is the CPU).
    sampler: an iterable of indices (e.g. `DistributedSampler`) that gives the order instead.

    Resuming: `state_dict()` records the loader's own generator, the generator state the
    current epoch's order was drawn from, and how many batches of it were handed out;
    after `load_state_dict()` the next `iter()` finishes that epoch (same order, the rest of
    its batches), and later epochs continue as they would have.
    """

    def __init__(self, dataset, batch_size=1, shuffle=False, drop_last=False, seed=None,
                 device=None, collate_fn=None, generator=None, sampler=None):
        if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) \
                or batch_size < 1:
            raise ValueError(f"DataLoader: batch_size must be a positive integer, "
                             f"got {batch_size!r}")
        if collate_fn is not None and not callable(collate_fn):
            raise TypeError(f"DataLoader: collate_fn must be callable, not "
                            f"{type(collate_fn).__name__}")
        if sampler is not None and shuffle:
            raise ValueError("DataLoader: sampler and shuffle=True exclude each other (the "
                             "sampler gives the order; DistributedSampler shuffles itself)")
        self.dataset = dataset
        self.sampler = sampler
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.device = device
        self.collate_fn = collate_fn
        if seed is not None and generator is not None:
            raise ValueError("DataLoader: give seed or generator, not both")
        if generator is not None and not isinstance(generator, np.random.Generator):
            raise TypeError(f"DataLoader: generator must be a numpy.random.Generator, not "
                            f"{type(generator).__name__}")
        self._generator = np.random.default_rng(seed) if seed is not None else generator
        self._epoch_start = None      # generator state the current epoch's order came from
        self._batches_done = 0        # batches of the current epoch handed out so far
        self._resume = False          # the next iter() finishes the recorded epoch

    def __len__(self):
        """Number of batches per epoch."""
        n = len(self.dataset) if self.sampler is None else len(self.sampler)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def __iter__(self):
        # The order is drawn here, when the epoch starts, not at the first batch.
        n = len(self.dataset)
        skip = self._batches_done if self._resume else 0
        if self.sampler is not None:
            order = np.fromiter(self.sampler, dtype=np.int64)
        elif not self.shuffle:
            order = np.arange(n)
        elif self._resume:
            order = _generator_at(self._epoch_start).permutation(n)
        else:
            generator = self._generator if self._generator is not None else creation.generator()
            self._epoch_start = copy.deepcopy(generator.bit_generator.state)
            order = generator.permutation(n)
        self._resume = False
        self._batches_done = skip
        arrays = None if self.collate_fn is not None else \
            getattr(self.dataset, "arrays", lambda: None)()
        return self._batches(order, arrays, skip)

    def _batches(self, order, arrays, skip):
        for start in range(skip * self.batch_size, len(self) * self.batch_size,
                           self.batch_size):
            indices = order[start:start + self.batch_size]
            if arrays is not None:
                batch = tuple(self._tensor(np.take(a, indices, axis=0)) for a in arrays)
            else:
                samples = [self.dataset[int(i)] for i in indices]
                batch = (self.collate_fn(samples) if self.collate_fn is not None
                         else default_collate(samples, self.device))
            self._batches_done += 1     # counted before the yield: the caller has it now
            yield batch

    def _tensor(self, array):
        return Tensor(array, dtype=array.dtype, device=self.device)

    # ------------------------------------------------------------------ resuming
    def state_dict(self):
        """{"generator": the loader's own generator state or None (it draws from the global
        one), "epoch_start": the state the current epoch's order was drawn from, or None,
        "batches_done": batches of the current epoch handed out}: plain dicts and ints."""
        own = None if self._generator is None else self._generator.bit_generator.state
        return copy.deepcopy({"generator": own, "epoch_start": self._epoch_start,
                              "batches_done": self._batches_done})

    def load_state_dict(self, state_dict):
        """Continue from `state_dict()` of a loader over the same dataset with the same
        settings: the next `iter()` gives the rest of the saved epoch."""
        own, done = state_dict["generator"], int(state_dict["batches_done"])
        if (own is None) != (self._generator is None):
            raise ValueError("DataLoader.load_state_dict: the saved loader "
                             f"{'had no' if own is None else 'had its own'} seed, this one "
                             f"{'has' if own is None else 'has none'}; make both the same way")
        if not 0 <= done <= len(self):
            raise ValueError(f"DataLoader.load_state_dict: {done} batches done, but an epoch "
                             f"has {len(self)}")
        # An epoch is under way once its order is drawn, even before its first batch.
        mid_epoch = done < len(self) and (done > 0 or state_dict["epoch_start"] is not None)
        if mid_epoch and self.shuffle and state_dict["epoch_start"] is None:
            raise ValueError("DataLoader.load_state_dict: a shuffled epoch in progress needs "
                             "'epoch_start', the state its order was drawn from")
        if own is not None:
            self._generator = _generator_at(own)
        self._epoch_start = copy.deepcopy(state_dict["epoch_start"])
        self._batches_done = done
        self._resume = mid_epoch

    def __repr__(self):
        return (f"DataLoader({self.dataset!r}, batch_size={self.batch_size}, "
                f"shuffle={self.shuffle}, drop_last={self.drop_last}, batches={len(self)})")


def _generator_at(state):
    """A NumPy generator in bit-generator `state` (as `bit_generator.state` gives it)."""
    return creation.generator_from_state(state, "DataLoader.load_state_dict")
