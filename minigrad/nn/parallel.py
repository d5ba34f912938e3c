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
buffers to every rank.
"""
import contextlib
import weakref

import numpy

from .. import hooks
from ..distributed import group
from ..tensor import from_data
from .module import Module


class _Bucket:
    """Tensors of one dtype laid end to end in one host array: one message carries them all."""

    def __init__(self, tensors):
        self.tensors = tensors
        self.stops = numpy.cumsum([t.numel() for t in tensors]).tolist()
        self.flat = numpy.empty(self.stops[-1], tensors[0].dtype)

    def pack(self, arrays):
        start = 0
        for array, stop in zip(arrays, self.stops):
            if array is None:
                self.flat[start:stop] = 0
            else:
                self.flat[start:stop] = self.tensors[0].backend.to_numpy(array).reshape(-1)
            start = stop
        return self.flat

    def unpacked(self):
        """(tensor, its values in the flat array, on the tensor's device), for each tensor."""
        start = 0
        for tensor, stop in zip(self.tensors, self.stops):
            yield tensor, tensor.backend.asarray(self.flat[start:stop].reshape(tensor.shape))
            start = stop


def _buckets(tensors, cap_bytes):
    """Buckets of tensors grouped by dtype and device, each up to `cap_bytes` (one tensor larger
    than that is a bucket of its own), in the order given."""
    groups = {}
    for t in tensors:
        groups.setdefault((str(t.dtype), t.device), []).append(t)
    buckets = []
    for members in groups.values():
        current, size = [], 0
        for t in members:
            if current and size + t.array.nbytes > cap_bytes:
                buckets.append(_Bucket(current))
                current, size = [], 0
            current.append(t)
            size += t.array.nbytes
        buckets.append(_Bucket(current))
    return buckets


class DistributedDataParallel(Module):
    """Wrap `module` for data-parallel training over the process group; see the module
    docstring. `.module` is the wrapped model and `state_dict()` has its keys."""

    def __init__(self, module, broadcast_buffers=True, bucket_cap_mb=25):
        super().__init__()
        comm = group.communicator()
        self.module = module
        self.broadcast_buffers = broadcast_buffers
        self._sync = True
        named = list(module.named_parameters()) + list(module.named_buffers())
        _check_same_state(comm, named)
        cap = int(bucket_cap_mb * 2 ** 20)
        for bucket in _buckets([t for _, t in named], cap):   # rank 0's state everywhere
            _broadcast(bucket)
        params = [p for _, p in module.named_parameters() if p.requires_grad]
        self._params = {id(p) for p in params}
        self._grad_buckets = _buckets(params[::-1], cap) if params else []
        self._buffer_buckets = _buckets([b for _, b in module.named_buffers()], cap) \
            if list(module.named_buffers()) else []
        owner = weakref.ref(self)   # the engine's hook must not keep this wrapper alive

        def after_backward(leaves):
            if owner() is not None:
                owner()._average_gradients(leaves)
        weakref.finalize(self, hooks.register_backward_end_hook(after_backward).remove)

    def forward(self, *args, **kwargs):
        if self.broadcast_buffers and self.module.training:
            for bucket in self._buffer_buckets:
                _broadcast(bucket)
        return self.module(*args, **kwargs)

    def _average_gradients(self, leaves):
        """After a backward that reached this model's parameters: average their gradients."""
        if not self._sync or not any(id(leaf) in self._params for leaf in leaves):
            return
        for bucket in self._grad_buckets:
            flat = bucket.pack([None if p.grad is None else p.grad.array for p in bucket.tensors])
            group.allreduce_array(flat, "mean")
            for param, values in bucket.unpacked():
                if param.grad is None:
                    param.grad = from_data(values, copy=True)
                else:
                    param.grad.array[...] = values

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


def _broadcast(bucket):
    group.broadcast_array(bucket.pack([t.array for t in bucket.tensors]), 0)
    for tensor, values in bucket.unpacked():
        tensor.array[...] = values


def _check_same_state(comm, named):
    """Every rank must hold the same parameter and buffer names, shapes and dtypes; otherwise a
    clear error (on every rank) naming the first difference."""
    mine = [(name, tuple(t.shape), str(t.dtype)) for name, t in named]
    everyone = comm.allgather(mine)
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
