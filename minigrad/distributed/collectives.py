"""Collectives on tensors, in place and unrecorded, with PyTorch's names and arguments (for
gradients through a collective, see `minigrad.distributed.nn`).

Every call first compares the ranks' calls (kind, arguments, shape, dtype) in one all_gather of
128 bytes per rank (`group.agree`), so ranks that disagree get an error naming each rank's call
instead of garbage or a hang: one small extra message per call.
"""
from ..tensor import Tensor, as_tensor
from ..version import bump_version
from . import group


def describe(what, tensor, arguments=""):
    """The description of a call that every rank's must equal, e.g.
    "all_reduce(op='sum') of a tensor of shape (3,) float32 at step 2"."""
    if not isinstance(tensor, Tensor):
        raise TypeError(f"distributed.{what}: expected a Tensor, got {type(tensor).__name__}")
    return (f"{what}({arguments}) of a tensor of shape {tensor.shape} {tensor.dtype} at step "
            f"{group.where['step']}")


def _checked(tensor, what, arguments=""):
    group.agree(f"distributed.{what}", describe(what, tensor, arguments))
    return tensor


def all_reduce(tensor, op="sum"):
    """In place: `tensor` becomes its sum, mean, max or min over all ranks (elementwise)."""
    group.allreduce_array(_checked(tensor, "all_reduce", f"op={op!r}").array, op)
    bump_version(tensor)
    return tensor


def broadcast(tensor, src=0):
    """In place: `tensor` becomes rank `src`'s on every rank."""
    group.broadcast_array(_checked(tensor, "broadcast", f"src={src}").array, src)
    bump_version(tensor)
    return tensor


def all_gather(tensor_list, tensor):
    """Fill `tensor_list` (world_size tensors, or an empty list to append to) with every rank's
    `tensor`, in rank order."""
    gathered = group.allgather_array(_checked(tensor, "all_gather").array)
    if not tensor_list:
        tensor_list.extend(as_tensor(a) for a in gathered)   # each a view of one fresh array
        return tensor_list
    if len(tensor_list) != len(gathered):
        raise ValueError(f"distributed.all_gather: tensor_list has {len(tensor_list)} tensors "
                         f"for a world of {len(gathered)}")
    for out, array in zip(tensor_list, gathered):
        if out.shape != tensor.shape:
            raise ValueError(f"distributed.all_gather: tensor_list holds a tensor of shape "
                             f"{out.shape} for gathered tensors of shape {tensor.shape}")
        out.array[...] = array
        bump_version(out)
    return tensor_list
