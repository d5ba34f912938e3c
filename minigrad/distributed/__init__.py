"""Data-parallel training over MPI (mpi4py over Open MPI), with PyTorch's names.

    import minigrad.distributed as dist
    dist.init_process_group()          # under `mpiexec -n N`: N ranks; alone: a world of one
    dist.destroy_process_group()       # leave it at the end
    dist.get_rank(), dist.get_world_size(), dist.barrier()
    dist.all_reduce(t, op="sum")       # in place; also "mean", "max", "min"
    dist.broadcast(t, src=0); dist.all_gather(tensor_list, t)
    dist.nn.all_reduce(t)              # differentiable: returns a new tensor
    dist.sync_normalize(x, axes)       # normalize with statistics over every rank

The layers are `minigrad.nn.SyncBatchNorm` and `minigrad.nn.parallel.DistributedDataParallel`;
the sampler `minigrad.data.DistributedSampler`. Importing this package never imports mpi4py:
that happens at `init_process_group()`, with a clear error naming the extra
(`pip install 'minigrad[distributed]'`) when it is missing. See docs/distributed.md.
"""
from . import nn
from .collectives import all_gather, all_reduce, broadcast
from .group import (
    barrier,
    destroy_process_group,
    get_rank,
    get_world_size,
    init_process_group,
    is_initialized,
    stats,
)
from .sync_normalize import sync_normalize

__all__ = ["all_gather", "all_reduce", "barrier", "broadcast", "destroy_process_group",
           "get_rank", "get_world_size", "init_process_group", "is_initialized", "nn", "stats",
           "sync_normalize"]
