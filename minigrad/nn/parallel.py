"""DistributedDataParallel: the same model on every rank, each rank on its own part of the
batch, gradients averaged across ranks after every backward, so every rank takes the same step.

At construction the parameters and buffers of rank 0 are broadcast to every rank (after checking
that all ranks hold the same names and shapes). The averaging runs by itself at the end of each
`backward()` (the engine calls `minigrad.hooks.register_backward_end_hook`'s hooks there): the
gradients are laid end to end in buckets of up to `bucket_cap_mb` megabytes per dtype, and each
bucket is one all_reduce, so LeNet sends one message per step, not one per parameter. A
parameter that got no gradient on a rank contributes zeros, so no rank waits for a message that
never comes; after the reduction every parameter has a `.grad`. `no_sync()` skips the averaging
(gradient accumulation: the next backward outside it averages everything accumulated). With
`broadcast_buffers` (the default, as in PyTorch) each training forward first copies rank 0's
buffers to every rank. Broadcasts carry bytes, so buffers of every dtype (float statistics,
int64 counters) go in one message.

Faults: each step checks, locally and without a message, that the parameters and buffers still
have the shapes and dtypes the buckets were laid out for (an error naming the tensor otherwise),
and deleting the wrapper tells the other ranks, so a rank that leaves the training loop early
ends the job with its name instead of a hang. `join()` is PyTorch's context manager for uneven
inputs: inside it every training forward starts with one small all_gather of each rank's state
(active, or out of inputs), and a rank that has run out stands in for the others' collectives
with zeros until every rank has.
"""
import contextlib
import itertools
import weakref

import numpy

from .. import autograd, hooks, tracing
from ..distributed import group
from ..tensor import from_data
from ..version import bump_version
from .module import Module
from .syncbatchnorm import SyncBatchNorm

_wrappers = itertools.count()   # construction is collective: the n-th wrapper is n on every rank
ACTIVE, SYNC, BUFFERS = 1, 2, 4  # a rank's state in a join() step: 0 once it ran out of inputs


class _Bucket:
    """Tensors laid end to end in one host array: one message carries them all. Of one dtype
    (for sums), or `raw`: their bytes, whatever their dtypes (for copies: broadcasts)."""

    def __init__(self, tensors, extra=0, raw=False):
        self.tensors, self.raw = tensors, raw
        sizes = [t.array.nbytes if raw else t.numel() for t in tensors]
        self.stops = numpy.cumsum(sizes).tolist()
        dtype = numpy.uint8 if raw else tensors[0].dtype
        self.flat = numpy.empty(self.stops[-1] + extra, dtype)   # `extra` slots at the end

    def pack(self, arrays):
        start = 0
        for array, stop in zip(arrays, self.stops):
            if array is None:
                self.flat[start:stop] = 0
            else:
                values = self.tensors[0].backend.to_numpy(array).reshape(-1)
                self.flat[start:stop] = values.view(numpy.uint8) if self.raw else values
            start = stop
        return self.flat

    def unpacked(self):
        """(tensor, its values in the flat array, on the tensor's device), for each tensor."""
        start = 0
        for tensor, stop in zip(self.tensors, self.stops):
            values = self.flat[start:stop]
            if self.raw:
                values = values.view(tensor.array.dtype)
            yield tensor, tensor.backend.asarray(values.reshape(tensor.shape))
            start = stop


def _buckets(tensors, cap_bytes, extra=0, raw=False):
    """Buckets of tensors grouped by device (and dtype, unless `raw`), each up to `cap_bytes`
    (one tensor larger than that is a bucket of its own), in the order given; the last with
    `extra` more slots."""
    groups = {}
    for t in tensors:
        groups.setdefault((t.device,) if raw else (str(t.dtype), t.device), []).append(t)
    buckets = []
    for members in groups.values():
        current, size = [], 0
        for t in members:
            if current and size + t.array.nbytes > cap_bytes:
                buckets.append(_Bucket(current, raw=raw))
                current, size = [], 0
            current.append(t)
            size += t.array.nbytes
        buckets.append(_Bucket(current, raw=raw))
    if extra:
        buckets[-1] = _Bucket(buckets[-1].tensors, extra, raw)
    return buckets


