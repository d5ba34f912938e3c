"""Checks that need several processes: run by tests/test_distributed.py as
`mpiexec -n N python tests/mpi_checks.py SCRATCH_DIR` (one launch holds every check).

Each check runs on every rank and does its collectives before its assertions, so a failing
assertion cannot leave a peer waiting. The results travel on a communicator of their own, and
the checks stop at the first failure (a rank that failed mid-way may have left the others'
collectives out of step; the rest are reported as not run). Rank 0 prints one line per check,
`RESULT {"name": ..., "errors": {rank: error}}` (JSON), gathering the errors of all ranks.
"""
import json
import pathlib
import sys
import traceback

import numpy as np

import minigrad as mg
import minigrad.distributed as dist
import minigrad.nn.functional as F
from minigrad import nn
from minigrad.distributed import group

CHECKS = []


def check(function):
    CHECKS.append(function)
    return function


def close(actual, expected, what, rtol=1e-12, atol=1e-12):
    np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), rtol=rtol, atol=atol,
                               err_msg=what)


def same_on_every_rank(arrays):
    """True when the bytes of `arrays` are equal on every rank (one allgather)."""
    mine = b"".join(np.ascontiguousarray(a).tobytes() for a in arrays)
    return len(set(group.communicator().allgather(mine))) == 1


def rank_and_size():
    return dist.get_rank(), dist.get_world_size()


# ---------------------------------------------------------------------------------- collectives
@check
def collectives_in_place():
    r, w = rank_and_size()
    results = {}
    for op in ("sum", "mean", "max", "min"):
        results[op] = dist.all_reduce(mg.tensor([r + 1.0, -r], dtype="float64"), op).numpy()
    cast = dist.broadcast(mg.tensor([float(r)] * 3), src=w - 1).numpy()
    gathered = dist.all_gather([], mg.tensor([r, 2 * r]))
    into = [mg.zeros(2, dtype="int64") for _ in range(w)]
    dist.all_gather(into, mg.tensor([r, 2 * r]))
    total = w * (w + 1) / 2
    close(results["sum"], [total, -(total - w)], "sum")
    close(results["mean"], [total / w, -(total - w) / w], "mean")
    close(results["max"], [w, 0], "max")
    close(results["min"], [1, -(w - 1)], "min")
    close(cast, [w - 1] * 3, "broadcast")
    for out in (gathered, into):
        close(np.stack([t.numpy() for t in out]), [[i, 2 * i] for i in range(w)], "all_gather")


@check
def differentiable_collectives():
    """Each rank's backward gives the gradient of the sum of all ranks' losses."""
    r, w = rank_and_size()
    x = mg.tensor([r + 1.0], dtype="float64", requires_grad=True)
    dist.nn.all_reduce(x * x).sum().backward()          # every rank: sum_r x_r^2
    reduced = x.grad.numpy().copy()
    x.grad = None
    parts = dist.nn.all_gather(x)                        # loss: sum_q (q + 1) x_q
    sum((q + 1.0) * p for q, p in enumerate(parts)).sum().backward()
    gathered = x.grad.numpy().copy()
    x.grad = None
    dist.nn.broadcast(x, src=0).sum().backward()         # every rank: x_0
    cast = x.grad.numpy().copy()
    close(reduced, [2 * w * (r + 1)], "all_reduce backward")
    close(gathered, [w * (r + 1)], "all_gather backward")
    close(cast, [w if r == 0 else 0], "broadcast backward")


@check
def shapes_that_disagree_are_an_error_naming_ranks_and_shapes():
    r, w = rank_and_size()
    try:
        dist.all_reduce(mg.zeros(2 + r))
        message = None
    except ValueError as error:
        message = str(error)
    try:
        nn.parallel.DistributedDataParallel(nn.Linear(3, 2 + r))
        model_message = None
    except ValueError as error:
        model_message = str(error)
    assert message is not None, "no error"
    for q in range(w):
        assert f"rank {q}: all_reduce(op='sum') of a tensor of shape ({2 + q},)" in message, \
            message
    assert "all_reduce" in message, message
    assert model_message and "'weight'" in model_message and "rank 1" in model_message, \
        model_message


def error_of(call):
    """The message of the ValueError that `call()` raises (None if it raises none)."""
    try:
        call()
    except ValueError as error:
        return str(error)
    return None


