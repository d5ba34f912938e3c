"""minigrad.distributed, SyncBatchNorm, DistributedDataParallel and DistributedSampler.

In this process: the API in a world of one (MPI's singleton start), gradchecks of the
differentiable collectives, of sync_normalize and of SyncBatchNorm's fused step (also against
PyTorch's batch_norm), and DistributedSampler against PyTorch's.
Under mpiexec (tests/mpi_checks.py, one launch per world size, every check inside it; and
tests/mpi_faults.py): the multi-process results. Everything here skips, with the reason, only
where mpi4py or mpiexec is missing (`pip install 'minigrad[distributed]'`).
"""
import datetime
import itertools
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
import torch.utils.data

import minigrad as mg

HERE = pathlib.Path(__file__).resolve().parent
try:
    import mpi4py  # noqa: F401
    MISSING = None
except ImportError:
    MISSING = "mpi4py is not installed (pip install 'minigrad[distributed]')"
MPIEXEC = shutil.which("mpiexec", path=os.pathsep.join(
    [str(pathlib.Path(sys.executable).parent), os.environ.get("PATH", "")]))
if MISSING is None and MPIEXEC is None:
    MISSING = "mpiexec is not installed (pip install 'minigrad[distributed]')"
needs_mpi = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")
LAUNCH_TIMEOUT = 120   # seconds; a launch takes a few on an idle machine