class DistributedDataParallel(Module):
    """Wrap `module` for data-parallel training over the process group; see the module
    docstring. `.module` is the wrapped model and `state_dict()` has its keys."""

    def __init__(self, module, broadcast_buffers=True, bucket_cap_mb=25):
        super().__init__()
        group.communicator()
        self.module = module
        self.broadcast_buffers = broadcast_buffers
        self._sync, self._join, self._owner = True, None, next(_wrappers)
        named = list(module.named_parameters()) + list(module.named_buffers())
        _check_same_state(named)
        self._layout = [(name, t, t.shape, t.dtype) for name, t in named]
        cap = int(bucket_cap_mb * 2 ** 20)
        self._state_buckets = _buckets([t for _, t in named], cap, raw=True)
        for bucket in self._state_buckets:   # rank 0's state everywhere
            _broadcast(bucket)
        params = [p for _, p in module.named_parameters() if p.requires_grad]
        self._params = {id(p) for p in params}
        self._grad_buckets = _buckets(params[::-1], cap, extra=1) if params else []
        self._buffer_buckets = _buckets([b for _, b in module.named_buffers()], cap, raw=True) \
            if list(module.named_buffers()) else []
        owner = weakref.ref(self)   # the engine's hook must not keep this wrapper alive

        def after_backward(leaves):
            if owner() is not None:
                owner()._average_gradients(leaves)
        weakref.finalize(self, hooks.register_backward_end_hook(after_backward).remove)
        # a rank that drops its wrapper early is named to peers waiting in the wrapper's messages
        weakref.finalize(self, group.announce_departure, "deleted its DistributedDataParallel",
                         self._owner).atexit = False

    def forward(self, *args, **kwargs):
        self._check_layout()
        training = self.module.training
        src = 0
        if self._join is not None:
            flags = self._join_step(ACTIVE | SYNC * (training and self._sync and
                                                     autograd.is_grad_enabled())
                                    | BUFFERS * (training and self.broadcast_buffers))
            src = int(numpy.flatnonzero(flags)[0])   # the first rank with inputs
        # steps of a program mg.compile captures: a replay counts and broadcasts again
        if training and self._sync and autograd.is_grad_enabled():
            tracing.run(_next_step)
        if self.broadcast_buffers and training:
            for bucket in self._buffer_buckets:
                tracing.run(_broadcast, bucket, src, self._owner)
        return self.module(*args, **kwargs)

    def _average_gradients(self, leaves):
        """After a backward that reached this model's parameters: average their gradients
        (inside `join()`, over the initial world or over the ranks with inputs)."""
        if not self._sync or not any(id(leaf) in self._params for leaf in leaves):
            return
        self._check_layout()
        divisor = group.get_world_size()
        if self._join is not None and not self._join["divide_by_initial_world_size"]:
            divisor = int((self._join["flags"] > 0).sum())
        for bucket in self._grad_buckets:
            bucket.pack([None if p.grad is None else p.grad.array for p in bucket.tensors])
            self._sum(bucket)
            bucket.flat /= divisor
            for param, values in bucket.unpacked():
                if param.grad is None:
                    param.grad = from_data(values, copy=True)
                else:
                    param.grad.array[...] = values
                    bump_version(param.grad)

    def _sum(self, bucket):
        """Sum a gradient bucket over the ranks. The last bucket carries one more number, this
        rank's step modulo M (the largest power of two for which N ranks' sum is exact in the
        bucket's dtype): the sum is N times it only if every rank is at the same step; otherwise
        some rank sees that (not every value equals the mean) and ends the job, naming every
        rank's step: an error the user could catch would leave the ranks out of step for good."""
        last, world = bucket is self._grad_buckets[-1], group.get_world_size()
        modulus = 2 ** max(0, numpy.finfo(bucket.flat.dtype).nmant + 1 - (world - 1).bit_length())
        step = group.where["step"] % modulus
        if last:
            bucket.flat[-1] = step
        group.allreduce_array(bucket.flat, "sum", self._owner)
        if last and bucket.flat[-1] != world * step:
            group.out_of_step(
                f"DistributedDataParallel: rank {group.get_rank()} is at step "
                f"{group.where['step']}, but the {world} ranks' steps (mod {modulus}) add up to "
                f"{bucket.flat[-1]:g}, not {world * step}: a rank skipped or repeated a step (a "
                "swallowed exception, or a forward with gradients on some ranks only)")

    def _check_layout(self):
        """The buckets were laid out, alike on every rank, for the shapes and dtypes at
        construction: a tensor changed since (e.g. by `p.data = ...`) is an error naming it."""
        for name, tensor, shape, dtype in self._layout:
            if tensor.shape != shape or tensor.dtype != dtype:
                raise ValueError(
                    f"DistributedDataParallel: {name!r} is now {tensor.dtype} of shape "
                    f"{tensor.shape} on rank {group.get_rank()}, but was {dtype} of shape {shape} "
                    "when the model was wrapped (every rank's messages are laid out for that); "
                    "change the model before wrapping it, alike on every rank")

    @contextlib.contextmanager
    def join(self, divide_by_initial_world_size=True, enable=True,
             throw_on_early_termination=False):
        """Uneven inputs, as PyTorch's `DistributedDataParallel.join`: run the training loop
        inside this block. A rank that leaves it (out of inputs) stands in for the other ranks'
        steps, sending zeros, until every rank has left; then every rank takes the parameters and
        buffers of the last rank that had inputs. Gradients are divided by the initial world size
        (every sample weighs the same) or, with `divide_by_initial_world_size=False`, by the
        number of ranks that still have inputs. `throw_on_early_termination=True`: every rank
        raises as soon as one ran out (needed when the model communicates in its forward:
        SyncBatchNorm)."""
        if not enable:
            yield
            return
        if not throw_on_early_termination and any(isinstance(m, SyncBatchNorm)
                                                  for m in self.module.modules()):
            raise ValueError(
                "DistributedDataParallel.join: the model has SyncBatchNorm layers, whose forward "
                "communicates, so a rank out of inputs cannot stand in for them; pass "
                "throw_on_early_termination=True (as PyTorch requires) or give every rank as "
                "many batches (DistributedSampler(..., drop_last=True))")
        self._join = {"divide_by_initial_world_size": divide_by_initial_world_size,
                      "throw": throw_on_early_termination, "flags": None, "last": None}
        try:
            yield
            self._stand_in()
        finally:
            self._join = None

    def _join_step(self, state):
        """One all_gather of every rank's state (ACTIVE | SYNC | BUFFERS, or 0 when out of
        inputs) with the step, which every rank's must equal; returns the states."""
        flags = group.allgather_array(numpy.array([state], numpy.int64), owner=self._owner,
                                      check=("DistributedDataParallel.join",
                                             f"step {group.where['step']}"))[:, 0]
        self._join["flags"] = flags
        if flags.any():
            self._join["last"] = flags
        if self._join["throw"] and not flags.all():
            out = ", ".join(str(r) for r in numpy.flatnonzero(flags == 0))
            raise RuntimeError(f"DistributedDataParallel.join: rank(s) {out} ran out of inputs "
                               "(throw_on_early_termination=True)")
        return flags

    def _stand_in(self):
        """Out of inputs: join every step of the ranks that still have some (zeros for the
        gradients), then take the state of the last of them."""
        while (flags := self._join_step(0)).any():
            src = int(numpy.flatnonzero(flags)[0])
            if flags[src] & BUFFERS:
                for bucket in self._buffer_buckets:
                    _broadcast(bucket, src, self._owner)
            if flags[src] & SYNC:
                group.where["step"] += 1
                for bucket in self._grad_buckets:
                    bucket.flat[...] = 0
                    self._sum(bucket)
        if self._join["last"] is not None:
            last = int(numpy.flatnonzero(self._join["last"])[-1])
            for bucket in self._state_buckets:
                _broadcast(bucket, last, self._owner)

    @contextlib.contextmanager
    def no_sync(self):
        """Backward inside this block leaves gradients local (they accumulate); the first
        backward after it averages the accumulated gradients."""
        previous, self._sync = self._sync, False
        try:
            yield
        finally:
            self._sync = previous

    def state_dict(self):
        return self.module.state_dict()

    def load_state_dict(self, state_dict, strict=True):
        return self.module.load_state_dict(state_dict, strict)


