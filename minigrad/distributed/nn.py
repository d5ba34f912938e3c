"""Differentiable collectives (PyTorch's `torch.distributed.nn`): each returns a new tensor and
is recorded on the tape, so a loss computed after a collective has gradients on every rank.

Every rank's backward computes the gradient of the sum of all ranks' losses, so the backward of
a collective is again a collective (an all_reduce of the incoming gradients).
"""
from ..ops import getitem, mul
from ..ops.base import Op
from . import group
from .collectives import describe


class AllReduce(Op):
    """y = sum over ranks of x (op "sum"), or that sum / N (op "mean"); dx = all_reduce(g, op)."""

    @staticmethod
    def forward(ctx, x, *, op="sum"):
        if op not in ("sum", "mean"):
            raise ValueError(f"distributed.nn.all_reduce: op must be 'sum' or 'mean' (the "
                             f"differentiable ones), not {op!r}")
        ctx.op = op
        return group.allreduce_array(ctx.xp.array(x), op)

    @staticmethod
    def backward(ctx, g):
        return AllReduce.apply(g, op=ctx.op)


class AllGather(Op):
    """y = every rank's x stacked, shape (N, *x.shape); dx = (all_reduce(g, "sum"))[rank]."""

    @staticmethod
    def forward(ctx, x):
        return group.allgather_array(x)

    @staticmethod
    def backward(ctx, g):
        return getitem(AllReduce.apply(g, op="sum"), group.get_rank())


class Broadcast(Op):
    """y = rank src's x on every rank; dx = all_reduce(g, "sum") on rank src, 0 elsewhere."""

    @staticmethod
    def forward(ctx, x, *, src=0):
        ctx.src = src
        return group.broadcast_array(ctx.xp.array(x), src)

    @staticmethod
    def backward(ctx, g):
        total = AllReduce.apply(g, op="sum")
        return total if group.get_rank() == ctx.src else mul(total, 0.0)


def _checked(tensor, what, arguments=""):
    """`tensor`, once every rank has made the same call (see `collectives`)."""
    group.agree(f"distributed.nn.{what}", describe(what, tensor, arguments))
    return tensor


def all_reduce(tensor, op="sum"):
    """A new tensor: `tensor` summed (or averaged) over ranks, differentiably."""
    return AllReduce.apply(_checked(tensor, "all_reduce", f"op={op!r}"), op=op)


def all_gather(tensor):
    """A tuple with every rank's `tensor`, in rank order, differentiably."""
    stacked = AllGather.apply(_checked(tensor, "all_gather"))
    return tuple(getitem(stacked, r) for r in range(stacked.shape[0]))


def broadcast(tensor, src=0):
    """A new tensor holding rank `src`'s `tensor` on every rank, differentiably."""
    return Broadcast.apply(_checked(tensor, "broadcast", f"src={src}"), src=src)