def mpiexec(ranks, script, *args):
    """Run `script` on `ranks` processes (root and more ranks than cores allowed), bounded; a
    collective that waits 30 s for a peer aborts the job (a hang fails fast, with a report)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "PRTE_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent), env.get("PYTHONPATH", "")])
    env["MINIGRAD_DIST_TIMEOUT"] = "30"
    command = [MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-n", str(ranks),
               sys.executable, str(HERE / script), *args]
    return subprocess.run(command, capture_output=True, text=True, env=env,
                          timeout=LAUNCH_TIMEOUT)


# ------------------------------------------------------------------------------- multi-process
CHECK_NAMES = [line.split("(")[0][4:] for line in (HERE / "mpi_checks.py").read_text().split(
    "\n@check\n")[1:]]
_results = {}


def results(ranks, scratch):
    """{check name: {rank: error}} from one launch of mpi_checks.py on `ranks` ranks."""
    if ranks not in _results:
        done = mpiexec(ranks, "mpi_checks.py", str(scratch))
        found = dict(json.loads(line[7:]).values() for line in done.stdout.splitlines()
                     if line.startswith("RESULT "))
        if done.returncode or not found:
            failure = {"launch": f"mpiexec exited with {done.returncode}:\n{done.stdout}\n"
                                 f"{done.stderr}"}
            found = {name: failure for name in CHECK_NAMES}
        _results[ranks] = found
    return _results[ranks]


@needs_mpi
@pytest.mark.parametrize("ranks", [2, 3])
@pytest.mark.parametrize("name", CHECK_NAMES)
def test_under_mpiexec(name, ranks, tmp_path_factory):
    errors = results(ranks, tmp_path_factory.mktemp(f"mpi{ranks}")).get(
        name, {"all": "the check did not report"})
    assert not errors, "\n".join(f"rank {r}: {e}" for r, e in errors.items())


def test_the_check_list_is_read():
    assert len(CHECK_NAMES) >= 10 and "collectives_in_place" in CHECK_NAMES


@needs_mpi
def test_an_exception_on_one_rank_aborts_the_job_with_its_message():
    done = mpiexec(2, "mpi_faults.py", "raise")
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "deliberate failure on rank 1" in output and "rank 1 aborts the job" in output, output
    assert "unnoticed" not in output


@needs_mpi
def test_a_killed_rank_ends_the_job_with_an_error():
    done = mpiexec(2, "mpi_faults.py", "kill")
    assert done.returncode != 0 and "unnoticed" not in done.stdout, done.stdout + done.stderr


# what each fault of rank 1 at step 3 must end the job with (the timeout is 60 s: not reached),
# as regular expressions: where either rank may be the one that ends the job, either's message
SWALLOWED = ("rank 0 is at step 3, but the 2 ranks' steps \\(mod 8388608\\) add up to 7, not 6: "
             "a rank skipped or repeated a step .*; rank 1: step 4|rank 1 is at step 4, but the 2 "
             "ranks' steps \\(mod 8388608\\) add up to 7, not 8: a rank skipped or repeated a "
             "step .*; rank 0: step 3")
FAULTS = {
    "swallow": [SWALLOWED],
    "catch": ["rank 0 waits in all_reduce \\(collective 10, step 3\\), but rank 1 waits in "
              "broadcast \\(collective 10, step 4\\)|rank 1 waits in broadcast \\(collective 10, "
              "step 4\\), but rank 0 waits in all_reduce \\(collective 10, step 3\\)",
              "the ranks no longer make the same calls"],
    "uneven": ["rank 1 waits in distributed.all_reduce \\(collective 9, step 4\\), but rank 0 "
               "waits in all_reduce \\(collective 9, step 5\\)|rank 0 waits in all_reduce "
               "\\(collective 9, step 5\\), but rank 1 waits in distributed.all_reduce "
               "\\(collective 9, step 4\\)", "ran out of data early"],
    "exit": [re.escape("rank 1 exited after 6 collectives, while rank 0 waits for it in "
                       "all_reduce (collective 7, step 3)")],
    "short": [re.escape("rank 1 exited after 8 collectives, while rank 0 waits for it in "
                        "all_reduce (collective 9, step 5)")],
    "delete": [re.escape("rank 1 deleted its DistributedDataParallel after 6 collectives, while "
                         "rank 0 waits for it in all_reduce (collective 7, step 3) (uneven "
                         "inputs: train inside `with ddp.join():`)")],
    "dtype": [re.escape("DistributedDataParallel: 'weight' is now float64 of shape (2, 4) on "
                        "rank 1, but was float32 of shape (2, 4) when the model was wrapped")],
}


@needs_mpi
@pytest.mark.parametrize("mode", sorted(FAULTS))
def test_a_faulty_rank_ends_the_job_with_a_message_naming_it(mode):
    """Within seconds, not at the collective timeout (60 s here; 30 minutes by default): ranks
    out of step (`catch`, `uneven`: each waits in a different collective) find it out by asking
    each other where they are after a second of waiting."""
    started = time.monotonic()
    done = mpiexec(2, "mpi_faults.py", mode)
    output = done.stdout + done.stderr
    assert done.returncode != 0 and "unnoticed" not in output, output
    for expected in FAULTS[mode]:
        assert re.search(expected, output), output
    assert time.monotonic() - started < 55, "the fault was noticed only at the timeout"
    assert "Aborting the job" in output or "aborts the job" in output, output


@needs_mpi
def test_a_rank_that_does_not_arrive_is_named_after_the_timeout():
    """Rank 1 computes for ten minutes at step 3; with a 5 s timeout ranks 0 and 2 abort the
    job well within the launch's two minutes, naming the collective, the step and the ranks."""
    done = mpiexec(3, "mpi_faults.py", "stuck", "5")
    output = done.stdout + done.stderr
    assert done.returncode != 0 and "unnoticed" not in output, output
    assert ("waited 5 s in all_reduce (collective 7, step 3); did not arrive: rank 1 (in no "
            "collective: still computing, stuck, or out of data); arrived: ") in output, output
    assert "arrived: 2" in output or "arrived: 0" in output, output


# ------------------------------------------------------------------------------- world of one
@pytest.fixture(scope="module")
def dist():
    if MISSING:
        pytest.skip(MISSING)
    import minigrad.distributed as dist

    dist.init_process_group()
    yield dist
    if dist.is_initialized():   # leave no group behind for the tests of other modules
        dist.destroy_process_group()


def test_importing_minigrad_does_not_import_mpi4py():
    code = "import sys, minigrad, minigrad.distributed; print('mpi4py' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(HERE.parent)})
    assert done.stdout.strip() == "False", done.stderr