@check
def calls_that_disagree_in_src_dtype_or_after_a_data_swap_are_errors_naming_each_rank():
    r, w = rank_and_size()
    src = error_of(lambda: dist.broadcast(mg.zeros(3), src=r))
    # the same bytes: 2 float64 on rank 0, 4 float32 elsewhere
    dtype = error_of(lambda: dist.all_reduce(mg.zeros(2, dtype="float64") if r == 0
                                             else mg.zeros(4)))
    t = mg.zeros(4)
    first = error_of(lambda: dist.all_reduce(t))
    if r == w - 1:
        t.data = mg.zeros(2, dtype="float64")   # the same tensor, other bytes
    swapped = error_of(lambda: dist.all_reduce(t))
    differentiable = error_of(lambda: dist.nn.all_reduce(t))
    layer = nn.SyncBatchNorm(2)
    mixed = error_of(lambda: layer(mg.randn(3, 2, dtype="float64" if r == 0 else "float32")))
    assert src and "distributed.broadcast" in src, src
    for q in range(w):
        assert f"rank {q}: broadcast(src={q}) of a tensor of shape (3,) float32" in src, src
    assert "rank 0: all_reduce(op='sum') of a tensor of shape (2,) float64" in dtype, dtype
    assert "of a tensor of shape (4,) float32" in dtype, dtype
    assert first is None, first
    last = f"rank {w - 1}: all_reduce(op='sum') of a tensor of shape (2,) float64"
    assert swapped and last in swapped, swapped
    assert differentiable and "distributed.nn.all_reduce" in differentiable, differentiable
    assert mixed and "sync_normalize: the ranks disagree (rank 0: statistics of shape " \
        "(1, 2) for float64 input" in mixed, mixed
    assert "for float32 input" in mixed, mixed


# ---------------------------------------------------------------------------------- SyncBatchNorm
def local_slice(sizes):
    r = dist.get_rank()
    start = sum(sizes[:r])
    return slice(start, start + sizes[r])


SIZES = {2: [3, 5], 3: [1, 4, 2]}   # unequal local batches; a local batch of one included


def sync_vs_one_bn(shape_tail, sizes=None, **settings):
    """SyncBatchNorm over this rank's slice vs BatchNorm over the whole batch (every rank
    computes the whole batch itself): two training steps, then eval; for the fused layer (one
    op) and the composed one (sync_normalize, mul, add)."""
    for fused in ("auto", False):
        sync_vs_one_bn_of(shape_tail, sizes, fused, **settings)


def sync_vs_one_bn_of(shape_tail, sizes, fused, **settings):
    r, w = rank_and_size()
    sizes, channels = sizes or SIZES[w], shape_tail[0]
    part = local_slice(sizes)
    rng = np.random.default_rng(7)
    layer = {2: nn.BatchNorm1d, 3: nn.BatchNorm1d, 4: nn.BatchNorm2d}[len(shape_tail) + 1]
    one = layer(channels, dtype="float64", **settings)
    sync = nn.SyncBatchNorm(channels, dtype="float64", fused=fused, **settings)
    for p, q in zip(one.parameters(), sync.parameters()):
        q.array[...] = p.array[...] = rng.normal(size=p.shape)
    found = []
    for _ in range(2):
        x = rng.normal(5.0, 0.1, (sum(sizes),) + shape_tail)   # large mean, small spread
        g = rng.normal(size=x.shape)
        whole, mine = mg.tensor(x, requires_grad=True), mg.tensor(x[part], requires_grad=True)
        y_one, y_sync = one(whole), sync(mine)
        (y_one * mg.tensor(g)).sum().backward()
        (y_sync * mg.tensor(g[part])).sum().backward()
        summed = [dist.all_reduce(mg.tensor(p.grad.numpy().copy())).numpy()
                  for p in sync.parameters()]
        found.append((y_one.detach().numpy()[part], y_sync.detach().numpy(),
                     whole.grad.numpy()[part],
                      mine.grad.numpy(), [p.grad.numpy() for p in one.parameters()], summed))
        for p in list(one.parameters()) + list(sync.parameters()):
            p.grad = None
    one.eval()
    sync.eval()
    before = dict(dist.stats.calls)
    x = rng.normal(size=(sum(sizes),) + shape_tail)
    # eval: the running statistics; without them each rank's own batch (as in PyTorch). It
    # communicates nothing, so a rank without data can skip it (BatchNorm rejects empty input).
    eval_one = eval_sync = None
    if sizes[r]:
        eval_one = (one(mg.tensor(x)).detach().numpy()[part] if one.track_running_stats
                    else one(mg.tensor(x[part])).numpy())
        eval_sync = sync(mg.tensor(x[part])).detach().numpy()
    quiet = dist.stats.calls == before
    buffers = [b.numpy() for b in sync.buffers()]
    identical = same_on_every_rank(buffers)
    for y1, ys, dx1, dxs, dp1, dps in found:
        close(ys, y1, "forward")
        close(dxs, dx1, "dx")
        for a, b in zip(dps, dp1):
            close(a, b, "summed dgamma/dbeta")
    for b1, bs in zip(one.buffers(), sync.buffers()):
        close(bs.numpy(), b1.numpy(), "running statistics")
    if sizes[r]:
        close(eval_sync, eval_one, "eval")
    assert quiet, "eval communicated"
    assert identical, "running statistics differ between ranks"