def _next_step():
    group.where["step"] += 1


def _broadcast(bucket, src=0, owner=None):
    group.broadcast_array(bucket.pack([t.array for t in bucket.tensors]), src, owner)
    for tensor, values in bucket.unpacked():
        tensor.array[...] = values
        bump_version(tensor)


def _check_same_state(named):
    """Every rank must hold the same parameter and buffer names, shapes and dtypes; otherwise a
    clear error (on every rank) naming the first difference."""
    mine = [(name, tuple(t.shape), str(t.dtype)) for name, t in named]
    everyone = group.allgather_object(mine, "DistributedDataParallel")
    if all(entries == everyone[0] for entries in everyone):
        return
    if len({len(entries) for entries in everyone}) > 1:
        counts = ", ".join(f"rank {r}: {len(e)}" for r, e in enumerate(everyone))
        raise ValueError(f"DistributedDataParallel: the ranks' models differ in their number of "
                         f"parameters and buffers ({counts})")
    for entries in zip(*everyone):
        if any(entry != entries[0] for entry in entries):
            described = ", ".join(f"rank {r}: {name!r} shape {shape} {dtype}"
                                  for r, (name, shape, dtype) in enumerate(entries))
            raise ValueError(f"DistributedDataParallel: the ranks' models differ ({described}); "
                             "build the same model on every rank")
