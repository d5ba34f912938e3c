"""Checks of data-parallel training on GPUs, where the collectives go through NCCL: run by
tests/test_gpu_distributed.py as `mpiexec -n N python tests/mpi_nccl_checks.py SCRATCH_DIR`
(on the CuPy stand-in, whose NCCL communicator is carried by MPI), with mpi_checks.py's runner
and helpers: the same exactness as on the CPU (one process on the global batch, unequal local
batches)."""
import numpy as np

import minigrad as mg
import minigrad.distributed as dist
import minigrad.nn.functional as F
from minigrad import nn

import mpi_checks
from mpi_checks import SIZES, check, close, local_slice, rank_and_size, same_on_every_rank

mpi_checks.CHECKS.clear()   # this launch runs the checks below, not the CPU ones


def nccl_calls():
    """The stand-in's record of NCCL collectives (method, count), or None on a real GPU."""
    from cupy.cuda import nccl

    return getattr(nccl, "calls", None)


@check
def collectives_on_cuda_tensors_go_through_nccl():
    r, w = rank_and_size()
    calls = nccl_calls()
    before = None if calls is None else len(calls)
    mine = np.arange(6.0).reshape(2, 3) + 10 * r
    every = [np.arange(6.0).reshape(2, 3) + 10 * k for k in range(w)]
    results = {}
    for op, expected in (("sum", sum(every)), ("mean", sum(every) / w),
                         ("max", np.max(every, axis=0))):
        t = mg.tensor(mine, device="cuda")
        dist.all_reduce(t, op=op)
        results[op] = (t, expected)
    strided = mg.tensor(np.zeros((3, 4)) + r, device="cuda")[:, ::2]   # not contiguous
    dist.broadcast(strided, src=w - 1)
    gathered = dist.all_gather([], mg.tensor(mine, device="cuda"))
    for op, (t, expected) in results.items():
        assert t.device == "cuda"
        close(t.numpy(), expected, op)
    close(strided.numpy(), np.full((3, 2), w - 1.0), "broadcast into a strided view")
    for got, expected in zip(gathered, every, strict=True):
        assert got.device == "cuda"
        close(got.numpy(), expected, "all_gather")
    if calls is not None:
        assert [m for m, _ in calls[before:]] == ["allReduce"] * 3 + ["bcast", "allGather"]


@check
def ddp_with_syncbn_on_cuda_takes_the_steps_of_one_process_on_the_global_batch():
    r, w = rank_and_size()
    local = 4
    reference = mpi_checks.small_net(nn.BatchNorm2d)
    model = nn.SyncBatchNorm.convert_sync_batchnorm(mpi_checks.small_net(nn.BatchNorm2d, seed=r))
    ddp = nn.parallel.DistributedDataParallel(model.to("cuda"))   # rank 0's parameters
    optimizers = [mg.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (reference, ddp)]
    rng = np.random.default_rng(11)
    for _ in range(3):
        x = rng.normal(size=(local * w, 2, 4, 4))
        target = rng.integers(0, 5, local * w)
        mine = slice(r * local, (r + 1) * local)
        for net, data, labels, opt, device in (
                (reference, x, target, optimizers[0], "cpu"),
                (ddp, x[mine], target[mine], optimizers[1], "cuda")):
            opt.zero_grad()
            F.cross_entropy(net(mg.tensor(data, device=device)),
                            mg.tensor(labels, device=device)).backward()
            opt.step()
    state = [v.to("cpu").numpy() for v in ddp.state_dict().values()]
    identical = same_on_every_rank(state)
    for (k, a), b in zip(reference.state_dict().items(), state, strict=True):
        close(b, a.numpy(), k, rtol=1e-10, atol=1e-12)
    assert identical, "parameters or buffers differ between ranks"


@check
def sync_batchnorm_on_cuda_with_unequal_batches_equals_batchnorm_on_the_whole_batch():
    r, w = rank_and_size()
    sizes, channels = SIZES.get(w, [5]), 3   # one rank on a single GPU
    part = local_slice(sizes)
    rng = np.random.default_rng(7)
    one = nn.BatchNorm2d(channels, dtype="float64")
    sync = nn.SyncBatchNorm(channels, dtype="float64")
    for p, q in zip(one.parameters(), sync.parameters()):
        q.array[...] = p.array[...] = rng.normal(size=p.shape)
    sync.to("cuda")
    x = rng.normal(5.0, 0.1, (sum(sizes), channels, 3, 3))
    g = rng.normal(size=x.shape)
    whole = mg.tensor(x, requires_grad=True)
    mine = mg.tensor(x[part], requires_grad=True, device="cuda")
    y_one, y_sync = one(whole), sync(mine)
    (y_one * mg.tensor(g)).sum().backward()
    (y_sync * mg.tensor(g[part], device="cuda")).sum().backward()
    summed = [dist.all_reduce(p.grad.detach().clone()).numpy() for p in sync.parameters()]
    close(y_sync.detach().numpy(), y_one.detach().numpy()[part], "forward", rtol=1e-9)
    close(mine.grad.numpy(), whole.grad.numpy()[part], "dx", rtol=1e-9, atol=1e-10)
    for a, p in zip(summed, one.parameters(), strict=True):
        close(a, p.grad.numpy(), "summed dgamma/dbeta", rtol=1e-9, atol=1e-10)
    for b1, bs in zip(one.buffers(), sync.buffers(), strict=True):
        close(bs.to("cpu").numpy(), b1.numpy(), "running statistics", rtol=1e-9)


if __name__ == "__main__":
    mpi_checks.main()