@check
def sync_batchnorm_2d_equals_batchnorm_over_the_concatenated_batch():
    sync_vs_one_bn((3, 4, 5))


@check
def sync_batchnorm_1d_cumulative_average_scale_only():
    sync_vs_one_bn((4,), momentum=None, center=False)


@check
def sync_batchnorm_without_running_stats():
    sync_vs_one_bn((2, 6), track_running_stats=False, affine=False)


@check
def sync_batchnorm_with_an_empty_local_batch():
    sync_vs_one_bn((2, 3), sizes={2: [4, 0], 3: [3, 0, 2]}[dist.get_world_size()])


@check
def sync_batchnorm_second_derivative_matches():
    """create_graph through SyncBatchNorm: d/dx of sum(dL/dx * v) equals BatchNorm's."""
    r, w = rank_and_size()
    sizes = SIZES[w]
    part = local_slice(sizes)
    rng = np.random.default_rng(3)
    x, g, v = (rng.normal(size=(sum(sizes), 2, 3)) for _ in range(3))
    results = []
    for layer, data, grad, vec in ((nn.BatchNorm1d(2, dtype="float64"), x, g, v),
                                   (nn.SyncBatchNorm(2, dtype="float64"), x[part], g[part],
                                    v[part])):
        t = mg.tensor(data, requires_grad=True)
        (dx,) = mg.grad((layer(t) * mg.tensor(grad)).sum(), [t], create_graph=True)
        (ddx,) = mg.grad((dx * mg.tensor(vec)).sum(), [t])
        results.append(ddx.numpy())
    close(results[1], results[0][part], "second derivative", rtol=1e-10, atol=1e-10)


@check
def sync_batchnorm_sends_2c_plus_1_forward_and_2c_backward():
    channels = 6
    layer = nn.SyncBatchNorm(channels)
    x = mg.randn(4, channels, 3, 3, requires_grad=True)
    dist.stats.reset()
    y = layer(x)
    forward = (dict(dist.stats.calls), dict(dist.stats.elements))
    dist.stats.reset()
    y.sum().backward()
    backward = (dict(dist.stats.calls), dict(dist.stats.elements))
    assert forward == ({"all_gather": 1}, {"all_gather": 2 * channels + 1}), forward
    assert backward == ({"all_reduce": 1}, {"all_reduce": 2 * channels}), backward


@check
def convert_sync_batchnorm_keeps_the_state():
    model_memory = "output"
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2, momentum=None, memory="output"),
                          nn.Sequential(nn.Flatten(), nn.BatchNorm1d(8, center=False)))
    model.train()
    model(mg.randn(3, 1, 4, 4))
    before = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    weight = model[1].weight
    converted = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    kinds = [type(m).__name__ for m in converted.modules()]
    after = converted.state_dict()
    assert kinds.count("SyncBatchNorm") == 2 and "BatchNorm2d" not in kinds, kinds
    assert converted[1].weight is weight and converted[1].momentum is None
    assert converted[1].memory == model_memory
    assert converted[2][1].bias is None
    assert list(after) == list(before)
    for k in before:
        close(after[k], before[k], k)


