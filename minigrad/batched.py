"""Batched tensors: what a function sees inside `mg.func.vmap`, and the per-thread vmap levels.

vmap calls a function once, on inputs that each carry one more axis, the batch. Each input is
wrapped in a `BatchedTensor`: a tensor whose `value` holds the batch at axis 0, at a `level`
(the depth of the vmap that made it; vmap inside vmap nests one wrapper in another). The
function sees the shape of one example (`shape` leaves the batch out), and every op it calls
reaches `Op.apply`, which hands a call with a batched input to `dispatch` (set here while a
vmap runs): it unwraps the inputs of the highest level, runs the op's batching rule on their
values (which calls the op itself, once, on the whole batch; recorded on the tape as usual)
and wraps the outputs again (minigrad/func/batching.py). So a backward formula that meets a
batched gradient is batched the same way, and `grad` inside vmap differentiates the values.
"""
from .tensor import Tensor


class BatchedTensor(Tensor):
    """A tensor inside vmap: `value` (a tensor, or a BatchedTensor of an outer vmap) holds the
    batch at axis 0; this tensor is one example of it. It has no array of its own."""

    __slots__ = ("value", "level")

    def __init__(self, value, level):
        self.value, self.level = value, level
        self._grad, self._node, self._index = None, None, 0
        self._backend, self._version_counter = value._backend, value._version_counter

    @property
    def array(self):
        raise RuntimeError(
            f"vmap: a batched tensor (one example of shape {self.shape}, batch of "
            f"{self.value.shape[0]}) has no array of its own: reading or writing its values "
            "(item(), numpy(), in-place writes, a Python branch on a value) cannot be batched. "
            "Compute with minigrad ops, or move that step out of the vmapped function")

    shape = property(lambda self: self.value.shape[1:])
    ndim = property(lambda self: self.value.ndim - 1)
    dtype = property(lambda self: self.value.dtype)
    requires_grad = property(lambda self: self.value.requires_grad)

    def detach(self):
        return BatchedTensor(self.value.detach(), self.level)

    def numel(self):
        size = 1
        for n in self.shape:
            size *= n
        return size

    def __repr__(self):
        return f"BatchedTensor(lvl={self.level}, bdim=0, value={self.value!r})"


def unwrapped(t):
    """(the tensor under every vmap level, the levels it is batched at, outermost first): its
    axes 0, 1, ... are the batches of those levels, in that order."""
    found = []
    while isinstance(t, BatchedTensor):
        found.append(t.level)
        t = t.value
    return t, found[::-1]


def wrapped(t, at):
    """The tensor `t` whose first axes are the batches of the levels `at` (outermost first),
    seen inside those vmaps: the inverse of `unwrapped`."""
    for level in at:
        t = BatchedTensor(t, level)
    return t
