"""DataLoader: a dataset in batches of tensors, in order or shuffled, in worker processes or
not, resumable mid-epoch."""
import copy
import math
import numbers
import weakref

import numpy as np

from .. import random
from ..tensor import as_tensor
from . import worker
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
    `mg.Generator`, as PyTorch's `generator=`, or a NumPy Generator) is drawn from as it is;
    without either it draws from the default generator (`mg.manual_seed`, `mg.set_rng_state`).
    Each epoch then draws the workers' base seed from the same generator, whatever
    `num_workers` is, as PyTorch does, so the epochs' orders do not depend on it.
    device: where the batches are put ("cpu" or "cuda"; None is the CPU).
    sampler: an iterable of indices (e.g. `RandomSampler`, `DistributedSampler`) that gives the
    order instead.

    num_workers: batches made by that many worker processes (minigrad/data/worker.py), handed
    out in exactly the order of `num_workers=0`; `prefetch_factor` (default 2) batches per worker
    are asked for ahead; `worker_init_fn(worker_id)` runs first in each worker;
    `persistent_workers` keeps the workers from one epoch to the next; `timeout` (seconds, 0 for
    ever) bounds the wait for a batch; `multiprocessing_context` is "fork" (the default where
    the system has it, as PyTorch on Linux), "spawn" or "forkserver". A worker's exception is
    raised in the main process, naming the worker. The workers stop when the epoch ends, when
    its iterator is closed or garbage-collected (e.g. after `break`), or at an error.
    pin_memory: accepted for PyTorch's sake; a no-op (minigrad copies batches to the GPU itself).

    Resuming: `state_dict()` is the state of the loader's most recent iterator (as in
    PyTorch's stateful loaders; each iterator also has its own `state_dict()`): the loader's own
    generator as that epoch left it, the generator state the epoch's order was drawn from, the
    workers' base seed, and how many batches of it were handed out. After `load_state_dict()`
    the next `iter()` finishes that epoch (same order, the rest of its batches), and later
    epochs continue as they would have.
    """

    def __init__(self, dataset, batch_size=1, shuffle=False, drop_last=False, seed=None,
                 device=None, collate_fn=None, generator=None, sampler=None, num_workers=0,
                 worker_init_fn=None, persistent_workers=False, prefetch_factor=None,
                 pin_memory=False, timeout=0, multiprocessing_context=None):
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
        _check_workers(num_workers, persistent_workers, prefetch_factor, timeout,
                       worker_init_fn)
        self.dataset = dataset
        self.sampler = sampler
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.device = device
        self.collate_fn = collate_fn
        self.num_workers, self.worker_init_fn = num_workers, worker_init_fn
        self.persistent_workers, self.timeout = bool(persistent_workers), timeout
        self.prefetch_factor = 2 if prefetch_factor is None and num_workers else prefetch_factor
        self.pin_memory = bool(pin_memory)
        self.multiprocessing_context = multiprocessing_context or worker.default_context()
        if seed is not None and generator is not None:
            raise ValueError("DataLoader: give seed or generator, not both")
        self._generator = (np.random.default_rng(seed) if seed is not None else None
                           if generator is None else
                           random.numpy_generator(generator, "DataLoader"))
        self._progress = _Progress(self._state(self._generator), None, None)
        self._resume = None       # the progress the next iter() continues from
        self._pool = None         # persistent workers

    def __len__(self):
        """Number of batches per epoch."""
        n = len(self.dataset) if self.sampler is None else len(self.sampler)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def __iter__(self):
        # The order (and the workers' base seed) is drawn here, when the epoch starts.
        progress, self._resume = self._resume, None
        if progress is None:
            progress, order = self._new_epoch()
        else:
            order = self._order(progress.epoch_start)
        self._progress = progress
        arrays = None if self.collate_fn is not None else \
            getattr(self.dataset, "arrays", lambda: None)()
        fetch = _Fetch(self.dataset, arrays, self.collate_fn, self.batch_size, order)
        if self.num_workers == 0:
            return _Iterator(self, progress, fetch, None)
        if progress.base_seed is None:   # resumed from a state saved before base seeds
            progress.base_seed = int(random.numpy_generator(None, "DataLoader").integers(1 << 62))
        pool = self._pool if self._pool is not None and self._pool.alive else \
            worker.WorkerPool(fetch, self.num_workers, progress.base_seed, self.worker_init_fn,
                              self.multiprocessing_context)
        if self.persistent_workers and pool is not self._pool:
            self._pool = pool
            weakref.finalize(self, pool.shutdown)   # they stop with the loader
        return _Iterator(self, progress, fetch, pool)

    def _new_epoch(self):
        generator = random.numpy_generator(self._generator, "DataLoader")
        if self.shuffle and self.sampler is None:
            epoch_start = self._state(generator)
            order = generator.permutation(len(self.dataset))
        else:
            epoch_start, order = None, self._order(None)
        base_seed = int(generator.integers(1 << 62))
        return _Progress(self._state(self._generator), epoch_start, base_seed), order

    def _order(self, epoch_start):
        if self.sampler is not None:
            return np.fromiter(self.sampler, dtype=np.int64)
        if epoch_start is None:
            return np.arange(len(self.dataset))
        return _generator_at(epoch_start).permutation(len(self.dataset))

    @staticmethod
    def _state(generator):
        return None if generator is None else copy.deepcopy(generator.bit_generator.state)

    def _deliver(self, batch):
        """A batch from a worker as Tensors on the device (a collate_fn's stay on the CPU)."""
        return worker.to_tensors(batch, self.device if self.collate_fn is None else None)

    # ------------------------------------------------------------------ resuming
    def state_dict(self):
        """The state of the most recent iterator (`_Iterator.state_dict`), or of the epoch
        `load_state_dict` set up: {"generator": the loader's own generator state or None (it
        draws from the global one), "epoch_start": the state the epoch's order was drawn from,
        or None, "base_seed": the workers' base seed, "batches_done": batches of the epoch
        handed out}: plain dicts and ints."""
        return self._progress.state_dict()

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
        epoch_start, base_seed = state_dict["epoch_start"], state_dict.get("base_seed")
        mid_epoch = done < len(self) and (done > 0 or epoch_start is not None
                                          or base_seed is not None)
        if mid_epoch and self.shuffle and epoch_start is None:
            raise ValueError("DataLoader.load_state_dict: a shuffled epoch in progress needs "
                             "'epoch_start', the state its order was drawn from")
        if own is not None:
            self._generator = _generator_at(own)
        progress = _Progress(copy.deepcopy(own), copy.deepcopy(epoch_start), base_seed, done)
        self._progress, self._resume = progress, progress if mid_epoch else None

    def __repr__(self):
        return (f"DataLoader({self.dataset!r}, batch_size={self.batch_size}, "
                f"shuffle={self.shuffle}, drop_last={self.drop_last}, batches={len(self)}"
                f"{f', num_workers={self.num_workers}' if self.num_workers else ''})")


def _check_workers(num_workers, persistent_workers, prefetch_factor, timeout, worker_init_fn):
    """PyTorch's checks of the worker settings, with its error types."""
    if isinstance(num_workers, bool) or not isinstance(num_workers, numbers.Integral) \
            or num_workers < 0:
        raise ValueError(f"DataLoader: num_workers option should be a non-negative integer; "
                         f"use num_workers=0 to disable multiprocessing (got {num_workers!r})")
    if persistent_workers and num_workers == 0:
        raise ValueError("DataLoader: persistent_workers option needs num_workers > 0")
    if prefetch_factor is not None and num_workers == 0:
        raise ValueError("DataLoader: prefetch_factor option could only be specified in "
                         "multiprocessing: let num_workers > 0 to enable multiprocessing, "
                         "otherwise set prefetch_factor to None")
    if prefetch_factor is not None and (isinstance(prefetch_factor, bool) or not isinstance(
            prefetch_factor, numbers.Integral) or prefetch_factor < 1):
        raise ValueError(f"DataLoader: prefetch_factor must be a positive integer, got "
                         f"{prefetch_factor!r}")
    if not isinstance(timeout, numbers.Real) or timeout < 0:
        raise ValueError(f"DataLoader: timeout option should be non-negative, got {timeout!r}")
    if worker_init_fn is not None and not callable(worker_init_fn):
        raise TypeError(f"DataLoader: worker_init_fn must be callable, not "
                        f"{type(worker_init_fn).__name__}")


class _Progress:
    """How far one epoch has got: what `state_dict` records (see `DataLoader.state_dict`)."""

    def __init__(self, generator, epoch_start, base_seed, batches_done=0):
        self.generator, self.epoch_start, self.base_seed = generator, epoch_start, base_seed
        self.batches_done = batches_done

    def state_dict(self):
        return copy.deepcopy({"generator": self.generator, "epoch_start": self.epoch_start,
                              "base_seed": self.base_seed, "batches_done": self.batches_done})


class _Fetch:
    """Batch k of an epoch's `order`, made from the dataset: one `np.take` per array on the
    fast path, else the samples through the collate function. Sent to the workers."""

    def __init__(self, dataset, arrays, collate_fn, batch_size, order):
        self.dataset, self.arrays, self.collate_fn = dataset, arrays, collate_fn
        self.batch_size, self.order = batch_size, order

    def indices(self, k):
        return self.order[k * self.batch_size:(k + 1) * self.batch_size]

    def __call__(self, indices, device=None):
        if self.arrays is not None:
            return tuple(as_tensor(a, device=device)
                         for a in (np.take(a, indices, axis=0) for a in self.arrays))
        samples = [self.dataset[int(i)] for i in indices]
        return (self.collate_fn(samples) if self.collate_fn is not None
                else default_collate(samples, device))


class _Iterator:
    """One epoch of a DataLoader: its batches in order, from the workers' pool or made here,
    and its own progress (`state_dict`)."""

    def __init__(self, loader, progress, fetch, pool):
        self._loader, self._progress, self._fetch, self._pool = loader, progress, fetch, pool
        self._next = self._asked = progress.batches_done
        self._total = len(loader)
        self._ready = {}   # batch index -> batch (or a worker's Failure) received early
        if pool is not None:
            pool.epoch += 1
            self._epoch = pool.epoch
            self._finalizer = weakref.finalize(self, _release, pool, loader.persistent_workers)
            for _ in range(loader.prefetch_factor * loader.num_workers):
                self._ask()

    def __iter__(self):
        return self

    def __next__(self):
        if self._next >= self._total:
            self.close()
            raise StopIteration
        if self._pool is None:
            batch = self._fetch(self._fetch.indices(self._next), self._loader.device)
        else:
            batch = self._from_workers()
        self._next += 1
        self._progress.batches_done = self._next   # counted now: the caller has it
        return batch

    def _ask(self):
        if self._asked < self._total:
            pool, k = self._pool, self._asked
            pool.ask(k % len(pool.workers), self._epoch, k, self._fetch.indices(k))
            self._asked += 1

    def _from_workers(self):
        if self._pool.epoch != self._epoch or not self._pool.alive:
            raise RuntimeError("DataLoader: this iterator's workers were stopped or now serve "
                               "a newer iter(loader) (persistent_workers); make a new iterator")
        while self._next not in self._ready:
            epoch, k, batch = self._pool.receive(self._loader.timeout, self._next)
            if isinstance(batch, worker.Failure) and epoch is None:   # worker_init_fn failed
                self.close()
                batch.reraise()
            if epoch == self._epoch:
                self._ready[k] = batch
        batch = self._ready.pop(self._next)
        if isinstance(batch, worker.Failure):
            self.close()
            batch.reraise()
        self._ask()
        return self._loader._deliver(batch)

    def state_dict(self):
        """This epoch's progress, as `DataLoader.state_dict` describes it."""
        return self._progress.state_dict()

    def close(self):
        """Stop this epoch's workers (kept, idle, with persistent_workers)."""
        self._next = self._total
        if self._pool is not None:
            self._finalizer()


def _release(pool, persistent):
    if not persistent:
        pool.shutdown()


def _generator_at(state):
    """A NumPy generator in bit-generator `state` (as `bit_generator.state` gives it)."""
    return random.generator_from_state(state, "DataLoader.load_state_dict")