# ---------------------------------------------------------------------------------- DDP
def small_net(norm, seed=0):
    mg.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), norm(3), nn.ReLU(), nn.Flatten(),
                         nn.Linear(3 * 4 * 4, 5)).to(dtype="float64")


@check
def ddp_with_syncbn_takes_the_steps_of_one_process_on_the_global_batch():
    r, w = rank_and_size()
    local = 4
    reference = small_net(nn.BatchNorm2d)
    model = nn.SyncBatchNorm.convert_sync_batchnorm(small_net(nn.BatchNorm2d, seed=r))
    ddp = nn.parallel.DistributedDataParallel(model)   # rank 0's parameters everywhere
    optimizers = [mg.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
                  for m in (reference, ddp)]
    rng = np.random.default_rng(11)
    for _ in range(3):
        x = rng.normal(size=(local * w, 2, 4, 4))
        target = rng.integers(0, 5, local * w)
        mine = slice(r * local, (r + 1) * local)
        for net, data, labels, opt in ((reference, x, target, optimizers[0]),
                                       (ddp, x[mine], target[mine], optimizers[1])):
            opt.zero_grad()
            F.cross_entropy(net(mg.tensor(data)), mg.tensor(labels)).backward()
            opt.step()
    state = [v for v in ddp.state_dict().values()]
    identical = same_on_every_rank(state)
    assert list(ddp.state_dict()) == list(reference.state_dict())
    for (k, a), b in zip(reference.state_dict().items(), state):
        close(b, a, k, rtol=1e-10, atol=1e-12)
    assert identical, "parameters or buffers differ between ranks"
    assert ddp.module is model


@check
def ddp_with_syncbn_compiled_takes_the_eager_steps_bit_for_bit():
    """mg.compile of a DDP + SyncBatchNorm training step: its collectives (the buffers'
    broadcast, SyncBatchNorm's statistics and sums, the gradients' average) are calls of the
    replayed program, made in the same order on every rank; the training is eager mode's."""
    r, _ = rank_and_size()
    nets = [nn.parallel.DistributedDataParallel(nn.SyncBatchNorm.convert_sync_batchnorm(
        small_net(nn.BatchNorm2d, seed=r))) for _ in range(2)]
    optimizers = [mg.optim.SGD(net.parameters(), lr=0.1, momentum=0.9) for net in nets]

    def step_of(net, optimizer):
        def train(x, labels):
            optimizer.zero_grad()
            loss = F.cross_entropy(net(x), labels)
            loss.backward()
            optimizer.step()
            return loss
        return train

    eager, compiled = step_of(nets[0], optimizers[0]), mg.compile(step_of(nets[1], optimizers[1]))
    rng = np.random.default_rng(12 + r)
    losses = []
    for _ in range(6):
        x, labels = mg.tensor(rng.normal(size=(4, 2, 4, 4))), mg.tensor(rng.integers(0, 5, 4))
        losses.append((eager(x, labels).item(), compiled(x, labels).item()))
    states = [[v.numpy() for v in net.state_dict().values()] for net in nets]
    identical = same_on_every_rank(states[1])
    assert all(a == b for a, b in losses), losses
    for a, b in zip(*states, strict=True):
        assert np.array_equal(a, b)
    for p, q in zip(nets[0].parameters(), nets[1].parameters(), strict=True):
        assert np.array_equal(optimizers[0].state[p]["momentum_buffer"],
                              optimizers[1].state[q]["momentum_buffer"])
    assert identical, "parameters or buffers differ between ranks"
    assert compiled.traces == 2 and any(e.program is not None for e in compiled.entries.values())


@check
def ddp_sends_one_message_per_bucket():
    model = small_net(nn.BatchNorm2d)   # plain BN: no SyncBN traffic
    parameters = list(model.parameters())
    counts = []
    for cap in (25, 1e-6):              # everything in one bucket; one bucket per tensor
        ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=cap)
        dist.stats.reset()
        F.cross_entropy(ddp(mg.randn(2, 2, 4, 4, dtype="float64")), mg.tensor([0, 1])).backward()
        counts.append((dist.stats.calls.get("all_reduce"), dist.stats.elements.get("all_reduce")))
        model.zero_grad()
        del ddp
    size = sum(p.numel() for p in parameters)
    assert counts == [(1, size + 1), (len(parameters), size + 1)], counts   # + the step


