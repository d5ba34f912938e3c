"""Samplers: iterables of a dataset's indices that give a DataLoader its order, as in PyTorch.

RandomSampler: a permutation each epoch (or `num_samples` indices drawn with replacement),
from `generator` (a `mg.Generator`; default: the default generator).

DistributedSampler: each rank's share of a dataset's indices.

Every rank gets `num_samples` indices and together they cover the dataset: the (shuffled) index
list is padded by repeating its start up to a multiple of `num_replicas` (or, with `drop_last`,
cut down to one), then rank r takes every num_replicas-th index from position r. The shuffle is
drawn from `seed + epoch` (call `set_epoch(epoch)` each epoch), identically on every rank.
"""
import math
import numbers

import numpy as np

from .. import random


class RandomSampler:
    """Indices of `data_source` in a random order; with `replacement`, `num_samples` (default
    len(data_source)) indices drawn independently."""

    def __init__(self, data_source, replacement=False, num_samples=None, generator=None):
        if num_samples is not None and (isinstance(num_samples, bool) or not isinstance(
                num_samples, numbers.Integral) or num_samples <= 0):
            raise ValueError(f"RandomSampler: num_samples should be a positive integer value, "
                             f"but got num_samples={num_samples!r}")
        self.data_source, self.replacement, self.generator = data_source, replacement, generator
        self._num_samples = num_samples

    @property
    def num_samples(self):
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        rng, n = random.numpy_generator(self.generator, "RandomSampler"), len(self.data_source)
        if self.replacement:
            return iter(rng.integers(0, n, self.num_samples).tolist())
        rounds = -(-self.num_samples // n) if n else 0   # num_samples > n: whole permutations
        order = np.concatenate([rng.permutation(n) for _ in range(rounds)] or [np.arange(0)])
        return iter(order[:self.num_samples].tolist())

    def __len__(self):
        return self.num_samples


class DistributedSampler:
    """Indices of `dataset` for one rank; `num_replicas` and `rank` default to the process
    group's world size and rank."""

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0,
                 drop_last=False):
        if num_replicas is None or rank is None:
            from .. import distributed

            num_replicas = distributed.get_world_size() if num_replicas is None else num_replicas
            rank = distributed.get_rank() if rank is None else rank
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ValueError(f"DistributedSampler: rank {rank} is not in [0, {num_replicas - 1}] "
                             f"(num_replicas={num_replicas})")
        self.dataset, self.num_replicas, self.rank = dataset, num_replicas, rank
        self.shuffle, self.seed, self.drop_last, self.epoch = shuffle, seed, drop_last, 0
        n = len(dataset)
        if drop_last and n % num_replicas:
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas

    def __iter__(self):
        n = len(self.dataset)
        if self.shuffle:
            indices = np.random.default_rng(self.seed + self.epoch).permutation(n)
        else:
            indices = np.arange(n)
        if self.drop_last:
            indices = indices[:self.total_size]
        elif self.total_size > n:   # pad with the start of the list, repeated as needed
            indices = np.resize(indices, self.total_size)
        return iter(indices[self.rank:self.total_size:self.num_replicas].tolist())

    def __len__(self):
        return self.num_samples

    def set_epoch(self, epoch):
        """The epoch whose shuffle to draw (the same on every rank)."""
        self.epoch = epoch