def test_without_mpi4py_the_error_names_the_extra():
    code = ("import sys; sys.modules['mpi4py'] = None\n"
            "import minigrad.distributed as dist\n"
            "try:\n    dist.init_process_group()\n"
            "except ImportError as e:\n    print(e)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(HERE.parent)})
    assert "pip install 'minigrad[distributed]'" in done.stdout, done.stdout + done.stderr


def test_before_init_the_error_says_what_to_call(monkeypatch):
    from minigrad.distributed import group

    monkeypatch.setitem(group._state, "comm", None)   # as in a process that never called init
    with pytest.raises(RuntimeError, match="init_process_group"):
        group.get_rank()
    with pytest.raises(RuntimeError, match="init_process_group"):
        mg.nn.parallel.DistributedDataParallel(mg.nn.Linear(2, 2))


def test_world_of_one(dist):
    assert dist.is_initialized() and dist.get_rank() == 0 and dist.get_world_size() == 1
    t = mg.tensor([1.0, -2.0])
    for op in ("sum", "mean", "max", "min"):
        assert dist.all_reduce(t, op) is t and t.tolist() == [1.0, -2.0]
    assert dist.all_gather([], t)[0].tolist() == [1.0, -2.0]
    dist.barrier()
    with pytest.raises(ValueError, match="op must be one of"):
        dist.all_reduce(t, "prod")
    with pytest.raises(ValueError, match="src 1 is not a rank"):
        dist.broadcast(t, src=1)


def test_init_takes_a_timeout_as_pytorch_does(dist, monkeypatch):
    from minigrad.distributed import group

    assert group.DEFAULT_TIMEOUT == datetime.timedelta(minutes=30)
    for bad in (5, datetime.timedelta(0)):
        with pytest.raises(ValueError, match="timeout must be a positive datetime.timedelta"):
            dist.init_process_group(timeout=bad)
    monkeypatch.setenv("MINIGRAD_DIST_TIMEOUT", "7.5")
    dist.init_process_group()
    assert group._state["timeout"] == 7.5
    dist.init_process_group(timeout=datetime.timedelta(seconds=3))
    assert group._state["timeout"] == 3
    monkeypatch.delenv("MINIGRAD_DIST_TIMEOUT")
    dist.init_process_group()
    assert group._state["timeout"] == 1800


def test_ddp_join_in_a_world_of_one_is_plain_training(dist):
    model = mg.nn.Linear(3, 1, dtype="float64")
    ddp = mg.nn.parallel.DistributedDataParallel(model)
    x = mg.randn(4, 3, dtype="float64")
    with ddp.join():
        ddp(x).sum().backward()
    expected = x.numpy().sum(axis=0)
    np.testing.assert_allclose(model.weight.grad.numpy()[0], expected, rtol=1e-12)
    with pytest.raises(ValueError, match="SyncBatchNorm layers"):
        with mg.nn.parallel.DistributedDataParallel(mg.nn.SyncBatchNorm(2)).join():
            pass


def test_differentiable_collectives_gradcheck(dist):
    x = mg.randn(3, 2, dtype="float64", requires_grad=True)
    assert mg.gradcheck(lambda x: dist.nn.all_reduce(x * x, "mean"), [x])
    assert mg.gradgradcheck(lambda x: dist.nn.all_reduce(x * x), [x])
    assert mg.gradcheck(lambda x: dist.nn.all_gather(x * x)[0], [x])
    assert mg.gradcheck(lambda x: dist.nn.broadcast(x * x), [x])


@pytest.mark.parametrize("axes", [(0, 2, 3), (0,), (1, 2, 3)])
def test_sync_normalize_in_a_world_of_one_is_normalize(dist, axes):
    shape = (4, 3, 2, 2) if axes != (0,) else (5, 3)
    x = mg.tensor(np.random.default_rng(0).normal(100.0, 0.01, shape), requires_grad=True)
    y, mean, var, count = dist.sync_normalize(x, axes)
    y_ref, mean_ref, var_ref = mg.ops.normalize(x, axes)
    np.testing.assert_allclose(y.detach().numpy(), y_ref.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(var.numpy(), var_ref.numpy(), rtol=1e-9)
    assert mean.shape == mean_ref.shape and not mean.requires_grad
    assert count == x.numel() // mean.numel()
    assert mg.gradcheck(lambda x: dist.sync_normalize(x, axes)[0], [x])
    assert mg.gradgradcheck(lambda x: dist.sync_normalize(x, axes)[0], [x])


@pytest.mark.parametrize("dtype, tol", [("float64", 1e-12), ("float32", 1e-5)])
@pytest.mark.parametrize("affine", [True, False])
def test_sync_batch_norm_in_a_world_of_one_is_pytorchs_batch_norm(dist, dtype, tol, affine):
    """The fused SyncBatchNorm step (one op) against torch's batch_norm and against the
    composed one (sync_normalize, mul, add): forward and the three gradients."""
    from minigrad.distributed.sync_batch_norm import composed_sync_batch_norm, sync_batch_norm

    rng = np.random.default_rng(1)
    x, g = (rng.normal(3.0, 0.5, (4, 3, 2, 5)).astype(dtype) for _ in range(2))
    gamma, beta = (rng.normal(size=3).astype(dtype) for _ in range(2))
    found = []
    for step in (sync_batch_norm, composed_sync_batch_norm):
        ours = [mg.tensor(a, requires_grad=True) for a in (x, gamma, beta)]
        y, mean, var, count = step(ours[0], *(ours[1:] if affine else (None, None)))
        (y * mg.tensor(g)).sum().backward()
        assert count == 40 and mean.shape == var.shape == (1, 3, 1, 1) and y.dtype == ours[0].dtype
        found.append([y.detach().numpy()] + [t.grad.numpy() for t in ours[:3 if affine else 1]])
    theirs = [torch.tensor(a, requires_grad=True) for a in (x, gamma, beta)]
    y = torch.nn.functional.batch_norm(theirs[0], None, None, *(theirs[1:] if affine else ()),
                                       training=True)
    (y * torch.tensor(g)).sum().backward()
    expected = [y.detach().numpy()] + [t.grad.numpy() for t in theirs[:3 if affine else 1]]
    for fused, composed, torch_value in zip(*found, expected):
        np.testing.assert_allclose(fused, torch_value, rtol=tol, atol=tol)
        np.testing.assert_allclose(fused, composed, rtol=tol, atol=tol)


def test_sync_batch_norm_gradcheck_and_second_derivatives(dist):
    from minigrad.distributed.sync_batch_norm import sync_batch_norm

    rng = np.random.default_rng(2)
    x, gamma, beta = (mg.tensor(rng.normal(size=shape), requires_grad=True)
                      for shape in ((5, 2, 3), (2,), (2,)))
    assert mg.gradcheck(lambda *t: sync_batch_norm(*t)[0], [x, gamma, beta])
    assert mg.gradgradcheck(lambda *t: sync_batch_norm(*t)[0], [x, gamma, beta])
    assert mg.gradcheck(lambda x: sync_batch_norm(x)[0], [x])


def test_sync_normalize_errors(dist):
    with pytest.raises(ValueError, match="more than one value per statistic"):
        dist.sync_normalize(mg.randn(1, 3), (0,))
    with pytest.raises(TypeError, match="floating"):
        dist.sync_normalize(mg.tensor([[1, 2]]), (0,))


def test_sync_batchnorm_alone_is_batchnorm():
    x = mg.randn(6, 3, 2, 2)
    sync, plain = mg.nn.SyncBatchNorm(3, momentum=0.2), mg.nn.BatchNorm2d(3, momentum=0.2)
    np.testing.assert_array_equal(sync(x).detach().numpy(), plain(x).detach().numpy())
    assert list(sync.state_dict()) == list(plain.state_dict())
    np.testing.assert_array_equal(sync.running_var.numpy(), plain.running_var.numpy())
    with pytest.raises(ValueError, match="SyncBatchNorm\\(3\\): expected 2-d or"):
        sync(mg.randn(3))
    assert "SyncBatchNorm(3, eps=1e-05, momentum=0.2" in repr(sync)


def test_ddp_in_a_world_of_one_wraps_the_model(dist):
    model = mg.nn.Sequential(mg.nn.Linear(3, 2), mg.nn.BatchNorm1d(2))
    ddp = mg.nn.parallel.DistributedDataParallel(model)
    assert ddp.module is model and list(ddp.state_dict()) == list(model.state_dict())
    x = mg.randn(4, 3)
    ddp(x).sum().backward()
    grads = [p.grad.numpy().copy() for p in model.parameters()]
    model.zero_grad()
    model(x).sum().backward()
    for g, p in zip(grads, model.parameters()):
        np.testing.assert_allclose(g, p.grad.numpy(), rtol=1e-6, atol=1e-6)


def test_collectives_and_ddp_count_their_in_place_writes(dist):
    """As every in-place writer does (version.bump_version): a graph that saved the tensor
    before the write refuses its new values."""
    t = mg.tensor([1.0, -2.0])
    for write in (dist.all_reduce, dist.broadcast, lambda t: dist.all_gather([t], t)):
        before = t._version
        write(t)
        assert t._version == before + 1
    model, plain = mg.nn.Linear(3, 2), mg.nn.Linear(3, 2)
    before = [p._version for p in model.parameters()]
    ddp = mg.nn.parallel.DistributedDataParallel(model)   # broadcasts rank 0's parameters
    assert [p._version for p in model.parameters()] == [v + 1 for v in before]
    x = mg.randn(4, 3)
    for _ in range(2):   # the second backward adds into .grad, then DDP writes the average
        ddp(x).sum().backward()
        plain(x).sum().backward()
    assert [p.grad._version for p in model.parameters()] == [
        p.grad._version + 2 for p in plain.parameters()]


# ------------------------------------------------------------------------------- sampler
@pytest.mark.parametrize("shuffle", [False, True])
def test_distributed_sampler_matches_pytorch(shuffle):
    for n, replicas, drop_last in itertools.product([0, 1, 2, 5, 7, 10, 11, 16], [1, 2, 3, 4],
                                                    [False, True]):
        ours = [list(mg.data.DistributedSampler(range(n), replicas, r, shuffle, 0, drop_last))
                for r in range(replicas)]
        theirs = [list(torch.utils.data.DistributedSampler(range(n), replicas, r, shuffle, 0,
                                                           drop_last))
                  for r in range(replicas)]
        where = (n, replicas, drop_last)
        assert [len(o) for o in ours] == [len(t) for t in theirs], where
        if not shuffle:
            assert ours == theirs, where
        # the same multiset of indices: the padding (repeats) or dropping matches
        flat = sorted(sum(ours, []))
        if drop_last:
            assert len(set(flat)) == len(flat) == sum(len(t) for t in theirs), where
        else:
            assert set(flat) == set(range(n)) and len(flat) == sum(len(t) for t in theirs), where


def test_distributed_sampler_epochs_and_errors():
    sampler = mg.data.DistributedSampler(range(10), 2, 1, seed=4)
    first = list(sampler)
    assert list(sampler) == first
    sampler.set_epoch(1)
    assert list(sampler) != first and sorted(list(sampler)) != []
    with pytest.raises(ValueError, match="rank 2 is not in \\[0, 1\\]"):
        mg.data.DistributedSampler(range(10), 2, 2)
    with pytest.raises(ValueError, match="exclude each other"):
        mg.data.DataLoader(range(4), sampler=sampler, shuffle=True)


@needs_mpi
def test_the_example_trains_on_two_ranks_and_only_rank_0_prints_and_saves(tmp_path):
    try:
        mg.data.MNIST(train=False, download=False)
    except Exception as error:   # no data here: the example cannot run
        pytest.skip(f"MNIST is not available offline: {error}")
    out = tmp_path / "run"
    done = mpiexec(2, "../examples/mnist_lenet_bn.py", "--distributed", "--epochs", "1",
                   "--limit", "128", "--plain", "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("distributed: 2 ranks, 32 images per rank per step"), lines
    assert sum(line.startswith("epoch 1:") for line in lines) == 1, lines   # rank 0 alone
    assert "(identical)" in done.stdout
    assert sorted(p.name for p in out.iterdir()) == ["curves.png", "lenet_bn.safetensors"]


def test_backward_end_hook_sees_the_accumulated_leaves():
    """The engine hook DDP uses: after backward() (not grad()), with the leaves it filled."""
    seen = []
    handle = mg.hooks.register_backward_end_hook(
        lambda leaves: seen.append([(leaf.grad.tolist(), leaf is w) for leaf in leaves]))
    w = mg.tensor([1.0, 2.0], requires_grad=True)
    (w * w).sum().backward()
    mg.grad((w * w).sum(), [w])
    handle.remove()
    (w * 3.0).sum().backward()
    assert seen == [[([2.0, 4.0], True)]]