class CountingCommunicator:
    """One of the group's communicators, counting every call made through it (into `calls`,
    which several may share) but for its size and rank: each is one message exchange (a
    collective), whatever code path made it."""

    def __init__(self, comm, calls):
        self.comm, self.calls = comm, calls

    def __getattr__(self, name):
        attribute = getattr(self.comm, name)
        if name in ("Get_rank", "Get_size") or not callable(attribute):
            return attribute

        def counted(*args, **kwargs):
            self.calls.append(name)
            return attribute(*args, **kwargs)
        return counted


@check
def ddp_with_syncbn_makes_two_collectives_per_layer_and_two_per_step():
    """A step of DDP + SyncBatchNorm with L SyncBN layers: L all_gathers forward, L all_reduces
    backward, one broadcast of every buffer (float64 statistics and int64 counters together) and
    one all_reduce of every gradient; the gradients are those of one process on the batch."""
    r, w = rank_and_size()
    local = 3

    def net(norm):
        mg.manual_seed(0)
        return nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), norm[0](3), nn.ReLU(), nn.Flatten(),
                             nn.Linear(3 * 4 * 4, 6), norm[1](6), nn.ReLU(),
                             nn.Linear(6, 5)).to(dtype="float64")
    reference = net((nn.BatchNorm2d, nn.BatchNorm1d))
    ddp = nn.parallel.DistributedDataParallel(net((nn.SyncBatchNorm, nn.SyncBatchNorm)))
    rng = np.random.default_rng(4)
    saved = group._state["comm"], group._state["channels"]
    counted = []
    for _ in range(2):   # the first step also compares each layer's statistics shapes, once
        x, target = rng.normal(size=(local * w, 2, 4, 4)), rng.integers(0, 5, local * w)
        mine = slice(r * local, (r + 1) * local)
        calls = []   # every communicator's: the world's and each kind of collective's
        group._state["comm"] = CountingCommunicator(saved[0], calls)
        group._state["channels"] = {kind: CountingCommunicator(channel, calls)
                                    for kind, channel in saved[1].items()}
        try:
            ddp.zero_grad()
            F.cross_entropy(ddp(mg.tensor(x[mine])), mg.tensor(target[mine])).backward()
        finally:
            group._state["comm"], group._state["channels"] = saved
        counted.append(calls)
        reference.zero_grad()
        F.cross_entropy(reference(mg.tensor(x)), mg.tensor(target)).backward()
    grads = [p.grad.numpy() for p in ddp.module.parameters()]
    identical = same_on_every_rank(grads)
    assert sorted(counted[1]) == ["Iallgather"] * 2 + ["Iallreduce"] * 3 + ["Ibcast"], counted
    assert len(counted[0]) == len(counted[1]) + 2, counted   # + the two layers' shape checks
    for a, b in zip(grads, reference.parameters()):
        close(a, b.grad.numpy(), "gradient", rtol=1e-10, atol=1e-12)
    assert identical, "gradients differ between ranks"


@check
def ddp_no_sync_accumulates_locally_then_averages():
    r, w = rank_and_size()
    ddp = nn.parallel.DistributedDataParallel(nn.Linear(3, 1, dtype="float64"))
    xs = [mg.tensor(np.full((2, 3), r + 1.0 + k)) for k in range(2)]
    with ddp.no_sync():
        ddp(xs[0]).sum().backward()
    local = ddp.module.weight.grad.numpy().copy()
    ddp(xs[1]).sum().backward()
    averaged = ddp.module.weight.grad.numpy().copy()
    # d/dW sum(x W^T + b) = column sums of x: 2 (r + 1 + k) per input
    close(local, [[2 * (r + 1)] * 3], "inside no_sync")
    expected = np.mean([2 * (q + 1) + 2 * (q + 2) for q in range(w)])
    close(averaged, [[expected] * 3], "after no_sync")


@check
def checkpoint_saved_by_rank_0_loads_on_every_rank():
    r, w = rank_and_size()
    path = pathlib.Path(sys.argv[1]) / "ddp.safetensors"
    ddp = nn.parallel.DistributedDataParallel(small_net(nn.BatchNorm2d, seed=5))
    if r == 0:
        mg.save(ddp.state_dict(), path)
    dist.barrier()                      # the file is complete before anyone reads it
    fresh = nn.parallel.DistributedDataParallel(small_net(nn.BatchNorm2d, seed=9))
    fresh.module[0].weight.array[...] = 0
    fresh.load_state_dict(mg.load(path))
    loaded = list(fresh.state_dict().values())
    identical = same_on_every_rank(loaded)
    for a, b in zip(loaded, ddp.state_dict().values()):
        close(a, b, "loaded")
    assert identical


def join_run(batches, **settings):
    """Rank r trains on `batches[r]` batches inside ddp.join(); returns (its state, the state
    of one process that takes the same steps: at each step the gradient of the sum of the mean
    losses of the ranks that still have a batch, divided as join divides it)."""
    r, w = rank_and_size()
    reference = small_net(nn.BatchNorm2d)
    ddp = nn.parallel.DistributedDataParallel(small_net(nn.BatchNorm2d, seed=r))
    optimizers = [mg.optim.SGD(m.parameters(), lr=0.1) for m in (reference, ddp)]
    rng = np.random.default_rng(5)
    data = [[(rng.normal(size=(3, 2, 4, 4)), rng.integers(0, 5, 3)) for _ in range(n)]
            for n in batches]
    with ddp.join(**settings):
        for x, target in data[r]:
            optimizers[1].zero_grad()
            F.cross_entropy(ddp(mg.tensor(x)), mg.tensor(target)).backward()
            optimizers[1].step()
    for step in range(max(batches)):
        active = [q for q in range(w) if step < batches[q]]
        divisor = w if settings.get("divide_by_initial_world_size", True) else len(active)
        optimizers[0].zero_grad()
        sum(F.cross_entropy(reference(mg.tensor(data[q][step][0])), mg.tensor(data[q][step][1]))
            for q in active).__truediv__(divisor).backward()
        optimizers[0].step()
    return list(ddp.module.parameters()), list(reference.parameters())


@check
def ddp_join_trains_on_uneven_inputs_as_one_process_would():
    r, w = rank_and_size()
    batches = [3 + q for q in range(w)]   # the last rank has the most
    for divide in (True, False):
        mine, expected = join_run(batches, divide_by_initial_world_size=divide)
        identical = same_on_every_rank([p.detach().numpy() for p in mine])
        for a, b in zip(mine, expected):
            close(a.detach().numpy(), b.detach().numpy(), f"divide={divide}",
                  rtol=1e-10, atol=1e-12)
        assert identical, "parameters differ between ranks after join"


@check
def ddp_join_throws_on_every_rank_when_asked_and_refuses_syncbn():
    r, w = rank_and_size()
    ddp = nn.parallel.DistributedDataParallel(nn.Linear(3, 1, dtype="float64"))
    raised = None
    try:
        with ddp.join(throw_on_early_termination=True):
            for _ in range(2 + r):
                ddp(mg.ones(2, 3, dtype="float64")).sum().backward()
    except RuntimeError as error:
        raised = str(error)
    sync = nn.parallel.DistributedDataParallel(nn.SyncBatchNorm(2))
    refused = None
    try:
        with sync.join():
            pass
    except ValueError as error:
        refused = str(error)
    assert raised == "DistributedDataParallel.join: rank(s) 0 ran out of inputs " \
        "(throw_on_early_termination=True)", raised
    assert refused and "throw_on_early_termination=True" in refused, refused


def _small_bn_net(seed):
    """Linear, BatchNorm1d, ReLU, Linear in float64, initialised from `seed`."""
    mg.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.ReLU(),
                         nn.Linear(3, 5)).to(dtype="float64")


@check
def ddp_with_syncbn_and_an_empty_local_batch_on_one_rank():
    """Rank 1 has no samples: as in PyTorch its SyncBatchNorm contributes count 0, its
    gradients are zeros, and every rank takes the step of one process on the others' samples
    (loss: the sum over the global batch / its size, so no rank divides by zero)."""
    r, w = rank_and_size()
    sizes = [4] + [0] + [3] * (w - 2)

    reference = _small_bn_net(0)
    ddp = nn.parallel.DistributedDataParallel(
        nn.SyncBatchNorm.convert_sync_batchnorm(_small_bn_net(r)))
    rng = np.random.default_rng(2)
    x, target = rng.normal(size=(sum(sizes), 4)), rng.integers(0, 5, sum(sizes))
    part = local_slice(sizes)
    for net, data, labels, scale in ((reference, x, target, 1.0),
                                     (ddp, x[part], target[part], w)):
        loss = F.cross_entropy(net(mg.tensor(data)), mg.tensor(labels), reduction="sum")
        (loss * (scale / sum(sizes))).backward()
    grads = [p.grad.numpy() for p in ddp.module.parameters()]
    identical = same_on_every_rank(grads)
    for a, b in zip(grads, reference.parameters()):
        assert np.isfinite(a).all(), "a gradient is not finite"
        close(a, b.grad.numpy(), "gradient", rtol=1e-10, atol=1e-12)
    assert identical


@check
def ddp_mean_loss_with_an_empty_local_batch_takes_pytorchs_step():
    """Rank 1 has no samples and every rank takes the mean of its own loss: rank 1's is NaN (the
    mean of nothing, as PyTorch's), its gradients zeros, and the step every rank takes is
    PyTorch's: the gradients of the other ranks' mean losses, summed and divided by the world
    size; finite, and the same on every rank."""
    r, w = rank_and_size()
    sizes = [4] + [0] + [3] * (w - 2)

    reference = _small_bn_net(0)
    ddp = nn.parallel.DistributedDataParallel(
        nn.SyncBatchNorm.convert_sync_batchnorm(_small_bn_net(r)))
    optimizer = mg.optim.SGD(ddp.parameters(), lr=0.1)
    rng = np.random.default_rng(3)
    x, target = rng.normal(size=(sum(sizes), 4)), rng.integers(0, 5, sum(sizes))
    part = local_slice(sizes)
    loss = F.cross_entropy(ddp(mg.tensor(x[part])), mg.tensor(target[part]))
    loss.backward()
    optimizer.step()
    # one process: the global batch's statistics (SyncBatchNorm's), each rank's mean loss
    features = reference[0](mg.tensor(x))
    normalized = reference[3](reference[2](reference[1](features)))
    bounds = np.cumsum([0] + sizes)
    expected = sum(F.cross_entropy(normalized[bounds[q]:bounds[q + 1]],
                                   mg.tensor(target[bounds[q]:bounds[q + 1]]))
                   for q in range(w) if sizes[q]) / w
    expected.backward()
    params = [p.detach().numpy() for p in ddp.module.parameters()]
    identical = same_on_every_rank(params)
    assert (np.isnan(loss.item()) if sizes[r] == 0 else np.isfinite(loss.item())), loss.item()
    for p, q in zip(ddp.module.parameters(), reference.parameters()):
        assert np.isfinite(p.detach().numpy()).all(), "a parameter is not finite"
        close(p.grad.numpy(), q.grad.numpy(), "gradient", rtol=1e-10, atol=1e-12)
    assert identical, "parameters differ between ranks"


# ---------------------------------------------------------------------------------- sampler
@check
def distributed_sampler_takes_rank_and_size_from_the_group():
    r, w = rank_and_size()
    sampler = mg.data.DistributedSampler(list(range(11)), seed=3)
    sampler.set_epoch(2)
    mine = list(sampler)
    everyone = group.communicator().allgather(mine)
    loader = mg.data.DataLoader(mg.data.TensorDataset(np.arange(11.0)), batch_size=2,
                                sampler=sampler)
    batches = [b[0].numpy().tolist() for b in loader]
    assert len(mine) == len(sampler) == -(-11 // w)
    assert sorted(set(i for part in everyone for i in part)) == list(range(11))
    assert sum(batches, []) == [float(i) for i in mine], (batches, mine)


def main():
    dist.init_process_group()
    results = group.communicator().Dup()   # never confused with the checks' own collectives
    failed = None
    for function in CHECKS:
        name = function.__name__
        if failed is not None:
            errors = {"all": f"not run: the earlier check {failed} failed"}
        else:
            try:
                function()
                error = None
            except Exception as exception:   # reported on rank 0 with the other ranks' errors
                error = f"{type(exception).__name__}: {exception}\n{traceback.format_exc(limit=3)}"
            errors = {r: e[:3000] for r, e in enumerate(results.allgather(error)) if e is not None}
            failed = name if errors else None
        if results.Get_rank() == 0:
            print("RESULT " + json.dumps({"name": name, "errors": errors}), flush=True)

if __name__ == "__main__":
    main()
